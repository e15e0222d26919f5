//! `Servers`, the MCP servers the user added, each started on first use and
//! kept running; and `ToolSet`, the tools one chat offers its model, each
//! name mapped back to its server.
//!
//! A server that dies is started again on its next use. A server that
//! fails to start costs only the chats that use it; the error is kept for
//! Settings to show.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use crate::connection::{Connection, Limits, ToolInfo};
use crate::error::{McpError, Result};
use crate::result::CallOutcome;

/// What Settings shows of a server.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/", rename = "McpServerState"))]
pub struct ServerState {
    pub name: String,
    /// The command line or the URL.
    pub summary: String,
    pub transport: crate::config::Transport,
    pub running: bool,
    /// The tools it listed when it last started.
    pub tools: Vec<ToolInfo>,
    /// Why it last failed to start, if it did.
    pub error: Option<String>,
}

/// One server: its configuration (read without waiting), and its
/// connection and last error (behind a lock held while it starts).
struct Slot {
    config: ServerConfig,
    state: tokio::sync::Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    connection: Option<Arc<Connection>>,
    error: Option<String>,
}

impl Slot {
    fn new(config: ServerConfig) -> Arc<Self> {
        Arc::new(Self { config, state: Default::default() })
    }
}

/// The servers the user added, by name.
pub struct Servers {
    limits: Limits,
    slots: Mutex<BTreeMap<String, Arc<Slot>>>,
}

impl Servers {
    /// `configs`, none started yet: a server runs once something uses it.
    pub fn new(limits: Limits, configs: Vec<ServerConfig>) -> Self {
        let slots = configs.into_iter().map(|c| (c.name.clone(), Slot::new(c))).collect();
        Self { limits, slots: Mutex::new(slots) }
    }

    /// Makes `configs` the servers. A server whose configuration changed,
    /// or that is gone, is stopped (a call it is running ends first: the
    /// connection goes when its last user lets go); the others keep running.
    pub async fn set(&self, configs: Vec<ServerConfig>) {
        let mut stop = Vec::new();
        {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let wanted: HashMap<&str, &ServerConfig> = configs.iter().map(|c| (c.name.as_str(), c)).collect();
            slots.retain(|name, slot| {
                let keep = wanted.get(name.as_str()).is_some_and(|c| **c == slot.config);
                if !keep {
                    stop.push(slot.clone());
                }
                keep
            });
            for c in configs {
                slots.entry(c.name.clone()).or_insert_with(|| Slot::new(c));
            }
        }
        for slot in stop {
            if let Ok(mut s) = slot.state.try_lock() {
                if let Some(conn) = s.connection.take().and_then(|c| Arc::try_unwrap(c).ok()) {
                    conn.close().await;
                }
            }
        }
    }

    /// Each server's state, in name order.
    pub async fn states(&self) -> Vec<ServerState> {
        let slots: Vec<_> = self.slots.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut out = Vec::with_capacity(slots.len());
        for slot in slots {
            let s = slot.state.lock().await;
            let running = s.connection.as_ref().is_some_and(|c| !c.is_closed());
            out.push(ServerState {
                name: slot.config.name.clone(),
                summary: slot.config.summary(),
                transport: slot.config.transport.clone(),
                running,
                tools: s.connection.as_ref().map(|c| c.tools().to_vec()).unwrap_or_default(),
                error: s.error.clone(),
            });
        }
        out
    }

    /// `name`'s connection, started if it is not running.
    pub async fn connect(&self, name: &str, cancel: &CancellationToken) -> Result<Arc<Connection>> {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| McpError::Config(format!("there is no server named “{name}”")))?;
        let mut s = slot.state.lock().await;
        if let Some(c) = &s.connection {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        s.connection = None;
        match Connection::open(&slot.config, self.limits, cancel).await {
            Ok(c) => {
                let c = Arc::new(c);
                s.connection = Some(c.clone());
                s.error = None;
                Ok(c)
            }
            Err(e) => {
                if e != McpError::Cancelled {
                    s.error = Some(e.to_string());
                }
                Err(e)
            }
        }
    }

    /// The tools of `names`' servers for one chat, each started if needed.
    /// A server that cannot start is left out and its error returned beside
    /// the set, so a chat still runs with the others.
    pub async fn tool_set(&self, names: &[String], cancel: &CancellationToken) -> (ToolSet, Vec<McpError>) {
        let mut set = ToolSet::default();
        let mut errors = Vec::new();
        for name in names {
            match self.connect(name, cancel).await {
                Ok(c) => set.add(name, c.tools()),
                Err(McpError::Cancelled) => return (set, vec![McpError::Cancelled]),
                Err(e) => errors.push(e),
            }
        }
        (set, errors)
    }

    /// Runs one call of `tool` on `server`, starting it again if it died.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> Result<CallOutcome> {
        let conn = self.connect(server, cancel).await?;
        conn.call(tool, arguments, cancel).await
    }

    /// Stops every server (at the app's exit).
    pub async fn close_all(&self) {
        self.set(Vec::new()).await;
    }
}

/// The tools one chat offers: the name the model sees, and where it goes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSet {
    tools: Vec<OfferedTool>,
}

/// One tool as a chat offers it.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// The name the model calls it by: the server's own name for it, or
    /// `server__tool` where two servers use the same name.
    pub name: String,
    pub server: String,
    /// The server's name for it.
    pub tool: String,
    pub info: ToolInfo,
}

impl ToolSet {
    fn add(&mut self, server: &str, tools: &[ToolInfo]) {
        for t in tools.iter().filter(|t| t.problem.is_none()) {
            let mut name = t.name.clone();
            if self.tools.iter().any(|o| o.name == name) {
                name = format!("{server}__{}", t.name);
            }
            self.tools.push(OfferedTool { name, server: server.to_string(), tool: t.name.clone(), info: t.clone() });
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn tools(&self) -> &[OfferedTool] {
        &self.tools
    }

    /// The tools as the engine offers them to the model.
    pub fn specs(&self) -> Vec<hearth_engine::tools::ToolSpec> {
        self.tools
            .iter()
            .map(|t| hearth_engine::tools::ToolSpec {
                name: t.name.clone(),
                description: t.info.description.clone(),
                parameters: t.info.input_schema.clone(),
            })
            .collect()
    }

    /// Where a call the model made by `name` goes.
    pub fn find(&self, name: &str) -> Option<&OfferedTool> {
        self.tools.iter().find(|t| t.name == name)
    }
}
