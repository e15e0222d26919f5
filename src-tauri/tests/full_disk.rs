//! A disk that really is full: the data folder on a small tmpfs, filled to
//! the last byte. The reply being written fails in words, and nothing
//! written before it is lost; with room again, the next reply works.
//! Mounting needs root: elsewhere the test says it was skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use hearth_app::error::ErrorKind;
use hearth_app::events::{GenerationEvent, ModelStatus};
use hearth_app::worker::{ReplyJob, Worker, WorkerConfig};
use hearth_engine::ChatMessage;
use hearth_store::{ConversationSettings, MessageStatus, Role, Store};

struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_tmpfs(at: &Path, size: &str) -> Option<Mounted> {
    std::fs::create_dir_all(at).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| Mounted(at.to_path_buf()))
}

/// Sends one turn; the last event (finished or error) and the reply's id.
fn turn(store: &Store, worker: &Worker, conversation: i64, text: &str) -> (GenerationEvent, i64) {
    let parent = store.thread(conversation).unwrap().last().map(|t| t.message.id);
    let u = store.add_message(conversation, parent, Role::User, text, MessageStatus::Complete).unwrap();
    let r = store.add_message(conversation, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap().id;
    let (tx, rx) = mpsc::channel();
    let settings = ConversationSettings { temperature: 0.0, max_new_tokens: 64, ..Default::default() };
    let events = Box::new(move |e| {
        let _ = tx.send(e);
    });
    worker.enqueue(ReplyJob::new(conversation, r, vec![ChatMessage::user(text)], settings, events)).unwrap();
    loop {
        let e = rx.recv_timeout(Duration::from_secs(120)).unwrap();
        if matches!(e, GenerationEvent::Finished { .. } | GenerationEvent::Error { .. }) {
            break (e, r);
        }
    }
}

/// Writes zeros until the disk refuses more.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

#[test]
fn a_full_disk_fails_the_reply_in_words_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mounted) = mount_tmpfs(&dir.path().join("small"), "16m") else {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs root); the full-disk case is not tested");
        return;
    };
    let data = mounted.0.clone();
    let store = Store::open(data.join("hearth.db")).unwrap();
    let worker =
        Worker::start(store.reopen().unwrap(), WorkerConfig::saving_caches_in(data.join("caches")), Box::new(|_| {}));
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    assert!(worker.wait_idle(Duration::from_secs(120)));
    assert!(matches!(worker.model_status(), ModelStatus::Ready { .. }));
    let c = store.create_conversation().unwrap();
    let (first, first_id) = turn(&store, &worker, c.id, "Write a long story about a dragon.");
    assert!(matches!(first, GenerationEvent::Finished { .. }), "{first:?}");
    let before = store.message(first_id).unwrap();

    let filler = data.join("filler");
    fill(&filler);
    let (failed, _) = {
        // Adding the turn's rows may itself fail now: make them first, then fill the last bytes.
        std::fs::remove_file(&filler).unwrap();
        let parent = store.thread(c.id).unwrap().last().unwrap().message.id;
        let u = store.add_message(c.id, Some(parent), Role::User, "And then?", MessageStatus::Complete).unwrap();
        let r = store.add_message(c.id, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap().id;
        fill(&filler);
        let (tx, rx) = mpsc::channel();
        let settings = ConversationSettings { temperature: 0.0, max_new_tokens: 400, ..Default::default() };
        let events = Box::new(move |e| {
            let _ = tx.send(e);
        });
        let history = vec![
            ChatMessage::user("Write a long story about a dragon."),
            ChatMessage::assistant(before.content.clone()),
            ChatMessage::user("And then?"),
        ];
        worker.enqueue(ReplyJob::new(c.id, r, history, settings, events)).unwrap();
        let last = loop {
            let e = rx.recv_timeout(Duration::from_secs(120)).unwrap();
            if matches!(e, GenerationEvent::Finished { .. } | GenerationEvent::Error { .. }) {
                break e;
            }
        };
        (last, r)
    };
    match &failed {
        GenerationEvent::Error { error } => {
            assert_eq!(error.kind, ErrorKind::DiskFull, "{error:?}");
            assert!(error.message.contains("full"), "says the disk is full: {}", error.message);
        }
        other => panic!("a reply on a full disk must fail in words, got {other:?}"),
    }

    // Room again: nothing written before is lost, and the next reply works.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(store.message(first_id).unwrap().content, before.content);
    let (next, _) = turn(&store, &worker, c.id, "What is 2 + 2?");
    assert!(matches!(next, GenerationEvent::Finished { .. }), "{next:?}");
    drop(worker);
    drop(store);
    let reopened = Store::open(data.join("hearth.db")).unwrap();
    assert_eq!(reopened.message(first_id).unwrap().content, before.content);
    assert!(reopened.thread(c.id).unwrap().len() >= 6);
}
