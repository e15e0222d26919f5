//! Hearth's desktop shell: a thin Tauri layer over `hearth-engine` (the
//! model) and `hearth-store` (the database). The model runs on the worker
//! thread; commands only read the database and enqueue.

pub mod api_server;
pub mod commands;
pub mod config;
pub mod endpoints;
pub mod error;
pub mod hub;
pub mod open_file;
pub mod page_events;
pub mod startup;
pub mod state;

// The worker and what it shares with the commands live in `hearth-worker`,
// so the CLI's API server runs the same worker without Tauri.
pub use hearth_worker as worker;
pub use hearth_worker::{context, events, priority};

use tauri::{Manager, Runtime};

use crate::config::AppConfig;
use crate::state::AppState;

/// Opens the main window.
pub fn run() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .try_init();
    // The only place the app reads its environment.
    let config = AppConfig::from_vars(|k| std::env::var_os(k));
    config.apply_to_process();
    // `hearth model.gguf` (a file manager's "Open with") opens that model instead of the last one.
    let cwd = std::env::current_dir().unwrap_or_default();
    let requested = open_file::model_in_args(std::env::args_os(), &cwd);
    // First among the plugins: a second launch must stop before anything else starts.
    let app = match builder(tauri::Builder::default().plugin(single_instance(&config)), config)
        .manage(open_file::OpenAtStart(requested))
        .build(tauri::generate_context!())
    {
        Err(tauri::Error::PluginInitialization(plugin, reason))
            if plugin == "single-instance" && reason.contains("forward") =>
        {
            launch_again(&reason)
        }
        app => app.expect("Hearth failed to start"),
    };
    // Started: a later launch from this one (a restart) counts its own tries.
    std::env::remove_var("HEARTH_LAUNCH_ATTEMPT");
    app.run(|_app, _event| {
        // macOS hands Finder's "Open with" to the running app as an event, not as arguments.
        #[cfg(target_os = "macos")]
        if let tauri::RunEvent::Opened { urls } = _event {
            if let Some(path) = urls.iter().filter_map(|u| u.to_file_path().ok()).find(|p| open_file::is_model_file(p))
            {
                open_model(_app, path);
            }
        }
    });
}

/// A Hearth that is exiting still holds the data folder's D-Bus name but no
/// longer answers, so this launch could neither hand over to it nor start.
/// It starts again in a moment (the same process, arguments and
/// environment), by when the other has gone, rather than failing.
fn launch_again(reason: &str) -> ! {
    const ATTEMPT: &str = "HEARTH_LAUNCH_ATTEMPT";
    let attempt: u32 = std::env::var(ATTEMPT).ok().and_then(|a| a.parse().ok()).unwrap_or(0);
    if attempt >= 20 {
        panic!("Hearth failed to start: the Hearth already running on this data folder does not answer ({reason})");
    }
    tracing::info!("the other Hearth on this data folder did not answer ({reason}); starting again");
    std::thread::sleep(std::time::Duration::from_millis(250));
    let exe = std::env::current_exe().expect("the running program has a path");
    let mut command = std::process::Command::new(exe);
    command.args(std::env::args_os().skip(1)).env(ATTEMPT, (attempt + 1).to_string());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        panic!("Hearth failed to start again: {}", command.exec());
    }
    #[cfg(not(unix))]
    {
        command.spawn().expect("Hearth starts again");
        std::process::exit(0);
    }
}

/// Opens a model file handed over by the system (a second launch's
/// arguments, a macOS open event) and brings the window forward.
pub fn open_model<R: Runtime>(app: &tauri::AppHandle<R>, path: std::path::PathBuf) {
    tracing::info!("opening {} as asked by the system", path.display());
    match app.try_state::<AppState>() {
        Some(state) => state.worker.load_model(path),
        None => tracing::warn!("cannot open {}: Hearth could not open its data", path.display()),
    }
    show_window(app);
}

fn show_window<R: Runtime>(app: &tauri::AppHandle<R>) {
    if let Some(window) = app.get_webview_window("main") {
        let _ = window.unminimize();
        let _ = window.show();
        let _ = window.set_focus();
    }
}

/// One window per data folder: a second launch on the same folder shows
/// and focuses the first one's window and exits. (The data-folder lock in
/// `state.rs` still guards launches this cannot see: no D-Bus session on
/// Linux, the CLI.) On Linux the instances meet on a D-Bus name made from
/// the folder, so test runs with folders of their own never meet.
fn single_instance<R: Runtime>(config: &AppConfig) -> tauri::plugin::TauriPlugin<R> {
    let mut plugin = tauri_plugin_single_instance::Builder::new().callback(|app, args, cwd| {
        tracing::info!("another launch on this data folder: showing this window instead");
        page_events::ANOTHER_LAUNCH.emit(app, &());
        // `hearth model.gguf` while Hearth runs: the model opens here.
        match open_file::model_in_args(args, std::path::Path::new(&cwd)) {
            Some(path) => open_model(app, path),
            None => show_window(app),
        }
    });
    if let Ok(dir) = config.data_dir() {
        // FNV-1a: stable across builds, so two versions of Hearth meet too.
        let hash = dir
            .to_string_lossy()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        plugin = plugin.dbus_id(format!("org.hearth.desktop.d{hash:016x}"));
    }
    plugin.build()
}

/// The app minus its runtime and context, so tests can build it on the mock
/// runtime with a configuration of their own.
pub fn builder<R: Runtime>(builder: tauri::Builder<R>, config: AppConfig) -> tauri::Builder<R> {
    builder
        .manage(config)
        .plugin(tauri_plugin_dialog::init())
        .plugin(tauri_plugin_opener::init())
        .setup(|app| {
            // Whatever fails here, the window opens and says so.
            startup::start(app.handle());
            Ok(())
        })
        .on_page_load(|webview, payload| {
            let nice = webview.app_handle().state::<AppConfig>().webview_nice;
            if payload.event() == tauri::webview::PageLoadEvent::Finished && nice > 0 {
                // Again a little later, for helper processes started after the load.
                std::thread::spawn(move || {
                    priority::lower_webview(nice);
                    std::thread::sleep(std::time::Duration::from_secs(3));
                    priority::lower_webview(nice);
                });
            }
        })
        .invoke_handler(commands::handler())
}

/// Get models' queue: its changes go to the page, and a finished model is
/// added to the library as the Hub's and opened.
fn hub_state<R: Runtime>(app: &tauri::AppHandle<R>, config: &AppConfig) -> hub::HubState {
    let handle = app.clone();
    let on_change = Box::new(move |queue: &[hub::HubDownload]| {
        page_events::HUB_DOWNLOADS.emit(&handle, &queue.to_vec());
    });
    let handle = app.clone();
    let on_done = Box::new(move |done: &hub::HubDownload| {
        let (Some(path), Some(state)) = (hub::done_path(done), handle.try_state::<AppState>()) else { return };
        let size = hearth_engine::ModelFacts::read(&path).map_or(0, |f| f.file_size as i64);
        let name = format!("{}:{}", done.repo, done.quant);
        if let Err(e) =
            state.store().and_then(|s| Ok(s.add_model(&path.display().to_string(), &name, size, "Hugging Face")?))
        {
            tracing::warn!("cannot add {name} to the library: {}", e.message);
        }
        state.worker.load_model(path);
    });
    hub::HubState::new(config, on_change, on_done)
}

/// Opens the database and starts the worker (through `startup::start`,
/// once the event loop is ready); on failure, says what failed.
pub fn manage_state<R: Runtime>(app: &tauri::AppHandle<R>) -> Result<(), startup::StartupError> {
    let handle = app.clone();
    let on_status = Box::new(move |status: &events::ModelStatus| {
        page_events::MODEL_STATUS.emit(&handle, status);
    });
    let fail = |error: error::AppError, database: Option<String>| startup::StartupError { error, database };
    let config = app.state::<AppConfig>();
    let dir = config.data_dir().map_err(|e| fail(e, None))?;
    // A folder or lock problem is not the database's: nothing to move aside.
    let lock = state::lock_data_dir(&dir).map_err(|e| fail(e, None))?;
    let requested = app.try_state::<open_file::OpenAtStart>().and_then(|r| r.0.clone());
    let state = AppState::open(dir.clone(), lock, on_status, requested, &config).map_err(|e| {
        let database =
            (e.kind == error::ErrorKind::Storage).then(|| dir.join(state::DATABASE_FILE).display().to_string());
        fail(e, database)
    })?;
    // The local API server, if it was on when the app last ran.
    let (worker, settings) =
        (state.worker.clone(), state.store().ok().and_then(|s| api_server::ApiServer::settings(&s).ok()));
    app.manage(state);
    app.manage(hub_state(app, &config));
    if let Some(settings) = settings.filter(|s| s.enabled) {
        let handle = app.clone();
        tauri::async_runtime::spawn(async move {
            if let Err(e) = handle.state::<AppState>().api_server.apply(worker, &settings).await {
                tracing::warn!("the local API server did not start: {}", e.message);
            }
        });
    }
    Ok(())
}
