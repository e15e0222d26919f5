//! OpenAI-compatible endpoints the user added, and which one a
//! conversation runs on. An endpoint's API key is kept where
//! `KeyStorage` says; only `Database` (which the user must choose, where no
//! keychain exists) puts it in this file.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::store::{now_ms, Store};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub struct Endpoint {
    pub id: i64,
    pub name: String,
    /// Up to and including `/v1`.
    pub base_url: String,
    pub key_storage: KeyStorage,
}

/// Where an endpoint's API key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum KeyStorage {
    /// The endpoint takes no key.
    None,
    /// The OS keychain (Keychain, Credential Manager, Secret Service).
    Keychain,
    /// Memory only, until Hearth closes: there was no keychain, and the
    /// user did not ask for the database.
    Session,
    /// This database, unencrypted, because the user asked for it.
    Database,
}

impl KeyStorage {
    fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Keychain => "keychain",
            Self::Session => "session",
            Self::Database => "database",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "keychain" => Self::Keychain,
            "session" => Self::Session,
            "database" => Self::Database,
            _ => Self::None,
        }
    }
}

/// Where a conversation runs: the local model, or an endpoint's model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(tag = "kind", rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum Backend {
    Local,
    #[serde(rename_all = "camelCase")]
    Remote {
        endpoint_id: i64,
        model: String,
    },
}

impl Store {
    /// Adds an endpoint; `api_key` is stored only with `KeyStorage::Database`.
    pub fn add_endpoint(
        &self,
        name: &str,
        base_url: &str,
        key_storage: KeyStorage,
        api_key: Option<&str>,
    ) -> Result<Endpoint> {
        let stored = if key_storage == KeyStorage::Database { api_key } else { None };
        self.conn.execute(
            "INSERT INTO endpoints(name, base_url, key_storage, api_key, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![name, base_url, key_storage.as_str(), stored, now_ms()],
        )?;
        Ok(Endpoint { id: self.conn.last_insert_rowid(), name: name.into(), base_url: base_url.into(), key_storage })
    }

    pub fn endpoints(&self) -> Result<Vec<Endpoint>> {
        let mut stmt = self.conn.prepare("SELECT id, name, base_url, key_storage FROM endpoints ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok(Endpoint {
                id: r.get(0)?,
                name: r.get(1)?,
                base_url: r.get(2)?,
                key_storage: KeyStorage::parse(&r.get::<_, String>(3)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn endpoint(&self, id: i64) -> Result<Endpoint> {
        self.endpoints()?.into_iter().find(|e| e.id == id).ok_or(StoreError::NotFound { what: "endpoint", id })
    }

    /// The key kept in the database, for an endpoint whose storage is `Database`.
    pub fn endpoint_key(&self, id: i64) -> Result<Option<String>> {
        Ok(self.conn.query_row("SELECT api_key FROM endpoints WHERE id = ?1", [id], |r| r.get(0)).optional()?.flatten())
    }

    /// Records where the endpoint's key now is (`api_key` kept only with `Database`).
    pub fn set_endpoint_key_storage(&self, id: i64, key_storage: KeyStorage, api_key: Option<&str>) -> Result<()> {
        let stored = if key_storage == KeyStorage::Database { api_key } else { None };
        let changed = self.conn.execute(
            "UPDATE endpoints SET key_storage = ?1, api_key = ?2 WHERE id = ?3",
            params![key_storage.as_str(), stored, id],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound { what: "endpoint", id });
        }
        Ok(())
    }

    /// Removes an endpoint; its conversations go back to the local model.
    pub fn remove_endpoint(&self, id: i64) -> Result<()> {
        self.conn
            .execute("UPDATE conversations SET endpoint_id = NULL, remote_model = NULL WHERE endpoint_id = ?1", [id])?;
        if self.conn.execute("DELETE FROM endpoints WHERE id = ?1", [id])? == 0 {
            return Err(StoreError::NotFound { what: "endpoint", id });
        }
        Ok(())
    }

    pub fn conversation_backend(&self, conversation_id: i64) -> Result<Backend> {
        let row: Option<(Option<i64>, Option<String>)> = self
            .conn
            .query_row("SELECT endpoint_id, remote_model FROM conversations WHERE id = ?1", [conversation_id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        match row {
            None => Err(StoreError::NotFound { what: "conversation", id: conversation_id }),
            Some((Some(endpoint_id), Some(model))) => Ok(Backend::Remote { endpoint_id, model }),
            Some(_) => Ok(Backend::Local),
        }
    }

    pub fn set_conversation_backend(&self, conversation_id: i64, backend: &Backend) -> Result<()> {
        let (endpoint, model) = match backend {
            Backend::Local => (None, None),
            Backend::Remote { endpoint_id, model } => {
                self.endpoint(*endpoint_id)?;
                (Some(*endpoint_id), Some(model.as_str()))
            }
        };
        let changed = self.conn.execute(
            "UPDATE conversations SET endpoint_id = ?1, remote_model = ?2 WHERE id = ?3",
            params![endpoint, model, conversation_id],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound { what: "conversation", id: conversation_id });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_a_conversations_backend() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("h.db")).unwrap();
        let c = store.create_conversation().unwrap();
        assert_eq!(store.conversation_backend(c.id).unwrap(), Backend::Local);
        let kept = store.add_endpoint("vLLM", "http://gpu:8000/v1", KeyStorage::Keychain, Some("secret")).unwrap();
        assert_eq!(store.endpoint_key(kept.id).unwrap(), None, "a keychain key never reaches the database");
        let plain = store.add_endpoint("box", "http://box/v1", KeyStorage::Database, Some("k")).unwrap();
        assert_eq!(store.endpoint_key(plain.id).unwrap().as_deref(), Some("k"));
        assert_eq!(store.endpoints().unwrap(), vec![kept.clone(), plain.clone()]);

        let remote = Backend::Remote { endpoint_id: kept.id, model: "qwen".into() };
        store.set_conversation_backend(c.id, &remote).unwrap();
        assert_eq!(store.conversation_backend(c.id).unwrap(), remote);
        assert!(store
            .set_conversation_backend(c.id, &Backend::Remote { endpoint_id: 999, model: "x".into() })
            .is_err());
        store.remove_endpoint(kept.id).unwrap();
        assert_eq!(
            store.conversation_backend(c.id).unwrap(),
            Backend::Local,
            "its conversations go back to the local model"
        );
        assert!(store.remove_endpoint(kept.id).is_err());
    }
}
