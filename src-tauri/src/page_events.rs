//! The events the app sends to the whole page, each with its payload type.
//! A reply's tokens and the default model's download progress go over their
//! command's own `Channel` instead; the Hub's download queue, which outlives
//! any one view, comes here. `tests/ipc_bindings.rs` reads the constants here
//! and writes `ui/src/lib/bindings/events.ts`, one typed `on…` listener per
//! event, so the page never spells an event's name.

use std::marker::PhantomData;

use serde::Serialize;
use tauri::{Emitter, Runtime};

use crate::events::ModelStatus;
use crate::hub::HubDownload;

/// An event's name, typed by its payload.
pub struct PageEvent<T> {
    name: &'static str,
    payload: PhantomData<fn(&T)>,
}

impl<T: Serialize> PageEvent<T> {
    const fn new(name: &'static str) -> Self {
        PageEvent { name, payload: PhantomData }
    }

    /// Sends it to every window. A window that is gone is no error: there is
    /// nobody to tell.
    pub fn emit<R: Runtime>(&self, app: &tauri::AppHandle<R>, payload: &T) {
        if let Err(e) = app.emit(self.name, payload) {
            tracing::debug!("event {} not sent: {e}", self.name);
        }
    }
}

/// The model's status changed: none, loading, ready or failed.
pub const MODEL_STATUS: PageEvent<ModelStatus> = PageEvent::new("model-status");

/// The Hub download queue changed (a download queued, progressed, paused,
/// failed or finished): the whole queue.
pub const HUB_DOWNLOADS: PageEvent<Vec<HubDownload>> = PageEvent::new("hub-downloads");

/// A second launch on this data folder showed this window instead of opening its own.
pub const ANOTHER_LAUNCH: PageEvent<()> = PageEvent::new("another-launch");
