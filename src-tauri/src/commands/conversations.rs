use hearth_store::{Conversation, SearchHit, ThreadMessage};
use tauri::State;

use crate::error::AppResult;
use crate::state::AppState;

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
pub async fn conversations_select_version(state: State<'_, AppState>, id: i64, message_id: i64) -> AppResult<Vec<ThreadMessage>> {
    let store = state.store()?;
    store.select_version(id, message_id)?;
    Ok(store.thread(id)?)
}
