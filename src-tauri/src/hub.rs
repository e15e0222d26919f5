//! Get models: the Hub's access token and the download queue.
//!
//! Downloads run one at a time on a thread of their own (each file over
//! several connections, `hearth_hub`), queued behind each other; Pause keeps
//! what arrived, Resume queues the rest, Cancel deletes it. The whole queue
//! goes to the page as one `hub-downloads` event on every change and a few
//! times a second while one runs, so the view shows the same state however
//! often it is opened. A finished model is added to the library, labelled
//! as the Hub's, and opened.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hearth_hub::{Control, FetchOptions, HfCache, Hub, HubError, Quant, ToFetch};
use serde::Serialize;
use ts_rs::TS;

use crate::error::{locked, AppError, AppResult, ErrorKind};

const SERVICE: &str = "Hearth";
const TOKEN_ENTRY: &str = "huggingface-token";

/// Where the Hub's token is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub enum HubTokenStorage {
    None,
    /// The OS keychain.
    Keychain,
    /// Memory, until Hearth closes (there is no keychain).
    Session,
    /// `HF_TOKEN` in the environment Hearth was started with.
    Environment,
}

/// One download in the queue, as the page shows it.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub struct HubDownload {
    pub id: u32,
    pub repo: String,
    pub quant: String,
    pub state: HubDownloadState,
    #[ts(type = "number")]
    pub downloaded: u64,
    #[ts(type = "number")]
    pub total: u64,
    pub bytes_per_second: f64,
    /// Reading the file back to check its SHA-256.
    pub checking: bool,
    pub error: Option<AppError>,
    /// The file that opens it, once done.
    pub path: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub enum HubDownloadState {
    Queued,
    Running,
    Paused,
    Failed,
    Done,
}

struct Job {
    shown: HubDownload,
    commit: String,
    files: Quant,
    control: Control,
    /// Which files' blobs were whole before this download first ran:
    /// Cancel deletes the others, which it fetched.
    blobs_before: Option<Vec<bool>>,
}

/// What a finished download does next: add the model to the library and open it.
pub type OnDone = Box<dyn Fn(&HubDownload) + Send + Sync>;
/// Sends the whole queue to the page.
pub type OnChange = Box<dyn Fn(&[HubDownload]) + Send + Sync>;

/// The Hub's settings, token and download queue.
pub struct HubState {
    tokens: Arc<Tokens>,
    pub cache: HfCache,
    queue: Arc<Queue>,
    /// The quants of the repo page opened last (repo, commit, quants), so
    /// its facts and downloads need no listing of their own.
    listed: Mutex<Option<(String, String, Vec<Quant>)>>,
}

/// The endpoint and where its token comes from, read when a request starts.
struct Tokens {
    endpoint: String,
    env_token: Option<String>,
    session_token: Mutex<Option<String>>,
}

impl Tokens {
    fn hub(&self) -> Hub {
        let token = self.env_token.clone().or_else(|| locked(&self.session_token).clone()).or_else(keychain_token);
        Hub::new(&self.endpoint, token)
    }
}

struct Queue {
    jobs: Mutex<Vec<Job>>,
    wake: Condvar,
    next_id: AtomicU32,
    cache: HfCache,
    on_change: OnChange,
    on_done: OnDone,
}

impl HubState {
    pub fn new(config: &crate::config::AppConfig, on_change: OnChange, on_done: OnDone) -> Self {
        let queue = Arc::new(Queue {
            jobs: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            next_id: AtomicU32::new(1),
            cache: HfCache::new(config.hf_cache.clone()),
            on_change,
            on_done,
        });
        let tokens = Arc::new(Tokens {
            endpoint: config.hub_endpoint.clone(),
            env_token: config.hub_token.clone(),
            session_token: Mutex::new(None),
        });
        let cache = HfCache::new(config.hf_cache.clone());
        let (thread_tokens, thread_cache, thread_queue) = (tokens.clone(), cache.clone(), queue.clone());
        std::thread::Builder::new()
            .name("hearth-hub-downloads".into())
            .spawn(move || thread_queue.run(&thread_tokens, &thread_cache))
            .expect("the downloads thread starts");
        Self { tokens, cache, queue, listed: Mutex::new(None) }
    }

    /// Remembers a repo page's quants.
    pub fn remember_listing(&self, repo: &str, commit: &str, quants: Vec<Quant>) {
        *locked(&self.listed) = Some((repo.to_string(), commit.to_string(), quants));
    }

    /// The quant whose first file is `first`, from the page opened last.
    pub fn listed_quant(&self, repo: &str, commit: &str, first: &str) -> Option<Quant> {
        let listed = locked(&self.listed);
        let (r, c, quants) = listed.as_ref()?;
        (r == repo && c == commit).then(|| quants.iter().find(|q| q.first() == first).cloned()).flatten()
    }

    /// The Hub with the token, for a search or a repo's page.
    pub fn hub(&self) -> Hub {
        self.tokens.hub()
    }

    pub fn token_storage(&self) -> HubTokenStorage {
        if self.tokens.env_token.is_some() {
            HubTokenStorage::Environment
        } else if locked(&self.tokens.session_token).is_some() {
            HubTokenStorage::Session
        } else if keychain_token().is_some() {
            HubTokenStorage::Keychain
        } else {
            HubTokenStorage::None
        }
    }

    /// Keeps `token` in the keychain, else for this session; `None` forgets it.
    pub fn set_token(&self, token: Option<&str>) -> HubTokenStorage {
        let token = token.map(str::trim).filter(|t| !t.is_empty());
        let entry = keyring::Entry::new(SERVICE, TOKEN_ENTRY);
        match token {
            None => {
                *locked(&self.tokens.session_token) = None;
                if let Ok(e) = entry {
                    let _ = e.delete_credential();
                }
                HubTokenStorage::None
            }
            Some(t) => match entry.and_then(|e| e.set_password(t)) {
                Ok(()) => {
                    *locked(&self.tokens.session_token) = None;
                    HubTokenStorage::Keychain
                }
                Err(e) => {
                    tracing::info!("no keychain for the Hub token ({e}); keeping it for this session");
                    *locked(&self.tokens.session_token) = Some(t.to_string());
                    HubTokenStorage::Session
                }
            },
        }
    }

    pub fn downloads(&self) -> Vec<HubDownload> {
        self.queue.shown()
    }

    /// Queues `quant` of `repo` at `commit`; a model already queued or
    /// running is not queued twice.
    pub fn enqueue(&self, repo: &str, commit: &str, quant: Quant) -> AppResult<u32> {
        let mut jobs = locked(&self.queue.jobs);
        let same = |j: &Job| {
            j.shown.repo == repo && j.files.first() == quant.first() && j.shown.state != HubDownloadState::Done
        };
        if let Some(j) = jobs.iter_mut().find(|j| same(j)) {
            // Asked again: a paused or failed one goes on where it stopped.
            if matches!(j.shown.state, HubDownloadState::Paused | HubDownloadState::Failed) {
                j.control = Control::default();
                j.shown.state = HubDownloadState::Queued;
                j.shown.error = None;
            }
            let id = j.shown.id;
            drop(jobs);
            self.queue.changed();
            self.queue.wake.notify_all();
            return Ok(id);
        }
        // Never reused, so a late click cannot reach another download.
        let id = self.queue.next_id.fetch_add(1, Ordering::SeqCst);
        jobs.push(Job {
            shown: HubDownload {
                id,
                repo: repo.to_string(),
                quant: quant.name.clone(),
                state: HubDownloadState::Queued,
                downloaded: 0,
                total: quant.size,
                bytes_per_second: 0.0,
                checking: false,
                error: None,
                path: None,
            },
            commit: commit.to_string(),
            files: quant,
            control: Control::default(),
            blobs_before: None,
        });
        drop(jobs);
        self.queue.changed();
        self.queue.wake.notify_all();
        Ok(id)
    }

    /// Pause keeps what arrived; Resume queues it again; Cancel deletes what
    /// arrived (the file in progress and the parts it fetched whole) and
    /// takes it off the list.
    pub fn act(&self, id: u32, action: DownloadAction) -> AppResult<()> {
        let mut jobs = locked(&self.queue.jobs);
        let at = jobs
            .iter()
            .position(|j| j.shown.id == id)
            .ok_or_else(|| AppError::new(ErrorKind::NotFound, format!("no download {id}")))?;
        let job = &mut jobs[at];
        match (action, job.shown.state) {
            (DownloadAction::Pause, HubDownloadState::Running) => job.control.pause(),
            (DownloadAction::Pause, HubDownloadState::Queued) => job.shown.state = HubDownloadState::Paused,
            (DownloadAction::Resume, HubDownloadState::Paused | HubDownloadState::Failed) => {
                job.control = Control::default();
                job.shown.state = HubDownloadState::Queued;
                job.shown.error = None;
            }
            (DownloadAction::Cancel, HubDownloadState::Running) => job.control.cancel(),
            (DownloadAction::Cancel, HubDownloadState::Done) => {
                jobs.remove(at);
            }
            (DownloadAction::Cancel, _) => {
                let job = jobs.remove(at);
                self.queue.discard(&job);
            }
            (action, state) => {
                return Err(AppError::new(
                    ErrorKind::InvalidSettings,
                    format!("cannot {action:?} a download that is {state:?}"),
                ))
            }
        }
        drop(jobs);
        self.queue.changed();
        self.queue.wake.notify_all();
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export, export_to = "bindings/")]
pub enum DownloadAction {
    Pause,
    Resume,
    Cancel,
}

fn keychain_token() -> Option<String> {
    keyring::Entry::new(SERVICE, TOKEN_ENTRY).and_then(|e| e.get_password()).ok()
}

/// How often a running download's progress goes to the page.
const REPORT_EVERY: Duration = Duration::from_millis(250);

impl Queue {
    fn shown(&self) -> Vec<HubDownload> {
        locked(&self.jobs).iter().map(|j| j.shown.clone()).collect()
    }

    fn changed(&self) {
        (self.on_change)(&self.shown());
    }

    /// Runs queued downloads one after another, for as long as the app runs.
    fn run(&self, tokens: &Tokens, cache: &HfCache) {
        loop {
            let next = {
                let mut jobs = locked(&self.jobs);
                loop {
                    if let Some(j) = jobs.iter_mut().find(|j| j.shown.state == HubDownloadState::Queued) {
                        j.shown.state = HubDownloadState::Running;
                        if j.blobs_before.is_none() {
                            j.blobs_before =
                                Some(j.files.files.iter().map(|f| blob_is_whole(cache, &j.shown.repo, f)).collect());
                        }
                        break (j.shown.id, j.shown.repo.clone(), j.commit.clone(), j.files.clone(), j.control.clone());
                    }
                    jobs = self.wake.wait(jobs).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            self.changed();
            let (id, repo, commit, quant, control) = next;
            let mut last = Instant::now();
            let wanted = ToFetch { repo_id: &repo, commit: &commit, files: &quant.files };
            // A panic fails this download, not the queue.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                tokens.hub().download(cache, wanted, FetchOptions::default(), &control, |p| {
                    if last.elapsed() < REPORT_EVERY && p.downloaded < p.total {
                        return;
                    }
                    last = Instant::now();
                    if let Some(j) = locked(&self.jobs).iter_mut().find(|j| j.shown.id == id) {
                        j.shown.downloaded = p.downloaded;
                        j.shown.total = p.total;
                        j.shown.bytes_per_second = p.bytes_per_second;
                        j.shown.checking = p.checking;
                    }
                    self.changed();
                })
            }))
            .unwrap_or_else(|_| {
                Err(HubError::Network { url: repo.clone(), reason: "the download stopped on an internal error".into() })
            });
            let done = {
                let mut jobs = locked(&self.jobs);
                let Some(at) = jobs.iter().position(|j| j.shown.id == id) else { continue };
                // Cancel wins over whatever the download ended with.
                if control.is_cancelled() {
                    let job = jobs.remove(at);
                    self.discard(&job);
                    None
                } else {
                    let job = &mut jobs[at];
                    job.shown.bytes_per_second = 0.0;
                    job.shown.checking = false;
                    match result {
                        Ok(paths) => {
                            job.shown.state = HubDownloadState::Done;
                            job.shown.downloaded = job.shown.total;
                            job.shown.path = paths.first().map(|p| p.display().to_string());
                            Some(job.shown.clone())
                        }
                        Err(HubError::Paused) => {
                            job.shown.state = HubDownloadState::Paused;
                            None
                        }
                        Err(HubError::Cancelled) => {
                            let job = jobs.remove(at);
                            self.discard(&job);
                            None
                        }
                        Err(e) => {
                            job.shown.state = HubDownloadState::Failed;
                            job.shown.error = Some(hub_error(e));
                            None
                        }
                    }
                }
            };
            self.changed();
            if let Some(done) = done {
                (self.on_done)(&done);
            }
        }
    }

    /// What a cancelled download leaves: its part files, and the files it
    /// fetched whole (a model's earlier parts) with their snapshot entries.
    fn discard(&self, job: &Job) {
        hearth_hub::discard_partial(&self.cache, &job.shown.repo, &job.files.files);
        let Some(before) = &job.blobs_before else { return };
        for (file, was_whole) in job.files.files.iter().zip(before) {
            if !was_whole {
                self.cache.remove(&job.shown.repo, &job.commit, file);
            }
        }
    }
}

fn blob_is_whole(cache: &HfCache, repo: &str, file: &hearth_hub::RepoFile) -> bool {
    file.sha256
        .as_deref()
        .is_some_and(|sha| std::fs::metadata(cache.blob_path(repo, sha)).is_ok_and(|m| m.len() == file.size))
}

/// A Hub error as the page's `{kind, message}`.
pub fn hub_error(e: HubError) -> AppError {
    let kind = match &e {
        HubError::NotFound { .. } => ErrorKind::NotFound,
        HubError::DiskFull { .. } => ErrorKind::DiskFull,
        HubError::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull => ErrorKind::DiskFull,
        HubError::Io { .. } => ErrorKind::Storage,
        HubError::Model(_) => ErrorKind::BadModel,
        _ => ErrorKind::Download,
    };
    AppError::new(kind, e.to_string())
}

/// The snapshot path of a finished download, as a `PathBuf`.
pub fn done_path(d: &HubDownload) -> Option<PathBuf> {
    d.path.as_deref().map(PathBuf::from)
}
