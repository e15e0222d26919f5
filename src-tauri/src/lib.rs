//! Hearth's desktop shell: a thin Tauri layer over `hearth-engine` (the
//! model) and `hearth-store` (the database). The model runs on the worker
//! thread; commands only read the database and enqueue.

pub mod commands;
pub mod context;
pub mod error;
pub mod events;
pub mod state;
pub mod worker;

use tauri::{Emitter, Manager, Runtime};

use crate::events::MODEL_STATUS_EVENT;
use crate::state::AppState;

/// Opens the main window.
pub fn run() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .try_init();
    builder(tauri::Builder::default())
        .run(tauri::generate_context!())
        .expect("Hearth failed to start");
}

/// The app minus its runtime and context, so tests can build it on the mock runtime.
pub fn builder<R: Runtime>(builder: tauri::Builder<R>) -> tauri::Builder<R> {
    builder
        .plugin(tauri_plugin_dialog::init())
        .plugin(tauri_plugin_opener::init())
        .setup(|app| Ok(manage_state(app.handle())?))
        .invoke_handler(commands::handler())
}

/// Opens the database and starts the worker. Tauri runs this once the event
/// loop is ready; tests on the mock runtime call it themselves.
pub fn manage_state<R: Runtime>(app: &tauri::AppHandle<R>) -> error::AppResult<()> {
    let handle = app.clone();
    let on_status = Box::new(move |status: &events::ModelStatus| {
        let _ = handle.emit(MODEL_STATUS_EVENT, status);
    });
    let state = AppState::open(state::data_dir()?, on_status)?;
    app.manage(state);
    Ok(())
}
