//! `McpError`, the one error of this crate: what went wrong, in words a
//! user can act on, naming the server.

/// Why a server could not be configured, started, listed or called.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum McpError {
    /// A configuration (one server's or an `mcpServers` file) is wrong.
    #[error("{0}")]
    Config(String),
    /// The server could not be started or reached.
    #[error("{0}")]
    Start(String),
    /// The server broke the protocol, exited, or answered with an error.
    #[error("{0}")]
    Server(String),
    /// The call ran past its time limit.
    #[error("{0}")]
    Timeout(String),
    /// The user stopped the call.
    #[error("the call was stopped")]
    Cancelled,
}

impl McpError {
    /// The error's kind as the app's `{kind, message}` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            McpError::Config(_) => "invalid_mcp_config",
            McpError::Start(_) => "mcp_server_unavailable",
            McpError::Server(_) => "mcp_server_error",
            McpError::Timeout(_) => "mcp_timeout",
            McpError::Cancelled => "cancelled",
        }
    }
}

pub type Result<T, E = McpError> = std::result::Result<T, E>;
