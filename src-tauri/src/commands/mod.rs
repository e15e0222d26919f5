//! IPC commands, one module per feature. Each returns `AppResult`, so a
//! failure reaches the UI as `{kind, message}`.

pub mod app;
pub mod chat;
pub mod conversations;
pub mod endpoints;
pub mod export;
pub mod hub;
pub mod mcp;
pub mod models;
pub mod server;
pub mod settings;

/// Runs `f` on a blocking thread: network calls and keychain calls (which
/// can wait on an unlock prompt) never hold up the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::error::AppResult<T> + Send + 'static,
) -> crate::error::AppResult<T> {
    tauri::async_runtime::spawn_blocking(f)
        .await
        .map_err(|e| crate::error::AppError::new(crate::error::ErrorKind::Internal, e.to_string()))?
}

/// The handler that routes every command.
pub fn handler<R: tauri::Runtime>() -> impl Fn(tauri::ipc::Invoke<R>) -> bool + Send + Sync + 'static {
    tauri::generate_handler![
        app::app_startup_error,
        app::app_move_database_aside,
        conversations::conversations_list,
        conversations::conversations_search,
        conversations::conversations_create,
        conversations::conversations_rename,
        conversations::conversations_delete,
        conversations::conversations_restore,
        conversations::conversations_thread,
        conversations::conversations_select_version,
        conversations::conversations_cache_states,
        export::conversations_export,
        export::conversations_backup,
        export::conversations_import,
        chat::chat_send,
        chat::chat_regenerate,
        chat::chat_replay,
        chat::chat_token_choices,
        chat::chat_continue_with,
        chat::chat_export_replay,
        chat::chat_edit,
        chat::chat_continue,
        chat::chat_stop,
        chat::chat_tool_decide,
        chat::chat_busy,
        chat::chat_context_usage,
        settings::settings_get,
        settings::settings_set,
        settings::settings_validate,
        settings::settings_defaults_get,
        settings::settings_defaults_set,
        settings::presets_list,
        settings::presets_save,
        settings::presets_delete,
        settings::caches_clear,
        settings::caches_budgets_get,
        settings::caches_budgets_set,
        settings::device_get,
        settings::device_set,
        models::models_status,
        models::models_open,
        models::models_recent,
        models::models_library,
        models::models_forget,
        models::models_download_default,
        models::models_download_cancel,
        hub::hub_search,
        hub::hub_repo,
        hub::hub_quant_facts,
        hub::hub_download,
        hub::hub_download_act,
        hub::hub_downloads,
        hub::hub_token_get,
        hub::hub_token_set,
        hub::models_find_on_disk,
        hub::models_add_found,
        server::api_server_get,
        server::api_server_set,
        server::api_server_new_key,
        endpoints::endpoints_list,
        endpoints::endpoints_add,
        endpoints::endpoints_set_key,
        endpoints::endpoints_models,
        endpoints::endpoints_remove,
        endpoints::conversations_backend,
        endpoints::conversations_set_backend,
        mcp::mcp_servers_list,
        mcp::mcp_servers_add,
        mcp::mcp_servers_import,
        mcp::mcp_servers_import_file,
        mcp::mcp_servers_remove,
        mcp::mcp_servers_connect,
    ]
}
