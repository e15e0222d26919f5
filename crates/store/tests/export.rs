use hearth_store::*;

fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hearth.db")).unwrap();
    (dir, store)
}

/// A conversation with a regenerated reply and an edited question: three branches.
fn branched(store: &Store) -> i64 {
    let c = store.create_conversation().unwrap();
    let mut settings = store.conversation_settings(c.id).unwrap();
    settings.temperature = 0.25;
    settings.system_prompt = "Be brief.".into();
    store.set_conversation_settings(c.id, &settings).unwrap();
    let q = store.add_message(c.id, None, Role::User, "What is <b>bold</b>?", MessageStatus::Complete).unwrap();
    let a1 = store.add_message(c.id, Some(q.id), Role::Assistant, "", MessageStatus::Streaming).unwrap();
    let stats = ReplyStats { generated_tokens: 7, seed: Some(42), finish_reason: "stop".into(), ..Default::default() };
    store.update_reply(a1.id, "First answer.", MessageStatus::Complete, Some(&stats)).unwrap();
    let a2 = store
        .add_message(c.id, Some(q.id), Role::Assistant, "Second answer, cut off", MessageStatus::Interrupted)
        .unwrap();
    store.add_message(c.id, Some(a2.id), Role::User, "Go on.", MessageStatus::Complete).unwrap();
    let q2 = store.add_message(c.id, None, Role::User, "An edited first question", MessageStatus::Complete).unwrap();
    store.add_message(c.id, Some(q2.id), Role::Assistant, "Reply to the edit.", MessageStatus::Complete).unwrap();
    // Show the branch through the second answer.
    store.select_version(c.id, a2.id).unwrap();
    c.id
}

fn without_time(mut e: ConversationExport) -> ConversationExport {
    e.exported_at = 0;
    e
}

#[test]
fn a_branched_conversation_round_trips_through_json() {
    let (_d, a) = temp_store();
    let id = branched(&a);
    let first = a.export_conversation(id).unwrap();
    assert_eq!(first.messages.len(), 6);
    assert_eq!(first.messages[first.active_leaf.unwrap()].content, "Go on.");
    let json = serde_json::to_vec_pretty(&first).unwrap();

    let (_d2, b) = temp_store();
    let report = b.import(&Import::parse(&json).unwrap()).unwrap();
    assert_eq!(report.imported.len(), 1);
    let again = b.export_conversation(report.imported[0]).unwrap();
    assert_eq!(without_time(again), without_time(first.clone()));
    // The shown branch is the same one, and its versions are all there.
    let thread = b.thread(report.imported[0]).unwrap();
    assert_eq!(
        thread.iter().map(|t| t.message.content.as_str()).collect::<Vec<_>>(),
        ["What is <b>bold</b>?", "Second answer, cut off", "Go on."]
    );
    assert_eq!(thread[1].version_ids.len(), 2);
    assert_eq!(thread[0].version_ids.len(), 2);
    assert_eq!(b.conversation_settings(report.imported[0]).unwrap().temperature, 0.25);
    // Importing the same file again into the same data merges: nothing doubles.
    let twice = b.import(&Import::parse(&json).unwrap()).unwrap();
    assert_eq!((twice.imported.len(), twice.skipped_duplicates), (0, 1));
    assert_eq!(b.conversations().unwrap().len(), 1);
}

#[test]
fn a_backup_holds_every_conversation_and_merges_without_duplicates() {
    let (_d, a) = temp_store();
    branched(&a);
    let other = a.create_conversation().unwrap();
    a.add_message(other.id, None, Role::User, "Hello", MessageStatus::Complete).unwrap();
    let backup = serde_json::to_vec(&a.backup().unwrap()).unwrap();

    let (_d2, b) = temp_store();
    let own = b.create_conversation().unwrap();
    b.add_message(own.id, None, Role::User, "Already here", MessageStatus::Complete).unwrap();
    assert_eq!(b.import(&Import::parse(&backup).unwrap()).unwrap().imported.len(), 2);
    assert_eq!(b.conversations().unwrap().len(), 3);
    let again = b.import(&Import::parse(&backup).unwrap()).unwrap();
    assert_eq!((again.imported.len(), again.skipped_duplicates), (0, 2));
    assert_eq!(b.conversations().unwrap().len(), 3);
}

#[test]
fn the_shown_branch_exports_as_markdown() {
    let (_d, s) = temp_store();
    let id = branched(&s);
    let md = s.export_markdown(id).unwrap();
    assert_eq!(
        md,
        "# What is <b>bold</b>?\n\n## User\n\nWhat is <b>bold</b>?\n\n## Assistant (interrupted)\n\nSecond answer, cut off\n\n## User\n\nGo on.\n"
    );
}

#[test]
fn a_plain_message_list_imports_as_one_branch() {
    let (_d, s) = temp_store();
    let json = br#"[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello."}]"#;
    let report = s.import(&Import::parse(json).unwrap()).unwrap();
    let id = report.imported[0];
    assert_eq!(s.conversation(id).unwrap().title, "Hi there");
    let thread = s.thread(id).unwrap();
    assert_eq!(thread.iter().map(|t| t.message.role).collect::<Vec<_>>(), [Role::System, Role::User, Role::Assistant]);
}

#[test]
fn bad_imports_are_refused_with_the_reason_and_change_nothing() {
    let (_d, s) = temp_store();
    let id = branched(&s);
    let good = serde_json::to_value(s.export_conversation(id).unwrap()).unwrap();
    let with = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        edit(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "not JSON"),
        (b"42".to_vec(), "neither"),
        (br#"{"format": "something-else", "version": 1}"#.to_vec(), "not a Hearth export"),
        (with(&|v| v["version"] = 2.into()), "newer Hearth"),
        (with(&|v| v["version"] = serde_json::Value::Null), "no valid \"version\""),
        (with(&|v| v["messages"][0]["parent"] = 3.into()), "does not come before it"),
        (with(&|v| v["messages"][2]["parent"] = 2.into()), "does not come before it"),
        (with(&|v| v["activeLeaf"] = 99.into()), "holds 6"),
        (with(&|v| v["settings"]["temperature"] = 50.0.into()), "temperature"),
        (with(&|v| v["messages"][1]["role"] = "tool".into()), "malformed"),
        (with(&|v| v["unexpected"] = true.into()), "malformed"),
        (br#"[{"role": "user"}]"#.to_vec(), "not of {role, content}"),
        (b"[]".to_vec(), "no messages"),
        (vec![b' '; MAX_IMPORT_BYTES + 1], "limited to"),
    ];
    for (bytes, reason) in cases {
        let err =
            Import::parse(&bytes).err().unwrap_or_else(|| panic!("accepted a file that should fail with {reason:?}"));
        assert!(err.to_string().contains(reason), "{err} (wanted {reason:?})");
    }
    assert_eq!(s.conversations().unwrap().len(), 1);
}

/// A reply's tool calls travel with the conversation: exported with their
/// results, imported as they were (a call still pending when exported
/// comes back stopped), shown in Markdown; calls on a user message are
/// refused and nothing is imported.
#[test]
fn tool_calls_round_trip_through_json_and_show_in_markdown() {
    let (_dir, store) = temp_store();
    let c = store.create_conversation().unwrap();
    let q = store.add_message(c.id, None, Role::User, "Time in Paris?", MessageStatus::Complete).unwrap();
    let r = store.add_message(c.id, Some(q.id), Role::Assistant, "", MessageStatus::Complete).unwrap();
    let mut ran =
        ToolCallRecord::pending("call_1_0".into(), "get_current_time".into(), r#"{"timezone":"Europe/Paris"}"#.into());
    ran.server = Some("time".into());
    ran.tool = Some("get_current_time".into());
    ran.status = ToolCallStatus::Ok;
    ran.result = "<script>12:00</script>".into();
    ran.elapsed_ms = Some(31);
    let waiting = ToolCallRecord::pending("call_1_1".into(), "echo".into(), "{}".into());
    store.set_tool_calls(r.id, &[ran.clone(), waiting.clone()]).unwrap();
    store.add_message(c.id, Some(r.id), Role::Assistant, "It is noon.", MessageStatus::Complete).unwrap();

    let export = store.export_conversation(c.id).unwrap();
    assert_eq!(export.messages[1].tool_calls, vec![ran.clone(), waiting.clone()]);
    let json = serde_json::to_string(&export).unwrap();
    assert!(!serde_json::to_value(&export.messages[0]).unwrap().as_object().unwrap().contains_key("toolCalls"));

    let (_dir2, other) = temp_store();
    let report = other.import(&Import::parse(json.as_bytes()).unwrap()).unwrap();
    let thread = other.thread(report.imported[0]).unwrap();
    let stopped = ToolCallRecord { status: ToolCallStatus::Stopped, ..waiting };
    assert_eq!(thread[1].tool_calls, vec![ran, stopped]);
    assert_eq!(thread[2].message.content, "It is noon.");

    let md = store.export_markdown(c.id).unwrap();
    assert!(md.contains("**Tool call** `get_current_time` (ok)"), "{md}");
    assert!(md.contains("<script>12:00</script>"), "{md}");

    let mut bad = export.clone();
    bad.messages[0].tool_calls = bad.messages[1].tool_calls.clone();
    let before = other.conversations().unwrap().len();
    let err = Import::parse(serde_json::to_string(&bad).unwrap().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("holds tool calls but is not a reply"), "{err}");
    assert_eq!(other.conversations().unwrap().len(), before);
}
