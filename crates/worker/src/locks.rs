//! **One policy for a poisoned lock:** every lock in the worker is taken
//! through [`lock`], which recovers the data. A panic inside the worker is
//! caught per job and leaves the shared bookkeeping consistent between
//! statements, so a lock poisoned by it must not take every later command
//! down with it.

use std::sync::{Mutex, MutexGuard};

/// Takes `m`, recovering it if a panic poisoned it (see the module's doc).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
