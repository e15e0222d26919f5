//! Remote endpoints: adding one (its models are listed first, so a wrong
//! URL or key is refused before anything is kept), its models, removing
//! it, and which model a conversation runs on.

use hearth_store::{Backend, Endpoint};
use serde::Serialize;
use tauri::State;
use ts_rs::TS;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::state::AppState;

/// An endpoint just added, with its models.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct AddedEndpoint {
    pub endpoint: Endpoint,
    pub models: Vec<String>,
}

fn remote_error(e: hearth_remote::RemoteError) -> AppError {
    AppError::new(ErrorKind::Remote, e.to_string())
}

/// The endpoint's models, on a blocking thread (the call waits on the network).
async fn models_of(endpoint: hearth_remote::Endpoint) -> AppResult<Vec<String>> {
    tauri::async_runtime::spawn_blocking(move || hearth_remote::list_models(&endpoint, &|| false).map_err(remote_error))
        .await
        .map_err(|e| AppError::new(ErrorKind::Internal, e.to_string()))?
}

#[tauri::command]
pub async fn endpoints_list(state: State<'_, AppState>) -> AppResult<Vec<Endpoint>> {
    Ok(state.store()?.endpoints()?)
}

/// Adds an OpenAI-compatible endpoint once it answers with its models.
/// The key goes to the keychain; where there is none, to memory for this
/// session, or to the database only if `allow_plain_text`.
#[tauri::command]
pub async fn endpoints_add(state: State<'_, AppState>, name: String, base_url: String, api_key: Option<String>, allow_plain_text: bool) -> AppResult<AddedEndpoint> {
    let name = name.trim().to_string();
    if name.is_empty() {
        return Err(AppError::new(ErrorKind::InvalidSettings, "the endpoint needs a name"));
    }
    let base_url = crate::endpoints::normalize_url(&base_url)?;
    let models = models_of(hearth_remote::Endpoint { base_url: base_url.clone(), api_key: api_key.clone() }).await?;
    if models.is_empty() {
        return Err(AppError::new(ErrorKind::Remote, format!("{base_url} lists no models")));
    }
    let store = state.store()?;
    let added = store.add_endpoint(&name, &base_url, hearth_store::KeyStorage::None, None)?;
    let key_storage = state.keys.keep(&store, added.id, api_key.as_deref(), allow_plain_text)?;
    Ok(AddedEndpoint { endpoint: Endpoint { key_storage, ..added }, models })
}

/// Enters an endpoint's key again (one kept only for a session, or a new one).
#[tauri::command]
pub async fn endpoints_set_key(state: State<'_, AppState>, id: i64, api_key: Option<String>, allow_plain_text: bool) -> AppResult<Endpoint> {
    let store = state.store()?;
    store.endpoint(id)?;
    state.keys.keep(&store, id, api_key.as_deref(), allow_plain_text)?;
    Ok(store.endpoint(id)?)
}

#[tauri::command]
pub async fn endpoints_models(state: State<'_, AppState>, id: i64) -> AppResult<Vec<String>> {
    let target = {
        let store = state.store()?;
        let endpoint = store.endpoint(id)?;
        let api_key = state.keys.get(&store, &endpoint)?;
        hearth_remote::Endpoint { base_url: endpoint.base_url, api_key }
    };
    models_of(target).await
}

/// Removes an endpoint and its key; its conversations go back to the local model.
#[tauri::command]
pub async fn endpoints_remove(state: State<'_, AppState>, id: i64) -> AppResult<()> {
    let store = state.store()?;
    let endpoint = store.endpoint(id)?;
    store.remove_endpoint(id)?;
    state.keys.forget(&endpoint);
    Ok(())
}

#[tauri::command]
pub async fn conversations_backend(state: State<'_, AppState>, id: i64) -> AppResult<Backend> {
    Ok(state.store()?.conversation_backend(id)?)
}

/// Runs the conversation on the local model or an endpoint's model from its next reply.
#[tauri::command]
pub async fn conversations_set_backend(state: State<'_, AppState>, id: i64, backend: Backend) -> AppResult<()> {
    if state.worker.busy_conversations().contains(&id) {
        return Err(AppError::new(ErrorKind::Busy, "this conversation is writing a reply; stop it before switching models"));
    }
    state.store()?.set_conversation_backend(id, &backend)?;
    Ok(())
}

/// Where a reply of this conversation runs: `None` for the local model, or
/// the endpoint (with its key) and model.
pub fn remote_target(state: &AppState, store: &hearth_store::Store, conversation_id: i64) -> AppResult<Option<crate::worker::RemoteTarget>> {
    match store.conversation_backend(conversation_id)? {
        Backend::Local => Ok(None),
        Backend::Remote { endpoint_id, model } => {
            let endpoint = store.endpoint(endpoint_id)?;
            let api_key = state.keys.get(store, &endpoint)?;
            Ok(Some(crate::worker::RemoteTarget { endpoint: hearth_remote::Endpoint { base_url: endpoint.base_url, api_key }, model }))
        }
    }
}
