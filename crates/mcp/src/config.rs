//! `ServerConfig`, one MCP server as the user added it, and
//! `parse_mcp_servers`, the `mcpServers` JSON that Claude Desktop's
//! `claude_desktop_config.json`, LM Studio's `mcp.json`, Cursor and VS Code
//! write:
//!
//! ```json
//! { "mcpServers": {
//!     "time": { "command": "uvx", "args": ["mcp-server-time"], "env": { "TZ": "UTC" } },
//!     "docs": { "url": "https://example.com/mcp", "headers": { "Authorization": "Bearer …" } } } }
//! ```
//!
//! A configuration is checked whole: one bad server fails the file, naming
//! the server and the field, and nothing of it is added.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{McpError, Result};

/// How Hearth reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(tag = "type", rename_all = "snake_case")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/", rename = "McpTransport"))]
pub enum Transport {
    /// A program Hearth starts, speaking JSON-RPC on its stdin and stdout.
    /// `env` is added to Hearth's own environment (so `PATH` still finds
    /// `npx` and `uvx`).
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "ipc", ts(optional))]
        cwd: Option<String>,
    },
    /// A server already running, reached by Streamable HTTP.
    Http {
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

/// One server: its name (unique; the name tools are shown under) and how
/// to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/", rename = "McpServerConfig"))]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
}

/// Longest server name: it is shown beside every call.
pub const MAX_NAME_CHARS: usize = 64;

impl ServerConfig {
    /// Checks every field, naming the first that is wrong.
    pub fn validate(&self) -> Result<()> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err(McpError::Config("a server needs a name".into()));
        }
        if name != self.name {
            return Err(McpError::Config(format!("the server name “{}” starts or ends with a space", self.name)));
        }
        if name.chars().count() > MAX_NAME_CHARS {
            return Err(McpError::Config(format!(
                "the server name “{name}” is longer than {MAX_NAME_CHARS} characters"
            )));
        }
        if name.chars().any(char::is_control) {
            return Err(McpError::Config(format!(
                "the server name “{}” holds a control character",
                name.escape_debug()
            )));
        }
        match &self.transport {
            Transport::Stdio { command, args, env, cwd } => {
                if command.trim().is_empty() {
                    return Err(McpError::Config(format!("server “{name}”: the command is empty")));
                }
                for (i, a) in args.iter().enumerate() {
                    if a.contains('\0') {
                        return Err(McpError::Config(format!("server “{name}”: argument {} holds a NUL byte", i + 1)));
                    }
                }
                for (k, v) in env {
                    if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                        return Err(McpError::Config(format!(
                            "server “{name}”: “{}” is not a valid environment variable",
                            k.escape_debug()
                        )));
                    }
                }
                if cwd.as_deref().is_some_and(|c| c.trim().is_empty()) {
                    return Err(McpError::Config(format!("server “{name}”: the working folder is empty")));
                }
            }
            Transport::Http { url, headers } => {
                let lower = url.trim().to_ascii_lowercase();
                if !(lower.starts_with("http://") || lower.starts_with("https://")) || lower.len() <= "https://".len() {
                    return Err(McpError::Config(format!(
                        "server “{name}”: the URL “{url}” is not an http:// or https:// address"
                    )));
                }
                for (k, v) in headers {
                    let token = !k.is_empty()
                        && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                    if !token {
                        return Err(McpError::Config(format!(
                            "server “{name}”: “{}” is not a valid header name",
                            k.escape_debug()
                        )));
                    }
                    if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                        return Err(McpError::Config(format!("server “{name}”: the header “{k}” holds a line break")));
                    }
                }
            }
        }
        Ok(())
    }

    /// One line saying what runs: the command with its arguments, or the URL.
    pub fn summary(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => {
                std::iter::once(command.as_str()).chain(args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
            }
            Transport::Http { url, .. } => url.clone(),
        }
    }
}

/// Reads an `mcpServers` file: `{"mcpServers": {NAME: ENTRY, …}}`, or the
/// inner object alone, or VS Code's `{"servers": {…}}`. An entry is
/// `{command, args?, env?, cwd?}` or `{url, headers?}`, with an optional
/// `type` (`stdio`, `http`, `streamable-http`, `streamableHttp`). Keys that
/// only other apps read (`disabled`, `autoApprove`, `alwaysAllow`, …) are
/// ignored; legacy SSE servers are refused by name. Servers come back in
/// the file's order.
pub fn parse_mcp_servers(json: &str) -> Result<Vec<ServerConfig>> {
    let root: Value =
        serde_json::from_str(json).map_err(|e| McpError::Config(format!("the file is not valid JSON: {e}")))?;
    let Value::Object(root) = root else {
        return Err(McpError::Config("the file holds no object of servers".into()));
    };
    let servers = match (root.get("mcpServers"), root.get("servers")) {
        (Some(Value::Object(s)), _) | (None, Some(Value::Object(s))) => s.clone(),
        (Some(_), _) | (None, Some(_)) => {
            return Err(McpError::Config("“mcpServers” is not an object of servers".into()));
        }
        (None, None) => root,
    };
    if servers.is_empty() {
        return Err(McpError::Config("the file names no servers".into()));
    }
    let mut out = Vec::with_capacity(servers.len());
    for (name, entry) in servers {
        let config = server_entry(&name, &entry)?;
        config.validate()?;
        out.push(config);
    }
    Ok(out)
}

fn server_entry(name: &str, entry: &Value) -> Result<ServerConfig> {
    let Value::Object(e) = entry else {
        return Err(McpError::Config(format!("server “{name}” is not an object")));
    };
    let field_str = |key: &str| -> Result<Option<String>> {
        match e.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(McpError::Config(format!("server “{name}”: “{key}” is not a string"))),
        }
    };
    let string_map = |key: &str| -> Result<BTreeMap<String, String>> {
        match e.get(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    // Numbers and booleans in `env` are common in hand-written files.
                    Value::Number(n) => Ok((k.clone(), n.to_string())),
                    Value::Bool(b) => Ok((k.clone(), b.to_string())),
                    _ => Err(McpError::Config(format!("server “{name}”: “{key}.{k}” is not a string"))),
                })
                .collect(),
            Some(_) => Err(McpError::Config(format!("server “{name}”: “{key}” is not an object"))),
        }
    };
    let kind = field_str("type")?.map(|t| t.to_ascii_lowercase());
    let url = field_str("url")?.or(field_str("serverUrl")?);
    let command = field_str("command")?;
    let transport = match (kind.as_deref(), command, url) {
        (Some("sse"), _, _) => {
            return Err(McpError::Config(format!(
                "server “{name}” uses the legacy SSE transport; Hearth speaks stdio and Streamable HTTP"
            )))
        }
        (Some(k), _, _)
            if !matches!(k, "stdio" | "http" | "streamable-http" | "streamablehttp" | "streamable_http") =>
        {
            return Err(McpError::Config(format!("server “{name}”: unknown transport type “{k}”")))
        }
        (_, Some(_), Some(_)) => return Err(McpError::Config(format!("server “{name}” has both a command and a URL"))),
        (Some(k), Some(_), None) if k != "stdio" => {
            return Err(McpError::Config(format!("server “{name}” is of type “{k}” but has no URL")))
        }
        (_, Some(command), None) => {
            let args = match e.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::String(s) => Ok(s.clone()),
                        Value::Number(n) => Ok(n.to_string()),
                        _ => Err(McpError::Config(format!("server “{name}”: argument {} is not a string", i + 1))),
                    })
                    .collect::<Result<_>>()?,
                Some(_) => return Err(McpError::Config(format!("server “{name}”: “args” is not a list"))),
            };
            Transport::Stdio { command, args, env: string_map("env")?, cwd: field_str("cwd")? }
        }
        (Some("stdio"), None, Some(_)) => {
            return Err(McpError::Config(format!("server “{name}” is of type “stdio” but has no command")))
        }
        (_, None, Some(url)) => Transport::Http { url, headers: string_map("headers")? },
        (_, None, None) => return Err(McpError::Config(format!("server “{name}” has neither a command nor a URL"))),
    };
    Ok(ServerConfig { name: name.to_string(), transport })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_desktop_file_reads_in_order() {
        let servers = parse_mcp_servers(
            r#"{"mcpServers": {
                "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=UTC"]},
                "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"DEBUG": 1}, "disabled": false},
                "remote": {"type": "streamable-http", "url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer x"}}
            }}"#,
        )
        .unwrap();
        let names: Vec<_> = servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["time", "everything", "remote"]);
        assert_eq!(servers[0].summary(), "uvx mcp-server-time --local-timezone=UTC");
        assert!(matches!(&servers[1].transport, Transport::Stdio { env, .. } if env["DEBUG"] == "1"));
        assert!(
            matches!(&servers[2].transport, Transport::Http { headers, .. } if headers["Authorization"] == "Bearer x")
        );
    }

    #[test]
    fn bare_and_vscode_shapes_read_too() {
        assert_eq!(parse_mcp_servers(r#"{"a": {"command": "x"}}"#).unwrap()[0].name, "a");
        assert_eq!(parse_mcp_servers(r#"{"servers": {"b": {"url": "https://h/mcp"}}}"#).unwrap()[0].name, "b");
    }

    #[test]
    fn bad_files_name_what_is_wrong() {
        let err = |json: &str| parse_mcp_servers(json).unwrap_err().to_string();
        assert!(err("{not json").contains("not valid JSON"));
        assert!(err("[]").contains("no object"));
        assert!(err(r#"{"mcpServers": {}}"#).contains("names no servers"));
        assert!(err(r#"{"mcpServers": []}"#).contains("not an object of servers"));
        assert!(err(r#"{"mcpServers": {"a": {"command": "x"}, "b": {}}}"#).contains("“b” has neither"));
        assert!(err(r#"{"mcpServers": {"a": {"command": "x", "args": "y"}}}"#).contains("“args” is not a list"));
        assert!(err(r#"{"mcpServers": {"a": {"command": "x", "args": [{}]}}}"#).contains("argument 1"));
        assert!(err(r#"{"mcpServers": {"a": {"url": "ftp://x"}}}"#).contains("not an http"));
        assert!(err(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x/sse"}}}"#).contains("legacy SSE"));
        assert!(err(r#"{"mcpServers": {"a": {"command": "x", "url": "http://x"}}}"#).contains("both"));
        assert!(err(r#"{"mcpServers": {"a": {"command": "  "}}}"#).contains("command is empty"));
        assert!(err(r#"{"mcpServers": {"a": {"command": "x", "env": {"A=B": "1"}}}}"#).contains("environment variable"));
        assert!(err(r#"{"mcpServers": {"a": {"url": "http://host/mcp", "headers": {"X": "a\nb"}}}}"#)
            .contains("line break"));
        assert!(err(r#"{"mcpServers": {" a": {"command": "x"}}}"#).contains("space"));
    }
}
