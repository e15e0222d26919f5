//! Remote endpoints: adding one (its models are listed first, so a wrong
//! URL or key is refused before anything is kept), its models, removing
//! it, and which model a conversation runs on.

use super::blocking;
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

/// The endpoint's models.
async fn models_of(endpoint: hearth_remote::Endpoint) -> AppResult<Vec<String>> {
    blocking(move || hearth_remote::list_models(&endpoint, &|| false).map_err(remote_error)).await
}

/// The endpoint with its key, read from wherever the key is kept.
async fn with_key(state: &AppState, endpoint: Endpoint) -> AppResult<(Endpoint, Option<String>)> {
    let stored = state.store()?.endpoint_key(endpoint.id)?;
    let keys = state.keys.clone();
    blocking(move || {
        let key = keys.get(&endpoint, stored)?;
        Ok((endpoint, key))
    })
    .await
}

/// Places the key (keychain, session or database) and records where.
async fn place_key(
    state: &AppState,
    endpoint: &Endpoint,
    api_key: Option<String>,
    allow_plain_text: bool,
) -> AppResult<hearth_store::KeyStorage> {
    let (keys, id, previous) = (state.keys.clone(), endpoint.id, endpoint.key_storage);
    let key = api_key.clone();
    let storage = blocking(move || keys.place(id, previous, key.as_deref(), allow_plain_text)).await?;
    state.store()?.set_endpoint_key_storage(id, storage, api_key.as_deref().map(str::trim))?;
    Ok(storage)
}

#[tauri::command]
pub async fn endpoints_list(state: State<'_, AppState>) -> AppResult<Vec<Endpoint>> {
    Ok(state.store()?.endpoints()?)
}

/// Adds an OpenAI-compatible endpoint once it answers with its models.
/// The key goes to the keychain; where there is none, to memory for this
/// session, or to the database only if `allow_plain_text`.
#[tauri::command]
pub async fn endpoints_add(
    state: State<'_, AppState>,
    name: String,
    base_url: String,
    api_key: Option<String>,
    allow_plain_text: bool,
) -> AppResult<AddedEndpoint> {
    let name = name.trim().to_string();
    if name.is_empty() {
        return Err(AppError::new(ErrorKind::InvalidSettings, "the endpoint needs a name"));
    }
    let base_url = crate::endpoints::normalize_url(&base_url)?;
    let models = models_of(hearth_remote::Endpoint { base_url: base_url.clone(), api_key: api_key.clone() }).await?;
    if models.is_empty() {
        return Err(AppError::new(ErrorKind::Remote, format!("{base_url} lists no models")));
    }
    let added = state.store()?.add_endpoint(&name, &base_url, hearth_store::KeyStorage::None, None)?;
    let key_storage = place_key(&state, &added, api_key, allow_plain_text).await?;
    Ok(AddedEndpoint { endpoint: Endpoint { key_storage, ..added }, models })
}

/// Enters an endpoint's key again (one kept only for a session, or a new one).
#[tauri::command]
pub async fn endpoints_set_key(
    state: State<'_, AppState>,
    id: i64,
    api_key: Option<String>,
    allow_plain_text: bool,
) -> AppResult<Endpoint> {
    let endpoint = state.store()?.endpoint(id)?;
    place_key(&state, &endpoint, api_key, allow_plain_text).await?;
    Ok(state.store()?.endpoint(id)?)
}

#[tauri::command]
pub async fn endpoints_models(state: State<'_, AppState>, id: i64) -> AppResult<Vec<String>> {
    let endpoint = state.store()?.endpoint(id)?;
    let (endpoint, api_key) = with_key(&state, endpoint).await?;
    models_of(hearth_remote::Endpoint { base_url: endpoint.base_url, api_key }).await
}

/// Removes an endpoint and its key; its conversations go back to the local model.
#[tauri::command]
pub async fn endpoints_remove(state: State<'_, AppState>, id: i64) -> AppResult<()> {
    let endpoint = {
        let store = state.store()?;
        let endpoint = store.endpoint(id)?;
        store.remove_endpoint(id)?;
        endpoint
    };
    let keys = state.keys.clone();
    blocking(move || {
        keys.forget(&endpoint);
        Ok(())
    })
    .await
}

#[tauri::command]
pub async fn conversations_backend(state: State<'_, AppState>, id: i64) -> AppResult<Backend> {
    Ok(state.store()?.conversation_backend(id)?)
}

/// Runs the conversation on the local model or an endpoint's model from its next reply.
#[tauri::command]
pub async fn conversations_set_backend(state: State<'_, AppState>, id: i64, backend: Backend) -> AppResult<()> {
    if state.worker.busy_conversations().contains(&id) {
        return Err(AppError::new(
            ErrorKind::Busy,
            "this conversation is writing a reply; stop it before switching models",
        ));
    }
    state.store()?.set_conversation_backend(id, &backend)?;
    Ok(())
}

/// Where a reply of this conversation runs: `None` for the local model, or
/// the endpoint (with its key) and model. Takes the database only briefly.
pub async fn remote_target(state: &AppState, conversation_id: i64) -> AppResult<Option<crate::worker::RemoteTarget>> {
    let (endpoint, model) = {
        let store = state.store()?;
        match store.conversation_backend(conversation_id)? {
            Backend::Local => return Ok(None),
            Backend::Remote { endpoint_id, model } => (store.endpoint(endpoint_id)?, model),
        }
    };
    let (endpoint, api_key) = with_key(state, endpoint).await?;
    Ok(Some(crate::worker::RemoteTarget {
        endpoint: hearth_remote::Endpoint { base_url: endpoint.base_url, api_key },
        model,
    }))
}
