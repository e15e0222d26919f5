//! The Hub's model API: search, a repo's info and its file tree (with each
//! LFS file's SHA-256), and its README.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{HubError, Result};
use crate::http::{check, Client};

/// How search results are ordered (largest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SearchSort {
    Downloads,
    Trending,
    Recent,
    Likes,
}

impl SearchSort {
    fn param(self) -> &'static str {
        match self {
            Self::Downloads => "downloads",
            Self::Trending => "trendingScore",
            Self::Recent => "lastModified",
            Self::Likes => "likes",
        }
    }
}

/// One repo in a search's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepoSummary {
    /// `org/name`.
    pub id: String,
    pub downloads: u64,
    pub likes: u64,
    /// ISO 8601, as the Hub writes it.
    pub last_modified: Option<String>,
    pub license: Option<String>,
    /// Whether its files need the user to accept terms (and a token).
    pub gated: bool,
}

/// A repo at one commit: its files.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepoDetails {
    pub summary: RepoSummary,
    /// The commit the files are listed at (downloads pin it).
    pub commit: String,
    pub files: Vec<RepoFile>,
}

/// One file of a repo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepoFile {
    /// Within the repo, `/`-separated.
    pub path: String,
    pub size: u64,
    /// An LFS file's SHA-256 (every GGUF file on the Hub is one).
    pub sha256: Option<String>,
}

/// The Hub (or a mirror) as one endpoint and, for gated repos, a token.
#[derive(Clone)]
pub struct Hub {
    endpoint: String,
    pub(crate) client: Client,
}

impl Hub {
    /// `endpoint` as `HF_ENDPOINT` gives it (`https://huggingface.co`);
    /// `token` is sent to that origin only.
    pub fn new(endpoint: &str, token: Option<String>) -> Self {
        let endpoint = endpoint.trim_end_matches('/').to_string();
        Self { client: Client::new(&endpoint, token), endpoint }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Repos with GGUF files matching `query`, `limit` at most.
    pub fn search(&self, query: &str, sort: SearchSort, limit: usize) -> Result<Vec<RepoSummary>> {
        let mut url = format!(
            "{}/api/models?search={}&filter=gguf&sort={}&direction=-1&limit={}",
            self.endpoint,
            encode(query.trim()),
            sort.param(),
            limit.clamp(1, 100)
        );
        for field in ["downloads", "likes", "lastModified", "gated", "tags"] {
            url.push_str(&format!("&expand%5B%5D={field}"));
        }
        let found: Vec<Value> = self.client.json(&url, "search")?;
        found.iter().map(|v| summary(v, &url)).collect()
    }

    /// Repo `repo_id` at `revision` (its main branch when `None`): its
    /// info and every file, listed at the commit the info names.
    pub fn repo(&self, repo_id: &str, revision: Option<&str>) -> Result<RepoDetails> {
        check_repo_id(repo_id)?;
        let revision = encode(revision.unwrap_or("main"));
        let what = format!("model {repo_id}");
        let url = format!("{}/api/models/{repo_id}/revision/{revision}", self.endpoint);
        let info: Value = self.client.json(&url, &what)?;
        let summary = summary(&info, &url)?;
        let commit = info
            .get("sha")
            .and_then(Value::as_str)
            .filter(|s| is_commit(s))
            .ok_or_else(|| HubError::BadAnswer { url: url.clone(), reason: "no commit (a 40-digit sha)".into() })?
            .to_string();
        let mut files = Vec::new();
        let mut next = Some(format!("{}/api/models/{repo_id}/tree/{commit}?recursive=true", self.endpoint));
        while let Some(url) = next.take() {
            let reply = check(self.client.send(false, &url, None)?, &what)?;
            next = reply.header("link").and_then(|l| next_link(&l));
            let text = reply.text(64 << 20)?;
            let page: Vec<Value> = serde_json::from_str(&text)
                .map_err(|e| HubError::BadAnswer { url: url.clone(), reason: e.to_string() })?;
            for entry in page {
                if entry.get("type").and_then(Value::as_str) != Some("file") {
                    continue;
                }
                let path = entry.get("path").and_then(Value::as_str);
                let size = entry.get("size").and_then(Value::as_u64);
                let (Some(path), Some(size)) = (path, size) else {
                    return Err(HubError::BadAnswer {
                        url,
                        reason: format!("a tree entry without a path or size: {entry}"),
                    });
                };
                if !is_file_path(path) {
                    return Err(HubError::BadAnswer {
                        url,
                        reason: format!("a file path that leaves the repo: {path:?}"),
                    });
                }
                let lfs = entry.get("lfs");
                let sha256 = lfs
                    .and_then(|l| l.get("oid").or_else(|| l.get("sha256")))
                    .and_then(Value::as_str)
                    .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
                    .map(str::to_ascii_lowercase);
                files.push(RepoFile { path: path.to_string(), size, sha256 });
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(RepoDetails { summary, commit, files })
    }

    /// The repo's README at `commit`, as text (at most 1 MiB); `None` if it has none.
    pub fn readme(&self, repo_id: &str, commit: &str) -> Result<Option<String>> {
        check_repo_id(repo_id)?;
        let url = self.file_url(repo_id, commit, "README.md");
        let reply = self.client.send(false, &url, None)?;
        if reply.status() == 404 {
            return Ok(None);
        }
        let reply = check(reply, &format!("README of {repo_id}"))?;
        Ok(Some(reply.text(1 << 20)?))
    }

    /// Where file `path` of `repo_id` at `commit` is downloaded from.
    pub fn file_url(&self, repo_id: &str, commit: &str, path: &str) -> String {
        let path: Vec<String> = path.split('/').map(encode).collect();
        format!("{}/{repo_id}/resolve/{}/{}", self.endpoint, encode(commit), path.join("/"))
    }
}

/// A search result or repo info as a `RepoSummary`.
fn summary(v: &Value, url: &str) -> Result<RepoSummary> {
    let id = v
        .get("id")
        .or_else(|| v.get("modelId"))
        .and_then(Value::as_str)
        .ok_or_else(|| HubError::BadAnswer { url: url.to_string(), reason: format!("a model without an id: {v}") })?;
    let tags = v.get("tags").and_then(Value::as_array);
    let license =
        v.get("cardData").and_then(|c| c.get("license")).and_then(Value::as_str).map(str::to_string).or_else(|| {
            tags?.iter().filter_map(Value::as_str).find_map(|t| t.strip_prefix("license:")).map(str::to_string)
        });
    // `false`, or how access is granted ("auto", "manual").
    let gated = match v.get("gated") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty() && s != "false",
        _ => false,
    };
    Ok(RepoSummary {
        id: id.to_string(),
        downloads: v.get("downloads").and_then(Value::as_u64).unwrap_or(0),
        likes: v.get("likes").and_then(Value::as_u64).unwrap_or(0),
        last_modified: v.get("lastModified").and_then(Value::as_str).map(str::to_string),
        license,
        gated,
    })
}

/// A commit as the Hub names it: 40 hex digits, nothing a path could hold.
pub(crate) fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A repo file's path that stays inside the folder it is stored under, on
/// every platform: `/`-separated parts, none empty, `.` or `..`, and no
/// character Windows reads as a separator, a drive or a stream.
pub(crate) fn is_file_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains(['\\', ':', '\0']))
}

/// `org/name`, nothing that could leave the API's path.
pub(crate) fn check_repo_id(repo_id: &str) -> Result<()> {
    let ok_part = |p: &str| {
        !p.is_empty() && p != "." && p != ".." && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    match repo_id.split_once('/') {
        Some((org, name)) if ok_part(org) && ok_part(name) => Ok(()),
        _ => Err(HubError::NotFound { what: format!("model {repo_id:?} (a model is named org/name)") }),
    }
}

/// The `rel="next"` URL of a `Link` header (the tree API pages its listing).
fn next_link(link: &str) -> Option<String> {
    link.split(',').find(|part| part.contains("rel=\"next\"")).and_then(|part| {
        let start = part.find('<')? + 1;
        let end = part.find('>')?;
        Some(part[start..end].to_string())
    })
}

/// Percent-encodes all but RFC 3986's unreserved characters.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_paths_and_commits_cannot_leave_the_cache() {
        assert!(is_file_path("BF16/model-00001-of-00002.gguf"));
        for bad in
            ["", "/abs.gguf", "../x.gguf", "a/../../x.gguf", "a//b.gguf", "./a.gguf", "C:x.gguf", "a\\..\\b", "x:ads"]
        {
            assert!(!is_file_path(bad), "{bad}");
        }
        assert!(is_commit("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_commit("main") && !is_commit("../../../../../../../../../../../../../.."));
    }

    #[test]
    fn repo_ids_cannot_leave_the_api_path() {
        assert!(check_repo_id("unsloth/gpt-oss-20b-GGUF").is_ok());
        for bad in ["", "a", "a/b/c", "../b", "a/..", "a/b?x", "a /b"] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_the_next_page_and_encodes_queries() {
        let link = r#"<https://hf.co/api/models/a/b/tree/main?cursor=xyz>; rel="next""#;
        assert_eq!(next_link(link).as_deref(), Some("https://hf.co/api/models/a/b/tree/main?cursor=xyz"));
        assert_eq!(encode("qwen 3 & co/x"), "qwen%203%20%26%20co%2Fx");
    }
}
