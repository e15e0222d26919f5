use hearth_store::{Conversation, SearchHit, ThreadMessage};
use tauri::State;

use crate::error::AppResult;
use crate::state::AppState;
use crate::worker::CacheState;

/// A conversation's cache state, for the sidebar.
#[derive(Debug, Clone, serde::Serialize, ts_rs::TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct ConversationCache {
    pub conversation_id: i64,
    pub state: CacheState,
}

/// Where each conversation's KV cache is: memory, disk, or nowhere.
#[tauri::command]
pub async fn conversations_cache_states(state: State<'_, AppState>) -> AppResult<Vec<ConversationCache>> {
    let ids: Vec<i64> = state.store()?.conversations()?.iter().map(|c| c.id).collect();
    Ok(state
        .worker
        .cache_states(&ids)
        .into_iter()
        .map(|(conversation_id, state)| ConversationCache { conversation_id, state })
        .collect())
}

#[tauri::command]
pub async fn conversations_list(state: State<'_, AppState>) -> AppResult<Vec<Conversation>> {
    Ok(state.store()?.conversations()?)
}

/// Titles and message text containing `query`; every conversation when it is empty.
#[tauri::command]
pub async fn conversations_search(state: State<'_, AppState>, query: String) -> AppResult<Vec<SearchHit>> {
    Ok(state.store()?.search(&query)?)
}

#[tauri::command]
pub async fn conversations_create(state: State<'_, AppState>) -> AppResult<Conversation> {
    Ok(state.store()?.create_conversation()?)
}

#[tauri::command]
pub async fn conversations_rename(state: State<'_, AppState>, id: i64, title: String) -> AppResult<Conversation> {
    let store = state.store()?;
    store.rename_conversation(id, &title)?;
    Ok(store.conversation(id)?)
}

/// Hides the conversation until the app restarts; `conversations_restore` undoes it.
#[tauri::command]
pub async fn conversations_delete(state: State<'_, AppState>, id: i64) -> AppResult<()> {
    state.worker.stop(id);
    Ok(state.store()?.delete_conversation(id)?)
}

#[tauri::command]
pub async fn conversations_restore(state: State<'_, AppState>, id: i64) -> AppResult<Conversation> {
    let store = state.store()?;
    store.restore_conversation(id)?;
    Ok(store.conversation(id)?)
}

/// The shown branch, root first.
#[tauri::command]
pub async fn conversations_thread(state: State<'_, AppState>, id: i64) -> AppResult<Vec<ThreadMessage>> {
    Ok(state.store()?.thread(id)?)
}

/// Shows another version of a message (and that version's latest replies).
#[tauri::command]
pub async fn conversations_select_version(
    state: State<'_, AppState>,
    id: i64,
    message_id: i64,
) -> AppResult<Vec<ThreadMessage>> {
    let store = state.store()?;
    store.select_version(id, message_id)?;
    Ok(store.thread(id)?)
}
