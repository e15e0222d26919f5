//! A reply as a Response: its output items (`reasoning`, `message`,
//! `function_call`) and the documented stream events, each numbered; a
//! stored one is kept in the `ResponseStore` when it ends.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::response::sse::Event;
use hearth_engine::{ChatMessage, Role, ToolCall};
use hearth_store::{ReplyStats, TokenChoice};
use serde_json::{json, Value};

use super::store::{ResponseStore, Stored};
use super::ResponsesRequest;
use crate::choice::{ChoiceText, Piece};
use crate::response::random_hex;
use crate::run::{named, PromptSize, Shape, Started};
use crate::ApiError;

/// The item being streamed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Item {
    Reasoning,
    Message,
}

/// A reply as a Response: output items, streamed with numbered events.
pub struct ResponseReply {
    id: String,
    created: u64,
    model: String,
    text: ChoiceText,
    echo: Value,
    store: Option<(Arc<Mutex<ResponseStore>>, Vec<ChatMessage>)>,
    /// Items done, and the one open with its id and text.
    output: Vec<Value>,
    open: Option<(Item, String, String)>,
    sequence: u64,
    call_prefix: String,
    namespaces: Vec<(String, String)>,
}

impl ResponseReply {
    pub fn new(request: &ResponsesRequest, started: &Started, store: &Arc<Mutex<ResponseStore>>) -> Self {
        Self {
            id: format!("resp_{}", random_hex()),
            created: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            model: started.model.clone(),
            text: ChoiceText::new(started.reasoning.clone(), started.tools),
            echo: request.echo.clone(),
            store: request.store.then(|| (store.clone(), request.history.clone())),
            output: Vec::new(),
            open: None,
            sequence: 0,
            call_prefix: format!("call_{}_", random_hex()),
            namespaces: request.namespaces.clone(),
        }
    }

    fn event(&mut self, kind: &str, mut body: Value) -> Event {
        body["type"] = kind.into();
        body["sequence_number"] = self.sequence.into();
        self.sequence += 1;
        named(kind, &body)
    }

    /// The response object: `status`, with the output so far and `usage`.
    fn object(&self, status: &str, stats: Option<&ReplyStats>) -> Value {
        let mut o = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": self.output,
            "error": null,
            "incomplete_details": null,
            "usage": null,
        });
        if let Some(fields) = self.echo.as_object() {
            for (k, v) in fields {
                o[k] = v.clone();
            }
        }
        if let Some(s) = stats {
            if status == "incomplete" {
                o["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
            o["usage"] = json!({
                "input_tokens": s.prompt_tokens,
                "input_tokens_details": {"cached_tokens": s.prompt_tokens.saturating_sub(s.processed_tokens)},
                "output_tokens": crate::response::completion_tokens(s),
                "output_tokens_details": {"reasoning_tokens": s.thinking_tokens.unwrap_or(0)},
                "total_tokens": s.prompt_tokens + crate::response::completion_tokens(s),
            });
        }
        o
    }

    fn item_json(&self, item: Item, id: &str, text: &str, status: &str) -> Value {
        match item {
            Item::Reasoning => json!({"type": "reasoning", "id": id, "summary": [], "status": status,
                "content": if status == "in_progress" { json!([]) } else { json!([{"type": "reasoning_text", "text": text}]) }}),
            Item::Message => json!({"type": "message", "id": id, "role": "assistant", "status": status,
                "content": if status == "in_progress" { json!([]) } else { json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]) }}),
        }
    }

    /// Events that put `piece` in the right items.
    fn stream_piece(&mut self, piece: Piece, out: &mut Vec<Event>) {
        for (item, text) in [(Item::Reasoning, piece.reasoning), (Item::Message, piece.content)] {
            if text.is_empty() {
                continue;
            }
            if self.open.as_ref().map(|o| o.0) != Some(item) {
                self.close(out);
                let id = match item {
                    Item::Reasoning => format!("rs_{}", random_hex()),
                    Item::Message => format!("msg_{}", random_hex()),
                };
                let index = self.output.len();
                let added = self.item_json(item, &id, "", "in_progress");
                out.push(self.event("response.output_item.added", json!({"output_index": index, "item": added})));
                let part = match item {
                    Item::Reasoning => json!({"type": "reasoning_text", "text": ""}),
                    Item::Message => json!({"type": "output_text", "text": "", "annotations": []}),
                };
                out.push(self.event(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
                self.open = Some((item, id, String::new()));
            }
            let index = self.output.len();
            let Some((_, id, so_far)) = self.open.as_mut() else { continue };
            so_far.push_str(&text);
            let id = id.clone();
            let kind = match item {
                Item::Reasoning => "response.reasoning_text.delta",
                Item::Message => "response.output_text.delta",
            };
            let mut body = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text});
            if item == Item::Message {
                body["logprobs"] = json!([]);
            }
            out.push(self.event(kind, body));
        }
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        let Some((item, id, text)) = self.open.take() else { return };
        let index = self.output.len();
        match item {
            Item::Reasoning => {
                out.push(self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                ));
                let part = json!({"type": "reasoning_text", "text": text});
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
            }
            Item::Message => {
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
                ));
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
            }
        }
        let done = self.item_json(item, &id, &text, "completed");
        out.push(self.event("response.output_item.done", json!({"output_index": index, "item": done.clone()})));
        self.output.push(done);
    }

    /// The calls as items, streamed (`out`) or not.
    fn calls(&mut self, calls: &[ToolCall], mut out: Option<&mut Vec<Event>>) {
        for call in calls {
            let id = format!("fc_{}", random_hex());
            let index = self.output.len();
            let namespace = self.namespaces.iter().find(|(f, _)| *f == call.name).map(|(_, n)| n.clone());
            let item = |arguments: &str, status: &str| {
                let mut item = json!({"type": "function_call", "id": id, "call_id": call.id, "name": call.name, "arguments": arguments, "status": status});
                if let Some(n) = &namespace {
                    item["namespace"] = n.clone().into();
                }
                item
            };
            if let Some(out) = out.as_deref_mut() {
                out.push(self.event(
                    "response.output_item.added",
                    json!({"output_index": index, "item": item("", "in_progress")}),
                ));
                out.push(self.event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": call.arguments}),
                ));
                out.push(self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": call.name, "arguments": call.arguments}),
                ));
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item(&call.arguments, "completed")}),
                ));
            }
            self.output.push(item(&call.arguments, "completed"));
        }
    }

    /// Ends the output; returns the status, and keeps the response when stored.
    fn end(&mut self, stats: &ReplyStats, mut out: Option<&mut Vec<Event>>) -> &'static str {
        let cut = matches!(stats.finish_reason.as_str(), "max_tokens" | "cache_full");
        let piece = self.text.finish();
        let mut events = Vec::new();
        self.stream_piece(piece, &mut events);
        let calls = self.text.calls(&self.call_prefix);
        match &calls {
            Some((_, calls)) => {
                self.close(&mut events);
                self.calls(calls, out.as_deref_mut().map(|_| &mut events));
            }
            None => {
                let rest = self.text.unsent(cut);
                self.stream_piece(Piece { reasoning: String::new(), content: rest }, &mut events);
                self.close(&mut events);
            }
        }
        if let Some(out) = out {
            out.extend(events);
        }
        let status = match stats.finish_reason.as_str() {
            "max_tokens" | "cache_full" => "incomplete",
            _ => "completed",
        };
        if let Some((store, mut history)) = self.store.take() {
            let (answer, calls) = match calls {
                Some((content, calls)) => (content, Some(calls)),
                None => (self.text.content(cut).to_string(), None),
            };
            let mut reply = ChatMessage::new(Role::Assistant, answer);
            reply.thinking = Some(self.text.reasoning().to_string()).filter(|r| !r.is_empty());
            reply.tool_calls = calls;
            history.push(reply);
            let object = self.object(status, Some(stats));
            let stored = Stored { id: self.id.clone(), at: Instant::now(), object, history };
            store.lock().unwrap_or_else(|e| e.into_inner()).put(stored, Instant::now());
        }
        status
    }
}

impl Shape for ResponseReply {
    fn opening(&mut self, _prompt: Option<PromptSize>) -> Vec<Event> {
        let created = self.object("in_progress", None);
        vec![
            self.event("response.created", json!({"response": created.clone()})),
            self.event("response.in_progress", json!({"response": created})),
        ]
    }

    fn tokens(&mut self, text: String, _variant: usize, _choices: Vec<TokenChoice>) -> Vec<Event> {
        let piece = self.text.push(&text);
        let mut out = Vec::new();
        self.stream_piece(piece, &mut out);
        out
    }

    fn finished(&mut self, stats: &ReplyStats, _others: &[ReplyStats]) -> Vec<Event> {
        let mut out = Vec::new();
        let status = self.end(stats, Some(&mut out));
        let kind = if status == "incomplete" { "response.incomplete" } else { "response.completed" };
        let object = self.object(status, Some(stats));
        out.push(self.event(kind, json!({"response": object})));
        out
    }

    fn whole(&mut self, stats: &ReplyStats, _others: &[ReplyStats]) -> Value {
        let status = self.end(stats, None);
        self.object(status, Some(stats))
    }

    /// An `error` event, then `response.failed` with the response so far,
    /// which ends the stream for clients that wait for a terminal event.
    fn failed(&mut self, error: ApiError) -> Vec<Event> {
        let body = json!({"code": error.code, "message": error.message, "param": error.param});
        let mut object = self.object("failed", None);
        object["error"] = json!({"code": error.code.unwrap_or("server_error"), "message": error.message});
        vec![self.event("error", body), self.event("response.failed", json!({"response": object}))]
    }
}
