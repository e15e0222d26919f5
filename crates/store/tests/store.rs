use hearth_store::*;

fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("sub/hearth.db")).unwrap();
    (dir, store)
}

#[test]
fn a_new_database_is_in_wal_mode_at_the_latest_schema() {
    let (_dir, store) = temp_store();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let conn = rusqlite_journal_mode(store.path());
    assert_eq!(conn, "wal");
}

fn rusqlite_journal_mode(path: &std::path::Path) -> String {
    // Read the header as SQLite writes it: bytes 18 and 19 are 2 in WAL mode.
    let bytes = std::fs::read(path).unwrap();
    if bytes[18] == 2 && bytes[19] == 2 {
        "wal".into()
    } else {
        format!("{}/{}", bytes[18], bytes[19])
    }
}

#[test]
fn migrating_from_each_older_version_keeps_data() {
    for from in 0..SCHEMA_VERSION {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hearth.db");
        let old = Store::open_at_version(&path, from).unwrap();
        assert_eq!(old.schema_version().unwrap(), from);
        drop(old);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let c = store.create_conversation().unwrap();
        store.add_message(c.id, None, Role::User, "hi", MessageStatus::Complete).unwrap();
        drop(store);
        // Opening an up-to-date database again changes nothing.
        let store = Store::open(&path).unwrap();
        assert_eq!(store.thread(c.id).unwrap().len(), 1);
    }
}

#[test]
fn a_database_from_a_newer_app_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hearth.db");
    drop(Store::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 5).unwrap();
    }
    match Store::open(&path) {
        Err(StoreError::TooNew { found, .. }) => assert_eq!(found, SCHEMA_VERSION + 5),
        other => panic!("expected TooNew, got {:?}", other.err()),
    }
}

#[test]
fn a_file_that_is_not_a_database_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hearth.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = Store::open(&path).err().expect("garbage must not open");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), vec![0x5a; 8192], "the file is left as it was");
}

#[test]
fn first_user_message_names_the_conversation() {
    let (_dir, store) = temp_store();
    let c = store.create_conversation().unwrap();
    assert_eq!(store.conversation(c.id).unwrap().title, "");
    let u = store
        .add_message(c.id, None, Role::User, "Explain borrow checking\nin detail", MessageStatus::Complete)
        .unwrap();
    store.add_message(c.id, Some(u.id), Role::User, "Another question", MessageStatus::Complete).unwrap();
    assert_eq!(store.conversation(c.id).unwrap().title, "Explain borrow checking");
    store.rename_conversation(c.id, "  Borrowing ").unwrap();
    assert_eq!(store.conversation(c.id).unwrap().title, "Borrowing");
    assert!(store.rename_conversation(c.id, "   ").is_err());
}

#[test]
fn edits_become_branches_and_versions_switch() {
    let (_dir, store) = temp_store();
    let c = store.create_conversation().unwrap();
    let u1 = store.add_message(c.id, None, Role::User, "first", MessageStatus::Complete).unwrap();
    let a1 = store.add_message(c.id, Some(u1.id), Role::Assistant, "reply 1", MessageStatus::Complete).unwrap();
    // Regenerate: a sibling of a1.
    let a2 = store.add_message(c.id, Some(u1.id), Role::Assistant, "reply 2", MessageStatus::Complete).unwrap();
    let thread = store.thread(c.id).unwrap();
    assert_eq!(thread.iter().map(|t| t.message.id).collect::<Vec<_>>(), [u1.id, a2.id]);
    assert_eq!(thread[1].version_ids, [a1.id, a2.id]);
    // Edit the first message: a new root.
    let u2 = store.add_message(c.id, None, Role::User, "first, edited", MessageStatus::Complete).unwrap();
    let a3 = store.add_message(c.id, Some(u2.id), Role::Assistant, "reply 3", MessageStatus::Complete).unwrap();
    let thread = store.thread(c.id).unwrap();
    assert_eq!(thread[0].version_ids, [u1.id, u2.id]);
    assert_eq!(thread[1].message.id, a3.id);
    // Back to version 1 of the first message: its newest reply is shown.
    store.select_version(c.id, u1.id).unwrap();
    let thread = store.thread(c.id).unwrap();
    assert_eq!(thread.iter().map(|t| t.message.id).collect::<Vec<_>>(), [u1.id, a2.id]);
    store.select_version(c.id, a1.id).unwrap();
    assert_eq!(store.thread(c.id).unwrap()[1].message.content, "reply 1");
    assert_eq!(store.path_to(a3.id).unwrap().iter().map(|m| m.id).collect::<Vec<_>>(), [u2.id, a3.id]);
}

#[test]
fn a_parent_from_another_conversation_is_refused() {
    let (_dir, store) = temp_store();
    let c1 = store.create_conversation().unwrap();
    let c2 = store.create_conversation().unwrap();
    let m = store.add_message(c1.id, None, Role::User, "x", MessageStatus::Complete).unwrap();
    assert!(store.add_message(c2.id, Some(m.id), Role::Assistant, "y", MessageStatus::Complete).is_err());
    assert!(store.select_version(c2.id, m.id).is_err());
}

#[test]
fn a_reply_streaming_when_the_app_died_reopens_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hearth.db");
    let store = Store::open(&path).unwrap();
    let c = store.create_conversation().unwrap();
    let u = store.add_message(c.id, None, Role::User, "tell me a story", MessageStatus::Complete).unwrap();
    let a = store.add_message(c.id, Some(u.id), Role::Assistant, "", MessageStatus::Streaming).unwrap();
    store.update_reply(a.id, "Once upon", MessageStatus::Streaming, None).unwrap();
    // No clean shutdown: the process simply goes away.
    std::mem::forget(store);
    let store = Store::open(&path).unwrap();
    let reply = store.message(a.id).unwrap();
    assert_eq!(reply.content, "Once upon");
    assert_eq!(reply.status, MessageStatus::Interrupted);
    assert_eq!(reply.stats.unwrap().finish_reason, "interrupted");
    assert_eq!(store.message(u.id).unwrap().status, MessageStatus::Complete);
}

#[test]
fn delete_can_be_undone_until_purged() {
    let (_dir, store) = temp_store();
    let c = store.create_conversation().unwrap();
    store.add_message(c.id, None, Role::User, "keep me", MessageStatus::Complete).unwrap();
    store.delete_conversation(c.id).unwrap();
    assert!(store.conversations().unwrap().is_empty());
    assert!(store.search("keep").unwrap().is_empty());
    store.restore_conversation(c.id).unwrap();
    assert_eq!(store.conversations().unwrap().len(), 1);
    store.delete_conversation(c.id).unwrap();
    assert_eq!(store.purge_deleted(i64::MAX).unwrap(), 1);
    assert!(store.restore_conversation(c.id).is_err());
    assert!(store.message(1).is_err(), "messages go with their conversation");
}

#[test]
fn search_finds_titles_and_text() {
    let (_dir, store) = temp_store();
    let a = store.create_conversation().unwrap();
    store.add_message(a.id, None, Role::User, "Rust lifetimes", MessageStatus::Complete).unwrap();
    let b = store.create_conversation().unwrap();
    let u = store.add_message(b.id, None, Role::User, "Cooking", MessageStatus::Complete).unwrap();
    store
        .add_message(b.id, Some(u.id), Role::Assistant, "Add 100% of the salt_and pepper", MessageStatus::Complete)
        .unwrap();
    let hits = store.search("LIFETIMES").unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].conversation.id, a.id);
    assert_eq!(hits[0].snippet, None);
    let hits = store.search("100% of the salt_").unwrap();
    assert_eq!(hits.len(), 1);
    assert!(hits[0].snippet.as_deref().unwrap().contains("salt_and"));
    // Wildcards in the query are literal.
    assert!(store.search("%").unwrap().iter().all(|h| h.conversation.id == b.id));
    assert!(store.search("salt%pepper").unwrap().is_empty());
}

#[test]
fn settings_presets_and_defaults_round_trip() {
    let (_dir, store) = temp_store();
    let mut defaults = ConversationSettings { temperature: 0.2, seed: Some(7), ..Default::default() };
    store.set_default_settings(&defaults).unwrap();
    let c = store.create_conversation().unwrap();
    assert_eq!(store.conversation_settings(c.id).unwrap(), defaults);
    defaults.stop_strings = vec!["END".into()];
    store.set_conversation_settings(c.id, &defaults).unwrap();
    assert_eq!(store.conversation_settings(c.id).unwrap().stop_strings, ["END"]);
    store.save_preset(&Preset { name: "Precise".into(), settings: defaults.clone() }).unwrap();
    store.save_preset(&Preset { name: "creative".into(), settings: ConversationSettings::default() }).unwrap();
    assert_eq!(store.presets().unwrap().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["creative", "Precise"]);
    store.delete_preset("creative").unwrap();
    assert_eq!(store.presets().unwrap().len(), 1);
    assert!(store.save_preset(&Preset { name: " ".into(), settings: defaults }).is_err());
}

#[test]
fn recent_models_most_recent_first() {
    let (_dir, store) = temp_store();
    store.record_model("/m/a.gguf", "a", 10).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    store.record_model("/m/b.gguf", "b", 20).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    store.record_model("/m/a.gguf", "a", 10).unwrap();
    let recent = store.recent_models(10).unwrap();
    assert_eq!(recent.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn another_connection_leaves_streaming_replies_alone() {
    let (_dir, store) = temp_store();
    let c = store.create_conversation().unwrap();
    let user = store.add_message(c.id, None, Role::User, "hi", MessageStatus::Complete).unwrap();
    let reply = store.add_message(c.id, Some(user.id), Role::Assistant, "", MessageStatus::Streaming).unwrap();
    let other = store.reopen().unwrap();
    assert_eq!(other.message(reply.id).unwrap().status, MessageStatus::Streaming);
}

#[test]
fn a_model_hash_applies_only_to_the_file_as_it_was() {
    let (_dir, store) = temp_store();
    assert_eq!(store.model_sha256("/m.gguf", 10, 20).unwrap(), None);
    store.set_model_sha256("/m.gguf", 10, 20, "abc").unwrap();
    assert_eq!(store.model_sha256("/m.gguf", 10, 20).unwrap().as_deref(), Some("abc"));
    assert_eq!(store.model_sha256("/m.gguf", 11, 20).unwrap(), None, "another size");
    assert_eq!(store.model_sha256("/m.gguf", 10, 21).unwrap(), None, "another time");
    store.set_model_sha256("/m.gguf", 11, 20, "def").unwrap();
    assert_eq!(store.model_sha256("/m.gguf", 11, 20).unwrap().as_deref(), Some("def"));
    assert_eq!(store.model_sha256("/m.gguf", 10, 20).unwrap(), None, "replaced");
}

#[test]
fn two_connections_see_each_others_writes() {
    let (_dir, store) = temp_store();
    let other = store.reopen().unwrap();
    let c = store.create_conversation().unwrap();
    let m = other.add_message(c.id, None, Role::User, "from the worker", MessageStatus::Complete).unwrap();
    assert_eq!(store.message(m.id).unwrap().content, "from the worker");
}

#[test]
fn a_conversation_remembers_its_model() {
    let (_dir, store) = temp_store();
    let c = store.create_conversation().unwrap();
    assert_eq!(c.model_path, None);
    assert_eq!(store.conversation_model(c.id).unwrap(), None);
    store.add_message(c.id, None, Role::User, "hello there", MessageStatus::Complete).unwrap();
    let before = store.conversation(c.id).unwrap().updated_at;
    store.set_conversation_model(c.id, "/models/a.gguf").unwrap();
    assert_eq!(store.conversation_model(c.id).unwrap().as_deref(), Some("/models/a.gguf"));
    let after = store.conversation(c.id).unwrap();
    assert_eq!(after.model_path.as_deref(), Some("/models/a.gguf"));
    assert_eq!(after.updated_at, before, "remembering the model is not activity");
    assert_eq!(store.conversations().unwrap()[0].model_path.as_deref(), Some("/models/a.gguf"));
    assert_eq!(store.search("hello").unwrap()[0].conversation.model_path.as_deref(), Some("/models/a.gguf"));
    store.set_conversation_model(c.id, "/models/b.gguf").unwrap();
    assert_eq!(store.conversation_model(c.id).unwrap().as_deref(), Some("/models/b.gguf"));
    assert!(matches!(store.set_conversation_model(c.id + 100, "/x.gguf"), Err(StoreError::NotFound { .. })));
    assert!(matches!(store.conversation_model(c.id + 100), Err(StoreError::NotFound { .. })));
}

/// A model added from another app's folder keeps its app's name and source
/// when it is later opened (the worker records the file's own name).
#[test]
fn a_found_model_keeps_its_name_and_source_when_opened() {
    let (_dir, store) = temp_store();
    store.add_model("/o/blobs/sha256-ab", "qwen3:8b", 10, "Ollama").unwrap();
    store.record_model("/o/blobs/sha256-ab", "sha256-ab", 10).unwrap();
    store.record_model("/m/picked.gguf", "picked", 20).unwrap();
    let models = store.recent_models(10).unwrap();
    let found = models.iter().find(|m| m.path == "/o/blobs/sha256-ab").unwrap();
    assert_eq!((found.name.as_str(), found.source.as_deref()), ("qwen3:8b", Some("Ollama")));
    let picked = models.iter().find(|m| m.path == "/m/picked.gguf").unwrap();
    assert_eq!((picked.name.as_str(), picked.source.as_deref()), ("picked", None));
}
