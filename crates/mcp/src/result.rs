//! `CallOutcome`, what a tool call gave back, and `ResultText`, a result's
//! content as the text the model reads and the chat shows.
//!
//! MCP content is text, images, audio, embedded resources and resource
//! links. The model reads text, so the others become a line naming them;
//! with no content, the structured result is its JSON. The text is cut on
//! a character boundary at the size limit, with a note the model can read.

use std::time::Duration;

use serde_json::Value;

/// A finished call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// What the model reads back (and the chat shows, as text).
    pub text: String,
    /// The tool reported an error (`isError`).
    pub is_error: bool,
    /// The text was cut at the size limit.
    pub truncated: bool,
    pub elapsed: Duration,
}

/// A result's content as one text.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultText {
    pub text: String,
    pub truncated: bool,
}

impl ResultText {
    /// From a `CallToolResult` as JSON, cut at `limit` bytes.
    pub fn from_result(result: &Value, limit: usize) -> Self {
        let mut parts: Vec<String> = Vec::new();
        for block in result.get("content").and_then(Value::as_array).into_iter().flatten() {
            let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
            let part = match kind {
                "text" => block.get("text").and_then(Value::as_str).unwrap_or("").to_string(),
                "image" | "audio" => {
                    let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("unknown type");
                    let bytes = block.get("data").and_then(Value::as_str).map_or(0, |d| d.len() / 4 * 3);
                    format!("[{kind}: {mime}, about {bytes} bytes, not shown to the model]")
                }
                "resource" => {
                    let r = block.get("resource").cloned().unwrap_or(Value::Null);
                    let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
                    match r.get("text").and_then(Value::as_str) {
                        Some(text) => format!("[resource {uri}]\n{text}"),
                        None => format!("[resource {uri}: binary, not shown to the model]"),
                    }
                }
                "resource_link" => {
                    let uri = block.get("uri").and_then(Value::as_str).unwrap_or("");
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                    format!("[link: {name} {uri}]")
                }
                other => format!("[{other} content, not shown to the model]"),
            };
            parts.push(part);
        }
        if parts.is_empty() {
            if let Some(structured) = result.get("structuredContent") {
                parts.push(structured.to_string());
            }
        }
        cut(parts.join("\n"), limit)
    }
}

/// `text` within `limit` bytes, cut at a character boundary, with a note.
fn cut(text: String, limit: usize) -> ResultText {
    if text.len() <= limit {
        return ResultText { text, truncated: false };
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut t = text[..end].to_string();
    t.push_str(&format!("\n[… cut: the result was {} bytes, the limit is {limit}]", text.len()));
    ResultText { text: t, truncated: true }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_content_kind_becomes_text() {
        let r = json!({"content": [
            {"type": "text", "text": "<b>bold</b>"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"}
        ]});
        let t = ResultText::from_result(&r, 1000);
        assert_eq!(
            t.text,
            "<b>bold</b>\n[image: image/png, about 3 bytes, not shown to the model]\n[resource file:///a.txt]\nhello\n[link: b file:///b]"
        );
        assert!(!t.truncated);
    }

    #[test]
    fn structured_content_alone_is_its_json() {
        let t = ResultText::from_result(&json!({"content": [], "structuredContent": {"a": 1}}), 100);
        assert_eq!(t.text, r#"{"a":1}"#);
    }

    #[test]
    fn long_results_are_cut_on_a_character_boundary() {
        let t = ResultText::from_result(&json!({"content": [{"type": "text", "text": "é".repeat(100)}]}), 11);
        assert!(t.truncated);
        assert!(t.text.starts_with(&"é".repeat(5)));
        assert!(t.text.ends_with("[… cut: the result was 200 bytes, the limit is 11]"));
    }
}
