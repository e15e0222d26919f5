//! The app as a whole: what went wrong at start, and the way out of it.

use tauri::{AppHandle, Runtime, State};

use crate::error::{locked, AppError, AppResult, ErrorKind};
use crate::startup::{move_aside, StartupError, StartupFailure};

/// Why the app could not open its data at start, or null.
#[tauri::command]
pub async fn app_startup_error(failure: State<'_, StartupFailure>) -> AppResult<Option<StartupError>> {
    Ok(locked(&failure.0).clone())
}

/// Moves the database that failed to open aside (kept, renamed) and starts
/// again with a fresh one. Returns where the old file went.
#[tauri::command]
pub async fn app_move_database_aside<R: Runtime>(
    app: AppHandle<R>,
    failure: State<'_, StartupFailure>,
) -> AppResult<String> {
    let mut current = locked(&failure.0);
    let database = current.as_ref().and_then(|f| f.database.clone()).ok_or_else(|| {
        AppError::new(ErrorKind::InvalidSettings, "the database opened normally; there is nothing to move aside")
    })?;
    let moved = move_aside(std::path::Path::new(&database))?;
    match crate::manage_state(&app) {
        Ok(()) => {
            *current = None;
            Ok(moved.display().to_string())
        }
        Err(again) => {
            let message = again.error.message.clone();
            *current = Some(again);
            Err(AppError::new(
                ErrorKind::Storage,
                format!("moved the old database to {}, but a fresh one failed too: {message}", moved.display()),
            ))
        }
    }
}
