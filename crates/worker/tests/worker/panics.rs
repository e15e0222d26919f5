//! A panic in the worker fails only what it hit.

use super::*;

#[test]
fn a_panicking_reply_fails_alone_and_the_next_conversation_streams() {
    let (_dir, store, worker) = start();
    let (a, b) = (store.create_conversation().unwrap(), store.create_conversation().unwrap());
    let reply_a = reply_row(&store, a.id, PANIC_TRIGGER);
    let (ja, rxa) = job(a.id, reply_a, vec![ChatMessage::user(PANIC_TRIGGER)], greedy(8));
    worker.enqueue(ja).unwrap();
    let reply_b = reply_row(&store, b.id, "What is 2 + 2?");
    let (jb, rxb) = job(b.id, reply_b, vec![ChatMessage::user("What is 2 + 2?")], greedy(32));
    worker.enqueue(jb).unwrap();

    let events = collect(&rxa);
    match events.last() {
        Some(GenerationEvent::Error { error }) => {
            assert!(error.message.contains("internal error"), "{}", error.message)
        }
        other => panic!("expected an error, got {other:?}"),
    }
    assert_eq!(store.message(reply_a).unwrap().status, MessageStatus::Error);
    let events = collect(&rxb);
    assert_eq!(finished(&events).0, "end_token");
    assert_eq!(streamed(&events), two_plus_two());
    // The conversation that panicked is free again.
    let again = reply_row(&store, a.id, "What is 2 + 2?");
    let (j, rx) = job(a.id, again, vec![ChatMessage::user("What is 2 + 2?")], greedy(32));
    worker.enqueue(j).unwrap();
    assert_eq!(finished(&collect(&rx)).0, "end_token");
}

#[test]
fn a_panic_while_a_reply_ends_still_ends_it_in_the_ui() {
    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let trigger = format!("{PANIC_TRIGGER}:after");
    let reply = reply_row(&store, c.id, &trigger);
    let (j, rx) = job(c.id, reply, vec![ChatMessage::user(trigger.clone())], greedy(4));
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    match events.last() {
        Some(GenerationEvent::Error { error }) => {
            assert!(error.message.contains("internal error"), "{}", error.message)
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // The worker goes on.
    let again = reply_row(&store, c.id, "What is 2 + 2?");
    let (j, rx) = job(c.id, again, vec![ChatMessage::user("What is 2 + 2?")], greedy(32));
    worker.enqueue(j).unwrap();
    assert_eq!(finished(&collect(&rx)).0, "end_token");
}

#[test]
fn a_panic_while_loading_fails_that_model_and_the_next_one_opens() {
    let (dir, _store, worker) = start();
    let bad = dir.path().join(PANIC_TRIGGER);
    std::fs::copy(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)), &bad).unwrap();
    worker.load_model(bad);
    assert!(worker.wait_idle(Duration::from_secs(120)));
    match worker.model_status() {
        ModelStatus::Failed { error, .. } => assert!(error.message.contains("inside Hearth"), "{}", error.message),
        other => panic!("expected failed, got {other:?}"),
    }
    worker.load_model(hearth_engine::paths::default_model_path(|k| std::env::var_os(k)));
    assert!(worker.wait_idle(Duration::from_secs(120)));
    assert!(matches!(worker.model_status(), ModelStatus::Ready { .. }), "{:?}", worker.model_status());
}
