//! The draft model replies draft with (`SpeculationMode::Draft`): opened on
//! the CPU for the first reply that names it, checked against the loaded
//! model (`DraftModel::new`: the same vocabulary, no recurrent layers), and
//! kept while replies keep naming it. One at a time: a chat that names
//! another replaces it.
//!
//! Its file is hashed when it is opened (remembered in the store while the
//! file's size and time are the same), so the draft caches saved from its
//! first reply on can be read back: a draft model is small, so this takes
//! a moment where the loaded model's hash is computed in the background.

use std::path::Path;
use std::sync::Arc;

use hearth_engine::{DraftModel, Engine};

use hearth_store::Store;

use crate::error::AppError;

#[derive(Default)]
pub(crate) struct DraftModels {
    open: Option<Open>,
}

/// The draft model open.
struct Open {
    engine: Arc<Engine>,
    /// It checked against a target, the target by address (the loaded
    /// engine is replaced whole when the model changes).
    checked: Option<(usize, DraftModel)>,
}

impl DraftModels {
    /// `path` as a draft model for `target`, opened unless it is open; a
    /// file that cannot be opened or cannot draft for `target` is an error
    /// that says why.
    ///
    /// `hashing`: the store the file's hash is remembered in, where model
    /// files are hashed (`WorkerConfig::hash_model_files`).
    pub(crate) fn get(
        &mut self,
        target: &Arc<Engine>,
        path: &str,
        hashing: Option<&Store>,
    ) -> Result<DraftModel, AppError> {
        let target_key = Arc::as_ptr(target) as usize;
        if let Some(Open { checked: Some((key, draft)), .. }) = &self.open {
            if *key == target_key && draft.path() == Path::new(path) {
                return Ok(draft.clone());
            }
        }
        let engine = match self.open.take() {
            Some(Open { engine, .. }) if engine.path() == Path::new(path) => engine,
            _ => {
                let engine = Engine::open(path)?;
                if let Some(store) = hashing {
                    remember_hash(&engine, path, store);
                }
                Arc::new(engine)
            }
        };
        let checked = DraftModel::new(target, engine.clone());
        self.open = Some(Open { engine, checked: checked.as_ref().ok().map(|d| (target_key, d.clone())) });
        Ok(checked?)
    }

    /// The draft model open, whose sessions the caches save and restore.
    pub(crate) fn engine(&self) -> Option<&Engine> {
        self.open.as_ref().map(|o| &*o.engine)
    }
}

/// Gives `engine` its file's hash: the store's, else computed now and
/// remembered. Without it its caches are written but never read back.
fn remember_hash(engine: &Engine, path: &str, store: &Store) {
    let Ok((size, mtime)) = engine.file_fingerprint() else { return };
    if let Ok(Some(known)) = store.model_sha256(path, size, mtime) {
        return engine.set_file_sha256(known);
    }
    match engine.hash_file(&|| false) {
        Ok(Some(sha256)) => {
            if let Err(e) = store.set_model_sha256(path, size, mtime, &sha256) {
                tracing::warn!("cannot remember the draft model's hash: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("cannot hash the draft model's file (its caches will not be reused): {e}"),
    }
}
