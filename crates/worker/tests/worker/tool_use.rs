//! A reply that calls a tool, and the reply that reads its result.

use super::*;

/// A chat reply offered tools and required to call one (the chat's tool use
/// "always"): its call is taken out of its text and recorded, pending; the
/// `finished` event carries it. With the result recorded, the next prompt
/// holds the call and its result as the template renders them, and the
/// reply reading them continues the cache.
#[test]
fn a_reply_that_calls_a_tool_records_the_call_and_the_next_reply_reads_its_result() {
    use hearth_engine::{ToolChoice, ToolSpec, Tools};
    use hearth_store::{ToolCallRecord, ToolCallStatus};

    let (_dir, store, worker) = start();
    let c = store.create_conversation().unwrap();
    let question = "What time is it in Paris?";
    let reply = reply_row(&store, c.id, question);
    let spec = ToolSpec {
        name: "get_current_time".into(),
        description: Some("The current time in a timezone.".into()),
        parameters: serde_json::json!({"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}),
    };
    let tools = Tools { specs: vec![spec], choice: ToolChoice::Required, parallel: false };
    let (messages, _) = hearth_worker::history::prompt_messages(&store, c.id, Some(reply)).unwrap();
    let (mut j, rx) = job(c.id, reply, messages, greedy(96));
    j.tools = tools.clone();
    worker.enqueue(j).unwrap();
    let events = collect(&rx);
    let Some(GenerationEvent::Finished { reason, tool_calls, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(reason, "tool_calls");
    assert_eq!(tool_calls.len(), 1, "{tool_calls:?}");
    let call = &tool_calls[0];
    assert_eq!((call.name.as_str(), call.status), ("get_current_time", ToolCallStatus::Pending));
    assert_eq!(call.call_id, format!("call_{reply}_0"));
    let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert!(args["timezone"].is_string(), "{args}");
    assert_eq!(store.tool_calls(reply).unwrap(), tool_calls.clone());
    let shown = store.thread(c.id).unwrap();
    assert_eq!(shown.last().unwrap().tool_calls, tool_calls.clone());
    assert!(!shown.last().unwrap().message.content.contains("get_current_time"), "the call is not left in the text");

    // The app ran it.
    let done = ToolCallRecord {
        server: Some("time".into()),
        tool: Some("get_current_time".into()),
        status: ToolCallStatus::Ok,
        result: "<b>It is 12:00 in Paris.</b>".into(),
        elapsed_ms: Some(12),
        ..call.clone()
    };
    store.update_tool_call(reply, 0, &done).unwrap();
    let next = store.add_message(c.id, Some(reply), Role::Assistant, "", MessageStatus::Streaming).unwrap().id;
    let (messages, _) = hearth_worker::history::prompt_messages(&store, c.id, Some(reply)).unwrap();
    let roles: Vec<_> = messages.iter().map(|m| m.role).collect();
    use hearth_engine::Role as R;
    assert_eq!(roles, [R::User, R::Assistant, R::Tool]);
    assert_eq!(messages[1].tool_calls.as_ref().unwrap()[0].id, call.call_id);
    assert_eq!(messages[2].tool_call_id.as_deref(), Some(call.call_id.as_str()));
    assert_eq!(messages[2].content, done.result);

    let (mut j, rx) = job(c.id, next, messages, greedy(24));
    j.tools = Tools { choice: ToolChoice::Auto, ..tools };
    worker.enqueue(j).unwrap();
    let (_, stats) = finished(&collect(&rx));
    assert!(
        stats.processed_tokens < stats.prompt_tokens / 2,
        "the reply after the call reads its result, not the conversation again: {} of {}",
        stats.processed_tokens,
        stats.prompt_tokens
    );
}
