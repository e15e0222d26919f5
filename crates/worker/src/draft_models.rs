//! The draft models replies draft with (`SpeculationMode::Draft`): each
//! opened on the CPU for the first reply that names it, checked against the
//! loaded model (`DraftModel::new`: the same vocabulary, no recurrent
//! layers), and kept while replies keep naming it. Two at most, the least
//! recently used let go first; all of them when another model loads.
//!
//! A file is hashed when it is opened (remembered in the store while the
//! file's size and time are the same), so the draft caches saved from its
//! first reply on can be read back. A draft model is small, so this takes a
//! moment on the worker thread, where the loaded model's hash is computed in
//! the background.

use std::path::Path;
use std::sync::{Arc, Weak};

use hearth_engine::{DraftModel, Engine, EngineError};
use hearth_store::Store;

use crate::error::AppError;

/// Draft models kept open at most.
const KEEP: usize = 2;

#[derive(Default)]
pub(crate) struct DraftModels {
    /// Most recently used last.
    open: Vec<Open>,
}

/// A draft model open.
struct Open {
    engine: Arc<Engine>,
    /// It checked against a target: not a new model that happens to be at
    /// the old one's address.
    checked: Option<(Weak<Engine>, DraftModel)>,
}

impl DraftModels {
    /// `path` as a draft model for `target`, opened unless it is open; a
    /// file that cannot be opened or cannot draft for `target` is a
    /// `draft_model` setting error that says why.
    ///
    /// `hashing`: the store the file's hash is remembered in, where model
    /// files are hashed (`WorkerConfig::hash_model_files`).
    pub(crate) fn get(
        &mut self,
        target: &Arc<Engine>,
        path: &str,
        hashing: Option<&Store>,
    ) -> Result<DraftModel, AppError> {
        let at = self.open.iter().position(|o| o.engine.path() == Path::new(path));
        let mut open = match at {
            Some(i) => self.open.remove(i),
            None => {
                let engine = Engine::open(path).map_err(|e| {
                    EngineError::setting("draft_model", format!("cannot open the draft model {path}: {e}"))
                })?;
                if let Some(store) = hashing {
                    remember_hash(&engine, path, store);
                }
                Open { engine: Arc::new(engine), checked: None }
            }
        };
        let draft = match &open.checked {
            Some((checked, draft)) if checked.as_ptr() == Arc::as_ptr(target) && checked.strong_count() > 0 => {
                Ok(draft.clone())
            }
            _ => DraftModel::new(target, open.engine.clone()),
        };
        open.checked = draft.as_ref().ok().map(|d| (Arc::downgrade(target), d.clone()));
        self.open.push(open);
        if self.open.len() > KEEP {
            self.open.remove(0);
        }
        Ok(draft?)
    }

    /// The draft model open from `path`, whose sessions the caches save and restore.
    pub(crate) fn engine(&self, path: &Path) -> Option<&Engine> {
        self.open.iter().find(|o| o.engine.path() == path).map(|o| &*o.engine)
    }

    /// Lets every draft model go (another model is loading).
    pub(crate) fn clear(&mut self) {
        self.open.clear();
    }
}

/// Gives `engine` its file's hash: the store's, else computed now and
/// remembered if the file did not change meanwhile. Without it its caches
/// are written but never read back.
fn remember_hash(engine: &Engine, path: &str, store: &Store) {
    let Ok((size, mtime)) = engine.file_fingerprint() else { return };
    if let Ok(Some(known)) = store.model_sha256(path, size, mtime) {
        return engine.set_file_sha256(known);
    }
    match engine.hash_file(&|| false) {
        Ok(Some(sha256)) if engine.file_fingerprint().ok() == Some((size, mtime)) => {
            if let Err(e) = store.set_model_sha256(path, size, mtime, &sha256) {
                tracing::warn!("cannot remember the draft model's hash: {e}");
            }
        }
        Ok(_) => tracing::warn!("the draft model's file changed while it was hashed; not remembering its hash"),
        Err(e) => tracing::warn!("cannot hash the draft model's file (its caches will not be reused): {e}"),
    }
}
