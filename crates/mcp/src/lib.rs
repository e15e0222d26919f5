//! MCP servers for Hearth's chats, through the official Rust SDK (`rmcp`):
//! the servers the user added (`ServerConfig`, `parse_mcp_servers`), each
//! started on first use (`Servers`, `Connection`), the tools a chat offers
//! (`ToolSet`), and each call's bounded outcome (`CallOutcome`).
//!
//! Knows nothing of Tauri or the store: the app passes configurations in
//! and shows what comes back.

pub mod config;
pub mod connection;
pub mod error;
pub mod result;
pub mod servers;

pub use config::{parse_mcp_servers, ServerConfig, Transport};
pub use connection::{Connection, Limits, ToolInfo};
pub use error::{McpError, Result};
pub use result::{CallOutcome, ResultText};
pub use servers::{OfferedTool, ServerState, Servers, ToolSet};
