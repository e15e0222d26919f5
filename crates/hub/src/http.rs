//! One HTTP exchange with the Hub, its redirects followed here rather than
//! by ureq, so that the access token goes only to the Hub's own origin: a
//! `resolve` URL redirects to a CDN host, which must never see it.

use std::time::Duration;

use ureq::http::{HeaderMap, Response};
use ureq::Body;

use crate::error::{HubError, Result};

/// More redirects than this is a loop (the Hub uses one, to its CDN).
const MAX_HOPS: u32 = 8;

/// Where requests go and with what.
#[derive(Clone)]
pub(crate) struct Client {
    agent: ureq::Agent,
    /// The Hub's origin (`scheme://host[:port]`), the only one given the token.
    hub_origin: String,
    token: Option<String>,
}

/// A response after its redirects, with the headers of every hop before it
/// (the Hub's own answer names the commit and the file's SHA-256).
pub(crate) struct Reply {
    pub response: Response<Body>,
    pub earlier: Vec<HeaderMap>,
    pub url: String,
}

impl Reply {
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    /// The body as text, at most `limit` bytes of it.
    pub fn text(self, limit: u64) -> Result<String> {
        let url = self.url;
        self.response
            .into_body()
            .with_config()
            .limit(limit)
            .read_to_string()
            .map_err(|e| HubError::Network { url, reason: e.to_string() })
    }

    /// Header `name` of the last response alone (what the body is).
    pub fn final_header(&self, name: &str) -> Option<String> {
        self.response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }

    /// Header `name` of the last response or, failing that, of any hop
    /// before it (the Hub's own answer names the commit and the hash).
    pub fn header(&self, name: &str) -> Option<String> {
        std::iter::once(self.response.headers())
            .chain(self.earlier.iter().rev())
            .find_map(|h| h.get(name))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

impl Client {
    pub fn new(endpoint: &str, token: Option<String>) -> Self {
        let agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(20)))
            .timeout_recv_response(Some(Duration::from_secs(30)))
            .timeout_per_read(Some(Duration::from_secs(20)))
            .user_agent(concat!("hearth/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let hub_origin = origin(endpoint).unwrap_or(endpoint).to_ascii_lowercase();
        Self { agent, hub_origin, token: token.filter(|t| !t.is_empty()) }
    }

    /// `GET` (or `HEAD`) `url`, from byte `range.0` to `range.1` inclusive
    /// where given, following redirects.
    pub fn send(&self, head: bool, url: &str, range: Option<(u64, Option<u64>)>) -> Result<Reply> {
        let mut url = url.to_string();
        let mut earlier = Vec::new();
        for _ in 0..=MAX_HOPS {
            let to_hub = origin(&url).is_some_and(|o| o.eq_ignore_ascii_case(&self.hub_origin));
            let response = {
                let mut request = if head { self.agent.head(&url) } else { self.agent.get(&url) };
                // Sizes and hashes are of the bytes as stored.
                request = request.header("Accept-Encoding", "identity");
                if let (true, Some(token)) = (to_hub, &self.token) {
                    request = request.header("Authorization", format!("Bearer {token}"));
                }
                if let Some((from, to)) = range {
                    let to = to.map(|t| t.to_string()).unwrap_or_default();
                    request = request.header("Range", format!("bytes={from}-{to}"));
                }
                request.call().map_err(|e| HubError::Network { url: url.clone(), reason: e.to_string() })?
            };
            if !response.status().is_redirection() {
                return Ok(Reply { response, earlier, url });
            }
            let location = response.headers().get("location").and_then(|v| v.to_str().ok()).ok_or_else(|| {
                HubError::BadAnswer { url: url.clone(), reason: "a redirect without a Location".into() }
            })?;
            let next = join(&url, location);
            earlier.push(response.headers().clone());
            url = next;
        }
        Err(HubError::RedirectLoop { url, hops: MAX_HOPS })
    }

    /// `GET url` as JSON, with the Hub's errors in words.
    pub fn json<T: serde::de::DeserializeOwned>(&self, url: &str, what: &str) -> Result<T> {
        let reply = self.send(false, url, None)?;
        let reply = check(reply, what)?;
        let text = reply.text(64 << 20)?;
        serde_json::from_str(&text).map_err(|e| HubError::BadAnswer { url: url.to_string(), reason: e.to_string() })
    }
}

/// `reply` if it succeeded; else the Hub's answer as an error about `what`.
pub(crate) fn check(reply: Reply, what: &str) -> Result<Reply> {
    let status = reply.status();
    if (200..300).contains(&status) {
        return Ok(reply);
    }
    let code = reply.header("x-error-code");
    let message = reply.header("x-error-message");
    Err(match (status, code.as_deref()) {
        (401 | 403, Some("GatedRepo")) => HubError::Gated { repo: what.to_string() },
        (404, _) | (401, Some("RepoNotFound" | "EntryNotFound")) => HubError::NotFound { what: what.to_string() },
        _ => HubError::Http { url: reply.url, status, message },
    })
}

/// `scheme://host[:port]` of an absolute URL.
fn origin(url: &str) -> Option<&str> {
    let after_scheme = url.find("://")? + 3;
    let end = url[after_scheme..].find(['/', '?', '#']).map_or(url.len(), |i| after_scheme + i);
    Some(&url[..end])
}

/// `location` against the URL it came from (the Hub sends absolute and
/// root-relative ones).
fn join(from: &str, location: &str) -> String {
    if location.contains("://") {
        location.to_string()
    } else if let Some(rest) = location.strip_prefix("//") {
        // Scheme-relative: another host, the same scheme.
        let scheme = from.split_once("://").map_or("https", |(s, _)| s);
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{}{location}", origin(from).unwrap_or_default())
    } else {
        let path = from.split(['?', '#']).next().unwrap_or(from);
        let base = path.rsplit_once('/').map_or(path, |(b, _)| b);
        format!("{base}/{location}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_redirect_targets() {
        assert_eq!(origin("https://huggingface.co/api/models?x=1"), Some("https://huggingface.co"));
        assert_eq!(origin("http://127.0.0.1:8080"), Some("http://127.0.0.1:8080"));
        assert_eq!(origin("no scheme"), None);
        assert_eq!(join("https://hf.co/a/b/c", "/x/y"), "https://hf.co/x/y");
        assert_eq!(join("https://hf.co/a/b/c", "https://cdn.hf.co/z"), "https://cdn.hf.co/z");
        assert_eq!(join("https://hf.co/a/b/c", "d"), "https://hf.co/a/b/d");
        assert_eq!(join("https://hf.co/a/b?x=/y", "d"), "https://hf.co/a/d");
        assert_eq!(join("http://127.0.0.1:1/a", "//cdn.example/b"), "http://cdn.example/b");
    }
}
