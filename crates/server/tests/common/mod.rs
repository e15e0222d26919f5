//! A running API server on a model, for the API tests.
#![allow(dead_code, reason = "each test binary uses its own part of the shared helpers")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// A worker on a model and the server in front of it (key `key`), stopped
/// when dropped.
pub struct Peer {
    _dir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    server: Option<hearth_server::Server>,
}

impl Peer {
    /// On the model `model` names, given a folder that lives as long as the peer.
    pub fn start(model: impl FnOnce(&Path) -> PathBuf) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let model = model(dir.path());
        let store = hearth_store::Store::open(dir.path().join("hearth.db")).unwrap();
        let worker =
            Arc::new(hearth_worker::Worker::start(store, hearth_worker::WorkerConfig::in_memory(), Box::new(|_| {})));
        worker.load_model(model);
        assert!(worker.wait_idle(Duration::from_secs(120)));
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let server = runtime.block_on(hearth_server::Server::start(worker, 0, Some("key".into()))).unwrap();
        Self { _dir: dir, runtime, server: Some(server) }
    }

    /// The base URL (`…/v1`).
    pub fn url(&self) -> String {
        self.server.as_ref().unwrap().url()
    }

    /// On the default model.
    pub fn on_default_model() -> Self {
        Self::start(|_| hearth_engine::paths::default_model_path(|k| std::env::var_os(k)))
    }

    /// `POST /v1/chat/completions`: the status and the body's text.
    pub fn chat(&self, body: Value) -> (u16, String) {
        self.post("/chat/completions", body)
    }

    /// `POST /v1{path}`: the status and the body's text.
    pub fn post(&self, path: &str, body: Value) -> (u16, String) {
        let url = format!("{}{path}", self.server.as_ref().unwrap().url());
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut r = agent
            .post(&url)
            .header("Authorization", "Bearer key")
            .header("Content-Type", "application/json")
            .send(body.to_string().as_bytes())
            .unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            self.runtime.block_on(s.stop());
        }
    }
}
