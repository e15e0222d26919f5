//! Remote endpoints' API keys: in the OS keychain (`keyring`: macOS
//! Keychain, Windows Credential Manager, the Secret Service on Linux) when
//! there is one; else in memory until Hearth closes, or — only when the
//! user ticks the box — in Hearth's database, unencrypted. The database row
//! says which (`KeyStorage`), so the settings panel can say it too.
//!
//! A keychain call can wait on the user (an unlock prompt), so callers make
//! it on a blocking thread and never while holding the database.

use std::collections::HashMap;
use std::sync::Mutex;

use hearth_store::KeyStorage;

use crate::error::{locked, AppError, AppResult, ErrorKind};

const SERVICE: &str = "Hearth";

/// Keys read or entered in this session, by endpoint id.
#[derive(Default)]
pub struct Keys {
    known: Mutex<HashMap<i64, String>>,
}

fn entry(endpoint_id: i64) -> Result<keyring::Entry, keyring::Error> {
    keyring::Entry::new(SERVICE, &format!("endpoint-{endpoint_id}"))
}

impl Keys {
    /// Keeps `key` for the endpoint where the platform allows, and returns
    /// where it went (the caller records that, and the key itself only for
    /// `Database`). A key that leaves the keychain is deleted from it.
    pub fn place(
        &self,
        endpoint_id: i64,
        previous: KeyStorage,
        key: Option<&str>,
        allow_plain_text: bool,
    ) -> AppResult<KeyStorage> {
        let key = key.map(str::trim).filter(|k| !k.is_empty());
        let storage = match key {
            None => KeyStorage::None,
            Some(k) => match entry(endpoint_id).and_then(|e| e.set_password(k)) {
                Ok(()) => KeyStorage::Keychain,
                Err(e) => {
                    tracing::info!(
                        "no keychain for the endpoint's key ({e}); {}",
                        if allow_plain_text {
                            "keeping it in the database as asked"
                        } else {
                            "keeping it for this session"
                        }
                    );
                    if allow_plain_text {
                        KeyStorage::Database
                    } else {
                        KeyStorage::Session
                    }
                }
            },
        };
        if previous == KeyStorage::Keychain && storage != KeyStorage::Keychain {
            if let Err(e) = entry(endpoint_id).and_then(|e| e.delete_credential()) {
                tracing::warn!("cannot remove the old key from the keychain: {e}");
            }
        }
        let mut known = locked(&self.known);
        match key {
            Some(k) => known.insert(endpoint_id, k.to_string()),
            None => known.remove(&endpoint_id),
        };
        Ok(storage)
    }

    /// The endpoint's key, from wherever it is kept (`stored`: the key the
    /// database holds, for `Database`).
    pub fn get(&self, endpoint: &hearth_store::Endpoint, stored: Option<String>) -> AppResult<Option<String>> {
        if let Some(k) = locked(&self.known).get(&endpoint.id) {
            return Ok(Some(k.clone()));
        }
        let key = match endpoint.key_storage {
            KeyStorage::None => None,
            KeyStorage::Database => stored,
            KeyStorage::Keychain => Some(entry(endpoint.id).and_then(|e| e.get_password()).map_err(|e| {
                AppError::new(ErrorKind::Remote, format!("cannot read the key of \"{}\" from the keychain ({e}); enter it again in Settings", endpoint.name))
            })?),
            KeyStorage::Session => {
                return Err(AppError::new(
                    ErrorKind::Remote,
                    format!("the key of \"{}\" was kept only until Hearth closed (there is no keychain); enter it again in Settings", endpoint.name),
                ))
            }
        };
        if let Some(k) = &key {
            locked(&self.known).insert(endpoint.id, k.clone());
        }
        Ok(key)
    }

    pub fn forget(&self, endpoint: &hearth_store::Endpoint) {
        locked(&self.known).remove(&endpoint.id);
        if endpoint.key_storage == KeyStorage::Keychain {
            if let Err(e) = entry(endpoint.id).and_then(|e| e.delete_credential()) {
                tracing::warn!("cannot remove the key of \"{}\" from the keychain: {e}", endpoint.name);
            }
        }
    }
}

/// A base URL as the client takes it: `http(s)://host[:port]/path`, with
/// `/v1` added when no path is given.
pub fn normalize_url(url: &str) -> AppResult<String> {
    let url = url.trim().trim_end_matches('/');
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => {
            Ok(if r.contains('/') { url.to_string() } else { format!("{url}/v1") })
        }
        _ => Err(AppError::new(
            ErrorKind::InvalidSettings,
            "the base URL must start with http:// or https:// and name a host, e.g. http://192.168.1.20:8000/v1",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_take_v1_when_they_have_no_path() {
        assert_eq!(normalize_url(" http://gpu:8000/ ").unwrap(), "http://gpu:8000/v1");
        assert_eq!(normalize_url("https://openrouter.ai/api/v1").unwrap(), "https://openrouter.ai/api/v1");
        for bad in ["gpu:8000", "ftp://x", "http://", "http:///v1"] {
            assert!(normalize_url(bad).is_err(), "{bad}");
        }
    }
}
