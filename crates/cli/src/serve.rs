//! `hearth-cli serve`: the OpenAI-compatible API without the app, on the
//! same worker the app runs (`hearth-worker`), with request caches only
//! (nothing is stored; the worker's database is a throwaway one).

use std::sync::Arc;
use std::time::Duration;

use hearth_engine::paths;
use hearth_worker::events::ModelStatus;
use hearth_worker::{Worker, WorkerConfig};

use crate::ModelArgs;

pub fn run(model: &ModelArgs, port: u16, api_key: Option<String>) -> Result<(), String> {
    crate::set_threads(model).map_err(|e| e.to_string())?;
    // The worker writes conversations' replies to a database; requests write none.
    let scratch = tempfile::tempdir().map_err(|e| format!("cannot make a scratch folder: {e}"))?;
    let store = hearth_store::Store::open(scratch.path().join("hearth.db")).map_err(|e| e.to_string())?;
    let config = WorkerConfig { device: Some(model.device.clone()), ..WorkerConfig::in_memory() };
    let worker = Arc::new(Worker::start(store, config, Box::new(|_| {})));
    let path = model.model.clone().unwrap_or_else(|| paths::default_model_path(|k| std::env::var_os(k)));
    worker.load_model(path.clone());
    loop {
        match worker.model_status() {
            ModelStatus::Ready { .. } => break,
            ModelStatus::Failed { error, .. } => return Err(error.message),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let server = hearth_server::Server::start(worker, port, api_key)
            .await
            .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
        // Scripts wait for this line.
        println!("serving {} on {}", path.display(), server.url());
        let _ = tokio::signal::ctrl_c().await;
        server.stop().await;
        Ok(())
    })
}
