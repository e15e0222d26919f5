//! The shell's errors. A command answers the page with the worker's
//! `{kind, message}` (the API answers with the same kinds), so an error reads
//! alike wherever it comes from; what the shell adds is its one rule for locks.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use hearth_worker::error::{AppError, AppResult, ErrorKind};

/// The shell's one policy for a poisoned lock: take the value as it is.
/// Every lock in the shell guards a map, an option or the database
/// connection, which their holders change in one call (an insert, a remove,
/// a replace; SQLite rolls an unfinished transaction back), so a panic while
/// one was held leaves nothing half-written. Refusing every later command
/// instead would lose the app for one failed call.
pub fn locked<T>(lock: &Mutex<T>) -> MutexGuard<'_, T> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}
