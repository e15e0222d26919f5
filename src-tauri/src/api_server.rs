//! The "Local API server" switch: Hearth's OpenAI-compatible API
//! (`hearth-server`) on 127.0.0.1, over the app's own worker, so API
//! clients and the window share the model and its queue. Off by default;
//! its settings (on/off, port, key) are an app setting, so it comes back on
//! at the next start if it was on.

use std::sync::Arc;

use hearth_store::Store;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::{AppError, AppResult, ErrorKind};
use crate::worker::{RequestCache, Worker};

/// The app-setting key that keeps `ApiServerSettings`.
pub const API_SERVER_KEY: &str = "api_server";

/// What the user chose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct ApiServerSettings {
    pub enabled: bool,
    pub port: u16,
    /// Clients send it as `Authorization: Bearer KEY`.
    pub key: String,
}

impl Default for ApiServerSettings {
    fn default() -> Self {
        Self { enabled: false, port: 8080, key: hearth_server::new_api_key() }
    }
}

/// The switch as the settings panel shows it.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct ApiServerState {
    pub settings: ApiServerSettings,
    /// The base URL clients take (`http://127.0.0.1:PORT/v1`) while it runs.
    pub url: Option<String>,
    /// Each client's cache, most recently used first.
    pub caches: Vec<RequestCache>,
}

/// The server, while it runs.
#[derive(Default)]
pub struct ApiServer {
    running: tokio::sync::Mutex<Option<hearth_server::Server>>,
}

impl ApiServer {
    /// The saved settings (a key is made and saved the first time).
    pub fn settings(store: &Store) -> AppResult<ApiServerSettings> {
        if let Some(saved) = store.app_setting(API_SERVER_KEY)?.and_then(|j| serde_json::from_str(&j).ok()) {
            return Ok(saved);
        }
        let fresh = ApiServerSettings::default();
        save(store, &fresh)?;
        Ok(fresh)
    }

    pub async fn state(&self, settings: ApiServerSettings, worker: &Worker) -> ApiServerState {
        let url = self.running.lock().await.as_ref().map(hearth_server::Server::url);
        ApiServerState { settings, url, caches: worker.request_caches() }
    }

    /// Stops the server if it runs, then starts it with `settings` if they
    /// say so. A port that cannot be bound is an error and leaves it off.
    pub async fn apply(&self, worker: Arc<Worker>, settings: &ApiServerSettings) -> AppResult<()> {
        let mut running = self.running.lock().await;
        if let Some(server) = running.take() {
            server.stop().await;
        }
        if settings.enabled {
            let server =
                hearth_server::Server::start(worker, settings.port, Some(settings.key.clone())).await.map_err(|e| {
                    AppError::new(
                        ErrorKind::InvalidSettings,
                        format!("cannot serve on 127.0.0.1:{}: {e}; choose another port", settings.port),
                    )
                })?;
            *running = Some(server);
        }
        Ok(())
    }
}

pub fn save(store: &Store, settings: &ApiServerSettings) -> AppResult<()> {
    let json = serde_json::to_string(settings).map_err(|e| AppError::new(ErrorKind::Internal, e.to_string()))?;
    store.set_app_setting(API_SERVER_KEY, &json)?;
    Ok(())
}
