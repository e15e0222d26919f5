//! The MCP servers the user added. The store keeps each one's transport as
//! the JSON the app hands it (hearth-mcp's `Transport`), without reading
//! it: what a server is, and whether it is valid, is the MCP crate's to say.
//! Names are unique; servers come back in the order they were added.

use rusqlite::params;

use crate::error::{Result, StoreError};
use crate::store::{now_ms, Store};

/// One server as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMcpServer {
    pub name: String,
    /// How to reach it, as JSON.
    pub transport: String,
}

impl Store {
    pub fn mcp_servers(&self) -> Result<Vec<StoredMcpServer>> {
        let mut stmt = self.conn.prepare("SELECT name, transport FROM mcp_servers ORDER BY position, created_at")?;
        let rows = stmt.query_map([], |r| Ok(StoredMcpServer { name: r.get(0)?, transport: r.get(1)? }))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Adds `servers` all or none: a name already taken (or given twice)
    /// adds nothing and says which.
    pub fn add_mcp_servers(&self, servers: &[StoredMcpServer]) -> Result<()> {
        let tx = self.conn.unchecked_transaction()?;
        let next: i64 = tx.query_row("SELECT COALESCE(MAX(position), -1) + 1 FROM mcp_servers", [], |r| r.get(0))?;
        for (i, s) in servers.iter().enumerate() {
            let taken: bool =
                tx.query_row("SELECT EXISTS(SELECT 1 FROM mcp_servers WHERE name = ?1)", [&s.name], |r| r.get(0))?;
            if taken {
                return Err(StoreError::Invalid(format!("a server named “{}” already exists", s.name)));
            }
            tx.execute(
                "INSERT INTO mcp_servers(name, transport, position, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![s.name, s.transport, next + i as i64, now_ms()],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn remove_mcp_server(&self, name: &str) -> Result<()> {
        if self.conn.execute("DELETE FROM mcp_servers WHERE name = ?1", [name])? == 0 {
            return Err(StoreError::Invalid(format!("there is no server named “{name}”")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str) -> StoredMcpServer {
        StoredMcpServer { name: name.into(), transport: format!(r#"{{"type":"stdio","command":"{name}"}}"#) }
    }

    #[test]
    fn servers_are_added_all_or_none_and_keep_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("h.db")).unwrap();
        store.add_mcp_servers(&[server("time"), server("everything")]).unwrap();
        store.add_mcp_servers(&[server("a")]).unwrap();
        let names = |s: &Store| s.mcp_servers().unwrap().into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(&store), ["time", "everything", "a"]);

        let err = store.add_mcp_servers(&[server("b"), server("time")]).unwrap_err();
        assert_eq!(err.to_string(), "a server named “time” already exists");
        let err = store.add_mcp_servers(&[server("c"), server("c")]).unwrap_err();
        assert!(err.to_string().contains("“c”"));
        assert_eq!(names(&store), ["time", "everything", "a"], "nothing of a refused batch is added");

        store.remove_mcp_server("everything").unwrap();
        assert!(store.remove_mcp_server("everything").is_err());
        drop(store);
        let store = Store::open(dir.path().join("h.db")).unwrap();
        assert_eq!(names(&store), ["time", "a"]);
        assert_eq!(store.mcp_servers().unwrap()[0], server("time"));
    }
}
