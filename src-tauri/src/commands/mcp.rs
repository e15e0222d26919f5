//! MCP servers in Settings: the list with each one's state and tools,
//! adding one or a whole `mcpServers` file (checked whole: a bad entry or a
//! taken name adds nothing), removing, and connecting to see its tools. A
//! server runs only once the user has added it and something uses it.

// Named as the page knows them (their ts-rs names).
use hearth_mcp::{parse_mcp_servers, McpError, ServerConfig as McpServerConfig, ServerState as McpServerState};
use hearth_store::StoredMcpServer;
use tauri::State;
use tokio_util::sync::CancellationToken;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::state::AppState;

fn tool_error(e: McpError) -> AppError {
    AppError::new(ErrorKind::Tool, e.to_string())
}

/// Stores `configs` (all or none), then hands every server to the hub.
async fn add(state: &AppState, configs: Vec<McpServerConfig>) -> AppResult<Vec<McpServerState>> {
    let stored = configs
        .iter()
        .map(|c| {
            c.validate().map_err(tool_error)?;
            let transport =
                serde_json::to_string(&c.transport).map_err(|e| AppError::new(ErrorKind::Internal, e.to_string()))?;
            Ok(StoredMcpServer { name: c.name.clone(), transport })
        })
        .collect::<AppResult<Vec<_>>>()?;
    {
        let store = state.store()?;
        store.add_mcp_servers(&stored).map_err(|e| AppError::new(ErrorKind::Tool, e.to_string()))?;
    }
    reload(state).await
}

/// Makes the hub's servers the stored ones, and lists their states.
async fn reload(state: &AppState) -> AppResult<Vec<McpServerState>> {
    let configs = {
        let store = state.store()?;
        crate::state::stored_mcp_servers(&store)?
    };
    state.mcp.set(configs).await;
    Ok(state.mcp.states().await)
}

#[tauri::command]
pub async fn mcp_servers_list(state: State<'_, AppState>) -> AppResult<Vec<McpServerState>> {
    Ok(state.mcp.states().await)
}

/// Adds one server, after checking every field.
#[tauri::command]
pub async fn mcp_servers_add(state: State<'_, AppState>, config: McpServerConfig) -> AppResult<Vec<McpServerState>> {
    add(&state, vec![config]).await
}

/// Adds every server of an `mcpServers` file (Claude Desktop's, LM
/// Studio's `mcp.json`, VS Code's), or none with one message saying why.
#[tauri::command]
pub async fn mcp_servers_import(state: State<'_, AppState>, json: String) -> AppResult<Vec<McpServerState>> {
    const MAX_FILE: usize = 1 << 20;
    if json.len() > MAX_FILE {
        return Err(AppError::new(ErrorKind::Tool, "the file is larger than 1 MiB; an mcpServers file is a few lines"));
    }
    let configs = parse_mcp_servers(&json).map_err(tool_error)?;
    add(&state, configs).await
}

/// `mcp_servers_import` from a file the user picked.
#[tauri::command]
pub async fn mcp_servers_import_file(state: State<'_, AppState>, path: String) -> AppResult<Vec<McpServerState>> {
    let meta =
        std::fs::metadata(&path).map_err(|e| AppError::new(ErrorKind::Tool, format!("cannot read {path}: {e}")))?;
    if meta.len() > 1 << 20 {
        return Err(AppError::new(ErrorKind::Tool, "the file is larger than 1 MiB; an mcpServers file is a few lines"));
    }
    let json = std::fs::read_to_string(&path)
        .map_err(|e| AppError::new(ErrorKind::Tool, format!("cannot read {path} as text: {e}")))?;
    let configs = parse_mcp_servers(&json).map_err(tool_error)?;
    add(&state, configs).await
}

/// Removes a server; it stops if it was running.
#[tauri::command]
pub async fn mcp_servers_remove(state: State<'_, AppState>, name: String) -> AppResult<Vec<McpServerState>> {
    state.store()?.remove_mcp_server(&name).map_err(|e| AppError::new(ErrorKind::NotFound, e.to_string()))?;
    reload(&state).await
}

/// Starts a server (if it is not running) and lists its tools. A server
/// that fails keeps its error in its state, and the error is returned.
#[tauri::command]
pub async fn mcp_servers_connect(state: State<'_, AppState>, name: String) -> AppResult<Vec<McpServerState>> {
    state.mcp.connect(&name, &CancellationToken::new()).await.map_err(tool_error)?;
    Ok(state.mcp.states().await)
}
