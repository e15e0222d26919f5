//! `hearth-cli serve`: the OpenAI-compatible API without the app, on the
//! same worker the app runs (`hearth-worker`), with request caches only
//! (nothing is stored; the worker's database is a throwaway one).

use crate::local::{model_path, LocalWorker};
use crate::{CliResult, ModelArgs};

pub fn run(model: &ModelArgs, port: u16, api_key: Option<String>) -> CliResult {
    let local = LocalWorker::open(model, hearth_engine::Kernels::Hearth)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let server = hearth_server::Server::start(local.worker(), port, api_key)
            .await
            .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
        // Scripts wait for this line.
        println!("serving {} on {}", model_path(model)?.display(), server.url());
        let _ = tokio::signal::ctrl_c().await;
        server.stop().await;
        CliResult::Ok(())
    })
}
