//! Every conversation's KV cache: in memory up to a budget, least recently
//! used first out; on disk after every turn, up to another budget; and the
//! caches of other versions of a conversation (before an edit or a switch
//! truncated the main one), so switching back is instant.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hearth_engine::{Engine, Passes, Session};

use super::shared::{RequestCache, Shared};
use crate::config::WorkerConfig;
use crate::draft_models::DraftModels;

/// Where a conversation's KV cache is: the next turn is instant (warm),
/// reads it from disk (saved), or prefills the whole history (cold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/"))]
pub enum CacheState {
    Warm,
    Saved,
    Cold,
}

/// Caches of other versions kept per conversation: enough for every
/// variant of "Generate 8" beside the main cache.
const KEEP_ALTERNATES: usize = 7;

/// The shortest shared beginning worth cloning another request's cache for
/// (a chat template's opening is shorter).
const MIN_SHARED_TO_CLONE: usize = 64;

/// API clients' caches kept at most, and their share of the memory budget:
/// several agents each keep theirs, and API traffic cannot push the app's
/// chats out.
const MAX_REQUEST_CACHES: usize = 16;
const REQUEST_SHARE_OF_BUDGET: usize = 2;

/// What a draft session's file name adds to its conversation's id.
const DRAFT_SUFFIX: &str = ".draft";

/// The worker thread's caches, one main cache per conversation.
pub(super) struct Caches {
    shared: Arc<Shared>,
    /// Each conversation's cache, with when it was last used.
    sessions: HashMap<i64, (Session, u64)>,
    tick: u64,
    dir: Option<PathBuf>,
    /// Disk space cache files never take.
    disk_reserve: u64,
    append_pause: Option<std::time::Duration>,
    /// The tokens each conversation's cache file holds, and the passes that
    /// computed them, as written by this process.
    saved: HashMap<i64, (Vec<u32>, Passes)>,
    /// What each conversation's draft-session file holds, as written or
    /// read by this process: the draft model's file, the context length and
    /// the tokens.
    saved_drafts: HashMap<i64, (PathBuf, usize, Vec<u32>)>,
    /// Caches of other versions of each conversation.
    alternates: HashMap<i64, Vec<Session>>,
    /// A conversation whose cache to save once its reply has been reported.
    pending_save: Option<(i64, usize)>,
    /// The key the next request cache gets (request caches have negative
    /// keys, conversations their positive ids).
    next_request_key: i64,
    /// When each request cache was last given back (ms since the epoch).
    request_used_ms: HashMap<i64, u64>,
}

impl Caches {
    pub fn new(shared: Arc<Shared>, config: &WorkerConfig) -> Self {
        Self {
            shared,
            sessions: HashMap::new(),
            tick: 0,
            dir: config.caches_dir.clone(),
            disk_reserve: config.disk_reserve_bytes,
            append_pause: config.test_hooks.append_pause,
            saved: HashMap::new(),
            saved_drafts: HashMap::new(),
            alternates: HashMap::new(),
            pending_save: None,
            next_request_key: -1,
            request_used_ms: HashMap::new(),
        }
    }

    /// The cache to continue `conversation_id` from for `prompt`: the one in
    /// memory, else the saved one, whichever version shares most of the
    /// prompt. The caller runs the turn on it and gives it back with `put`.
    /// `draft`: the draft model the turn drafts with, whose saved session
    /// is restored with the conversation's.
    pub fn take(
        &mut self,
        engine: &Engine,
        conversation_id: i64,
        prompt: &[u32],
        context: usize,
        draft: Option<&Engine>,
    ) -> Option<Session> {
        let mut entry =
            self.sessions.remove(&conversation_id).filter(|(s, _)| s.context_length() == context).map(|(s, _)| s);
        if entry.is_none() {
            entry = self.restore(engine, conversation_id, context);
        }
        if let (Some(session), Some(draft)) = (&mut entry, draft) {
            if session.draft().is_none_or(|(path, _)| path != draft.path()) {
                self.restore_draft(draft, conversation_id, context, session);
            }
        }
        self.pick_branch(conversation_id, &mut entry, prompt, context);
        entry
    }

    /// The cache to run an API request's `prompt` on, and the key to `put`
    /// it back under: the request cache sharing most of the prompt. One the
    /// prompt extends is taken over (that client's next turn); one it only
    /// shares a long beginning with (a system prompt, a conversation another
    /// client branched: `MIN_SHARED_TO_CLONE` tokens or more, since a clone
    /// copies its source's buffers on first write) is cloned copy-on-write,
    /// so that client keeps its own. Request caches live in memory only,
    /// under the same budget as conversations' and evicted with them, least
    /// recently used first.
    pub fn take_request(&mut self, prompt: &[u32], context: usize) -> (i64, Option<Session>) {
        let common = |s: &Session| s.tokens().iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let best = self
            .sessions
            .iter()
            .filter(|(k, (s, _))| **k < 0 && s.context_length() == context)
            .map(|(k, (s, t))| (common(s), *t, *k))
            .max();
        let mut fresh = || {
            let key = self.next_request_key;
            self.next_request_key -= 1;
            key
        };
        match best {
            Some((shared, _, key)) if shared > 0 => {
                let whole = self.sessions.get(&key).is_some_and(|(s, _)| s.tokens().len() == shared);
                // The prompt whole (all but the token a reply must run):
                // the same request again, reused however short. It is
                // cloned like a long shared beginning, so a client whose
                // cache holds more keeps it; repeats leave at most
                // `MAX_REQUEST_CACHES` caches.
                let again = shared + 1 >= prompt.len();
                if !whole && !again && shared < MIN_SHARED_TO_CLONE {
                    return (fresh(), None);
                }
                if whole {
                    let taken = self.sessions.remove(&key).map(|(s, _)| s);
                    self.publish_resident();
                    (key, taken)
                } else {
                    let clone = self.sessions.get(&key).map(|(s, _)| s.clone());
                    (fresh(), clone)
                }
            }
            _ => (fresh(), None),
        }
    }

    /// The cache for `job`'s prompt and the key to `put` it back under: its
    /// conversation's, or a request cache.
    pub fn take_for(
        &mut self,
        engine: &Engine,
        job: &super::ReplyJob,
        prompt: &[u32],
        context: usize,
        draft: Option<&Engine>,
    ) -> (i64, Option<Session>) {
        match job.request {
            Some(_) => self.take_request(prompt, context),
            None => (job.conversation_id, self.take(engine, job.conversation_id, prompt, context, draft)),
        }
    }

    /// Forgets the caches of `job`'s conversation (a request's cache is
    /// in the job's hands, not here).
    pub fn forget_for(&mut self, job: &super::ReplyJob) {
        if job.stored() {
            self.forget(job.conversation_id);
        }
    }

    /// Keeps a conversation's cache after a turn (to be saved by
    /// `save_pending` when `save`), evicting others past the memory budget.
    pub fn put(&mut self, conversation_id: i64, session: Session, context: usize, save: bool) {
        self.tick += 1;
        if save {
            self.pending_save = Some((conversation_id, context));
        }
        self.sessions.insert(conversation_id, (session, self.tick));
        if conversation_id < 0 {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            self.request_used_ms.insert(conversation_id, now.map_or(0, |d| d.as_millis() as u64));
        }
        self.evict();
        self.publish_resident();
    }

    /// Forgets every cache in memory (a new model makes them meaningless).
    pub fn clear_memory(&mut self) {
        self.sessions.clear();
        self.alternates.clear();
        self.saved.clear();
        self.saved_drafts.clear();
        self.pending_save = None;
        self.publish_resident();
    }

    /// Forgets every cache, in memory and on disk.
    pub fn clear_all(&mut self) {
        self.clear_memory();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// Forgets a conversation's caches in memory and on disk.
    pub fn forget(&mut self, conversation_id: i64) {
        self.sessions.remove(&conversation_id);
        self.alternates.remove(&conversation_id);
        self.saved.remove(&conversation_id);
        if self.pending_save.is_some_and(|(c, _)| c == conversation_id) {
            self.pending_save = None;
        }
        self.forget_draft_file(conversation_id);
        if let Some(path) = self.cache_path(conversation_id) {
            let _ = std::fs::remove_file(path);
        }
        self.publish_resident();
    }

    /// Makes `current` the cache (among the conversation's main one and its
    /// alternates) sharing the longest prefix with `prompt`, and keeps a
    /// copy-on-write clone of a cache this turn would truncate.
    fn pick_branch(&mut self, conversation_id: i64, current: &mut Option<Session>, prompt: &[u32], context: usize) {
        let common = |s: &Session| s.tokens().iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let alts = self.alternates.entry(conversation_id).or_default();
        alts.retain(|s| s.context_length() == context);
        let best_current = current.as_ref().map_or(0, &common);
        let best_alt = alts.iter().enumerate().map(|(i, s)| (i, common(s))).max_by_key(|(_, n)| *n);
        if let Some((i, n)) = best_alt {
            if n > best_current {
                let alt = alts.remove(i);
                if let Some(old) = current.replace(alt) {
                    alts.push(old);
                }
            }
        }
        if let Some(cur) = current.as_ref() {
            let n = common(cur);
            // Only a real fork is worth keeping: more than the last token differs.
            if n > 0 && n + 1 < cur.tokens().len() {
                alts.push(cur.clone());
            }
        }
        if alts.len() > KEEP_ALTERNATES {
            alts.drain(..alts.len() - KEEP_ALTERNATES);
        }
    }

    /// Keeps caches of other versions just written (the variants of a
    /// "Generate N" turn) as alternates of the conversation's cache.
    pub fn add_alternates(&mut self, conversation_id: i64, sessions: Vec<Session>) {
        if sessions.is_empty() {
            return;
        }
        let alts = self.alternates.entry(conversation_id).or_default();
        alts.extend(sessions);
        if alts.len() > KEEP_ALTERNATES {
            alts.drain(..alts.len() - KEEP_ALTERNATES);
        }
        self.evict();
        self.publish_resident();
    }

    /// Saves the cache of the turn that just finished (see `put`), and its
    /// draft session where its draft model is open in `drafts`.
    pub fn save_pending(&mut self, engine: &Engine, drafts: &DraftModels) {
        if let Some((conversation, context)) = self.pending_save.take() {
            if let Some((session, tick)) = self.sessions.remove(&conversation) {
                self.save(engine, conversation, &session, context);
                let draft = session.draft().and_then(|(path, kept)| Some((drafts.engine(path)?, kept)));
                match (draft, self.saved.contains_key(&conversation)) {
                    (Some((draft, kept)), true) => self.save_draft(draft, conversation, kept, context),
                    // A draft cache is never kept without the conversation's.
                    (_, false) => self.forget_draft_file(conversation),
                    (None, true) => {}
                }
                self.sessions.insert(conversation, (session, tick));
            }
        }
    }

    /// Tells the handles which conversations' caches are in memory, and
    /// the API clients' caches, most recently used first.
    pub fn publish_resident(&mut self) {
        *crate::locks::lock(&self.shared.resident) = self.sessions.keys().copied().collect();
        self.request_used_ms.retain(|k, _| self.sessions.contains_key(k));
        let mut requests: Vec<(u64, RequestCache)> = self
            .sessions
            .iter()
            .filter(|(k, _)| **k < 0)
            .map(|(k, (s, tick))| {
                let cache = RequestCache {
                    tokens: s.tokens().len() as u32,
                    bytes: s.allocated_bytes() as u64,
                    last_used_ms: self.request_used_ms.get(k).copied().unwrap_or(0),
                };
                (*tick, cache)
            })
            .collect();
        // Most recent first; the tick orders two given back in the same millisecond.
        requests.sort_by_key(|(tick, c)| std::cmp::Reverse((c.last_used_ms, *tick)));
        *crate::locks::lock(&self.shared.request_caches) = requests.into_iter().map(|(_, c)| c).collect();
    }

    fn cache_path(&self, conversation_id: i64) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{conversation_id}.session")))
    }

    /// Where a conversation's draft session is saved: beside its cache, and
    /// under the same disk budget.
    fn draft_path(&self, conversation_id: i64) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{conversation_id}{DRAFT_SUFFIX}.session")))
    }

    /// Keeps the conversation's saved draft session, if it is `draft`'s and
    /// of this context length, with `session`; anything else is deleted (the
    /// draft model then reads the history again, which changes no reply).
    fn restore_draft(&mut self, draft: &Engine, conversation_id: i64, context: usize, session: &mut Session) {
        let Some(path) = self.draft_path(conversation_id).filter(|p| p.exists()) else { return };
        let restored =
            draft.cache_identity(context).and_then(|id| hearth_engine::session_file::read(&path, &id, draft.model()));
        match restored {
            Ok(r) => {
                let saved = (draft.path().to_path_buf(), context, r.session.tokens().to_vec());
                session.set_draft(draft.path(), r.session);
                match r.complete {
                    true => self.saved_drafts.insert(conversation_id, saved),
                    false => self.saved_drafts.remove(&conversation_id),
                };
            }
            Err(e) => {
                tracing::info!("discarding the draft cache of conversation {conversation_id}: {e}");
                let _ = std::fs::remove_file(&path);
                self.saved_drafts.remove(&conversation_id);
            }
        }
    }

    /// Saves a conversation's draft session: appended to its file where the
    /// file holds the start of it (the same draft model and context, and a
    /// pass starting where it ends), else written whole; not at all where
    /// the disk's reserve would be touched.
    fn save_draft(&mut self, draft: &Engine, conversation_id: i64, session: &Session, context: usize) {
        let Some(path) = self.draft_path(conversation_id) else { return };
        let shared = self.shared.clone();
        let _files = crate::locks::lock(&shared.cache_files);
        let tokens = session.tokens();
        let prev = self.saved_drafts.get(&conversation_id).filter(|(model, c, prev)| {
            path.exists()
                && model == draft.path()
                && *c == context
                && tokens.starts_with(prev)
                && (prev.len() == tokens.len() || session.passes().after(prev.len()).is_some())
        });
        let appended = prev.map_or(0, |(_, _, p)| p.len());
        let needed = ((tokens.len() - appended) * session.cache().bytes_per_position()) as u64 + (1 << 20);
        let probe = path.parent().map(Path::to_path_buf).filter(|d| d.exists()).or_else(|| self.dir.clone());
        if probe.and_then(|d| fs4::available_space(&d).ok()).is_some_and(|free| free < needed + self.disk_reserve) {
            return self.forget_draft_file(conversation_id);
        }
        let result = match prev {
            Some(_) if appended == tokens.len() => Ok(()),
            Some(_) => hearth_engine::session_file::append(&path, session, appended),
            None => {
                draft.cache_identity(context).and_then(|id| hearth_engine::session_file::write(&path, &id, session))
            }
        };
        match result {
            Ok(()) => {
                self.saved_drafts.insert(conversation_id, (draft.path().to_path_buf(), context, tokens.to_vec()));
                self.enforce_disk_budget();
            }
            Err(e) => {
                tracing::warn!("cannot save the draft cache of conversation {conversation_id}: {e}");
                self.forget_draft_file(conversation_id);
            }
        }
    }

    /// Deletes a conversation's draft-session file.
    fn forget_draft_file(&mut self, conversation_id: i64) {
        self.saved_drafts.remove(&conversation_id);
        if let Some(path) = self.draft_path(conversation_id) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The conversation's saved cache, if there is one made with this model
    /// and context length; anything else is deleted (the history is then
    /// prefilled again, which gives the same output).
    fn restore(&mut self, engine: &Engine, conversation_id: i64, context: usize) -> Option<Session> {
        let path = self.cache_path(conversation_id)?;
        if !path.exists() {
            return None;
        }
        let restored =
            engine.cache_identity(context).and_then(|id| hearth_engine::session_file::read(&path, &id, engine.model()));
        match restored {
            Ok(r) => {
                if r.complete {
                    self.saved.insert(conversation_id, (r.session.tokens().to_vec(), r.session.passes().clone()));
                } else {
                    // Keep what verified; the next save rewrites the file whole.
                    tracing::warn!(
                        "cache for conversation {conversation_id} was damaged; kept {} verified tokens",
                        r.session.tokens().len()
                    );
                    self.saved.remove(&conversation_id);
                }
                Some(r.session)
            }
            Err(e) => {
                tracing::info!("discarding cache for conversation {conversation_id}: {e}");
                let _ = std::fs::remove_file(&path);
                self.saved.remove(&conversation_id);
                None
            }
        }
    }

    /// Appends what the turn added to the conversation's cache file, or
    /// rewrites it when the conversation branched to an earlier point.
    fn save(&mut self, engine: &Engine, conversation_id: i64, session: &Session, context: usize) {
        let Some(path) = self.cache_path(conversation_id) else { return };
        let shared = self.shared.clone();
        let _files = crate::locks::lock(&shared.cache_files);
        if self.shared.budgets().disk_mb == 0 {
            let _ = std::fs::remove_file(&path);
            self.saved.remove(&conversation_id);
            return;
        }
        let tokens = session.tokens();
        // Never take the disk's last reserve: SQLite needs it for the
        // conversations themselves, which matter more than any cache.
        // The file can be appended to only if memory still holds what it
        // holds: the same tokens, computed by the same passes (a branch back
        // and forth to the same tokens may have computed them otherwise).
        let extends = |(prev, passes): &&(Vec<u32>, Passes)| {
            let mut now = session.passes().clone();
            now.truncate(prev.len());
            tokens.starts_with(prev) && &now == passes && session.passes().after(prev.len()).is_some()
        };
        let appended = self.saved.get(&conversation_id).filter(extends).map_or(0, |(p, _)| p.len());
        // A hybrid's chunks also hold its recurrent state, one per checkpoint.
        let states = session.cache().checkpoint_positions().len() + 1;
        let needed = ((tokens.len() - appended) * session.cache().bytes_per_position()
            + states * session.cache().state_bytes()) as u64
            + (1 << 20);
        let probe = path.parent().map(Path::to_path_buf).filter(|d| d.exists()).or_else(|| self.dir.clone());
        if let Some(free) = probe.and_then(|d| fs4::available_space(&d).ok()) {
            if free < needed + self.disk_reserve {
                tracing::warn!(
                    "not saving the cache of conversation {conversation_id}: {} MB free on disk",
                    free >> 20
                );
                let _ = std::fs::remove_file(&path);
                self.saved.remove(&conversation_id);
                return;
            }
        }
        let result = match self.saved.get(&conversation_id) {
            Some(prev) if appended > 0 && path.exists() => {
                let pause = self.append_pause;
                let mid_write = move || pause.map_or((), std::thread::sleep);
                hearth_engine::session_file::append_observed(&path, session, prev.0.len(), &mid_write)
            }
            _ => {
                if let Some(dir) = path.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                engine.cache_identity(context).and_then(|id| hearth_engine::session_file::write(&path, &id, session))
            }
        };
        match result {
            Ok(()) => {
                self.saved.insert(conversation_id, (tokens.to_vec(), session.passes().clone()));
                self.enforce_disk_budget();
            }
            Err(e) => {
                // A full disk costs only the cache, never the conversation.
                tracing::warn!("cannot save the cache of conversation {conversation_id}: {e}");
                let _ = std::fs::remove_file(&path);
                self.saved.remove(&conversation_id);
            }
        }
    }

    /// Drops least recently used caches from memory until the rest fit the
    /// budget; the most recent one always stays.
    fn evict(&mut self) {
        let budget = self.shared.budgets().memory_mb as usize * (1 << 20);
        // API clients' caches within their count and share, oldest first.
        loop {
            let requests = self.sessions.iter().filter(|(k, _)| **k < 0);
            let (count, bytes) = requests.fold((0, 0), |(n, b), (_, (s, _))| (n + 1, b + s.allocated_bytes()));
            if count <= 1 || (count <= MAX_REQUEST_CACHES && bytes <= budget / REQUEST_SHARE_OF_BUDGET) {
                break;
            }
            let oldest = self.sessions.iter().filter(|(k, _)| **k < 0).min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.sessions.remove(&k);
            }
        }
        let sum = |w: &Caches| -> usize {
            w.sessions.values().map(|(s, _)| s.allocated_bytes()).sum::<usize>()
                + w.alternates.values().flatten().map(|s| s.allocated_bytes()).sum::<usize>()
        };
        // Other versions go first, oldest conversation first.
        while sum(self) > budget {
            let oldest = self
                .alternates
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .min_by_key(|(c, _)| self.sessions.get(c).map_or(0, |(_, t)| *t))
                .map(|(c, _)| *c);
            match oldest.and_then(|c| self.alternates.get_mut(&c)) {
                Some(v) => {
                    v.remove(0);
                }
                None => break,
            }
        }
        loop {
            let used: usize = self.sessions.values().map(|(s, _)| s.allocated_bytes()).sum();
            if used <= budget || self.sessions.len() <= 1 {
                break;
            }
            let oldest = self.sessions.iter().min_by_key(|(_, (_, t))| *t).map(|(c, _)| *c);
            match oldest {
                Some(c) => {
                    self.sessions.remove(&c);
                    self.alternates.remove(&c);
                }
                None => break,
            };
        }
    }

    /// Deletes the least recently written cache files until the rest fit the
    /// disk budget; the file just written goes too if it alone is past it.
    fn enforce_disk_budget(&mut self) {
        let Some(dir) = &self.dir else { return };
        let budget = self.shared.budgets().disk_mb as u64 * (1 << 20);
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        // Cache files only: an import's temporary copy is not a cache yet.
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "session"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        let is_draft = |p: &Path| p.file_stem().and_then(|s| s.to_str()).is_some_and(|s| s.ends_with(DRAFT_SUFFIX));
        // Draft caches go first, oldest first: each only speeds a
        // conversation up, and is never kept without its conversation's.
        files.sort_by_key(|(time, _, path)| (!is_draft(path), *time));
        for (_, len, path) in files {
            if total <= budget {
                break;
            }
            if !path.exists() {
                continue;
            }
            let _ = std::fs::remove_file(&path);
            total -= len;
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if let Some(id) = stem.strip_suffix(DRAFT_SUFFIX).and_then(|s| s.parse::<i64>().ok()) {
                self.saved_drafts.remove(&id);
            } else if let Ok(id) = stem.parse::<i64>() {
                self.saved.remove(&id);
                if let Some(draft) = self.draft_path(id).filter(|d| d.exists()) {
                    total = total.saturating_sub(draft.metadata().map_or(0, |m| m.len()));
                    self.forget_draft_file(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn total_memory_is_read_and_agrees_with_the_kernel_where_it_can_be_checked() {
        let mb = crate::budgets::total_memory_mb().expect("every platform Hearth ships on reports its memory");
        #[cfg(target_os = "linux")]
        {
            let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
            let kb: u64 = meminfo
                .lines()
                .find(|l| l.starts_with("MemTotal:"))
                .unwrap()
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(mb as u64, kb * 1024 / (1024 * 1024));
        }
        assert!(mb >= 64, "{mb} MB");
    }
}
