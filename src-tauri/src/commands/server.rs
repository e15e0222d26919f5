//! The local API server switch (see `api_server.rs`).

use tauri::State;

use crate::api_server::{self, ApiServer, ApiServerState};
use crate::error::{AppError, AppResult, ErrorKind};
use crate::state::AppState;

#[tauri::command]
pub async fn api_server_get(state: State<'_, AppState>) -> AppResult<ApiServerState> {
    let settings = ApiServer::settings(&*state.store()?)?;
    Ok(state.api_server.state(settings, &state.worker).await)
}

/// Turns the server on or off, or moves it to another port; saved only
/// when it took effect.
#[tauri::command]
pub async fn api_server_set(state: State<'_, AppState>, enabled: bool, port: u16) -> AppResult<ApiServerState> {
    if port < 1024 {
        return Err(AppError::new(ErrorKind::InvalidSettings, "the port must be between 1024 and 65535"));
    }
    let mut settings = ApiServer::settings(&*state.store()?)?;
    settings.enabled = enabled;
    settings.port = port;
    let applied = state.api_server.apply(state.worker.clone(), &settings).await;
    if applied.is_err() {
        settings.enabled = false;
    }
    api_server::save(&*state.store()?, &settings)?;
    applied?;
    Ok(state.api_server.state(settings, &state.worker).await)
}

/// Replaces the key; clients holding the old one are refused from now on.
#[tauri::command]
pub async fn api_server_new_key(state: State<'_, AppState>) -> AppResult<ApiServerState> {
    let mut settings = ApiServer::settings(&*state.store()?)?;
    settings.key = hearth_server::new_api_key();
    api_server::save(&*state.store()?, &settings)?;
    state.api_server.apply(state.worker.clone(), &settings).await?;
    Ok(state.api_server.state(settings, &state.worker).await)
}
