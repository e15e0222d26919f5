/// What can go wrong reading or writing the database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the disk is full: {0}")]
    DiskFull(String),
    #[error("the database file is damaged or not a Hearth database: {0}")]
    Corrupt(String),
    #[error("the database was written by a newer Hearth (schema {found}, this build knows {known})")]
    TooNew { found: i64, known: i64 },
    #[error("{what} {id} does not exist")]
    NotFound { what: &'static str, id: i64 },
    #[error("{0}")]
    Invalid(String),
    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),
    #[error("cannot create the data folder: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ffi::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => StoreError::DiskFull(e.to_string()),
            Some(ErrorCode::DatabaseCorrupt) | Some(ErrorCode::NotADatabase) => StoreError::Corrupt(e.to_string()),
            _ => StoreError::Sqlite(e),
        }
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(format!("stored JSON does not parse: {e}"))
    }
}
