//! `Connection`, one running MCP server: started (a child process) or
//! reached (Streamable HTTP), initialized, its tools listed, its calls made.
//!
//! A server is another program, so everything it does is bounded here: its
//! start and every call have a time limit, a result is cut to a size, its
//! stderr is drained into a short tail (shown when it dies), and a child is
//! killed when the connection drops. What it sends is data: text, never
//! markup to render, never a command.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::config::{ServerConfig, Transport};
use crate::error::{McpError, Result};
use crate::result::{CallOutcome, ResultText};

/// One tool a server offers, as Hearth shows and offers it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "ipc", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "ipc", ts(export, export_to = "bindings/", rename = "McpTool"))]
pub struct ToolInfo {
    pub name: String,
    pub description: Option<String>,
    /// The arguments' JSON schema (`inputSchema`).
    #[cfg_attr(feature = "ipc", ts(type = "unknown"))]
    pub input_schema: Value,
    /// Why the model is not offered this tool (its schema is not one a
    /// grammar can be built from), or `None` when it is.
    pub problem: Option<String>,
}

/// Limits on what a server may cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Starting a server and listing its tools.
    pub start: Duration,
    /// One call, from request to result.
    pub call: Duration,
    /// A result's text, in bytes; the rest is cut with a note saying so.
    pub result_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { start: Duration::from_secs(60), call: Duration::from_secs(120), result_bytes: 64 * 1024 }
    }
}

/// The last bytes a server wrote to stderr: enough to say why it died.
const STDERR_TAIL_BYTES: usize = 4096;

/// A running server.
pub struct Connection {
    name: String,
    service: RunningService<RoleClient, ClientConfig>,
    tools: Vec<ToolInfo>,
    stderr: StderrTail,
    limits: Limits,
    /// A call saw the transport close (the service may not know yet).
    gone: std::sync::atomic::AtomicBool,
}

impl Connection {
    /// Starts or reaches `config`'s server, initializes it and lists its
    /// tools, within `limits.start`; `cancel` abandons the attempt.
    pub async fn open(config: &ServerConfig, limits: Limits, cancel: &CancellationToken) -> Result<Self> {
        config.validate()?;
        let name = config.name.clone();
        let stderr = StderrTail::default();
        let info = client_info();
        let started = async {
            match &config.transport {
                Transport::Stdio { command, args, env, cwd } => {
                    let program = resolve_command(&name, command, env)?;
                    let mut cmd = tokio::process::Command::new(program);
                    cmd.args(args).envs(env).kill_on_drop(true);
                    if let Some(dir) = cwd {
                        cmd.current_dir(dir);
                    }
                    let (transport, err) = TokioChildProcess::builder(cmd)
                        .stderr(Stdio::piped())
                        .spawn()
                        .map_err(|e| McpError::Start(format!("server “{name}”: could not start “{command}”: {e}")))?;
                    if let Some(err) = err {
                        stderr.drain(err);
                    }
                    match info.clone().serve(transport).await {
                        Ok(service) => Ok(service),
                        Err(e) => {
                            // A server that exits at once may still be
                            // writing why; read its pipe to the end first.
                            stderr.wait_closed(Duration::from_millis(500)).await;
                            Err(McpError::Start(format!("server “{name}” did not start: {e}{}", stderr.note())))
                        }
                    }
                }
                Transport::Http { url, headers } => {
                    let mut custom = std::collections::HashMap::new();
                    for (k, v) in headers {
                        let key = http::HeaderName::try_from(k.as_str()).map_err(|_| {
                            McpError::Config(format!("server “{name}”: “{k}” is not a valid header name"))
                        })?;
                        let value = http::HeaderValue::try_from(v.as_str())
                            .map_err(|_| McpError::Config(format!("server “{name}”: the header “{k}” is not valid")))?;
                        custom.insert(key, value);
                    }
                    let config =
                        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                            url.trim().to_string(),
                        )
                        .custom_headers(custom);
                    install_tls_provider();
                    let transport = StreamableHttpClientTransport::from_config(config);
                    info.clone()
                        .serve(transport)
                        .await
                        .map_err(|e| McpError::Start(format!("server “{name}” at {url} did not answer: {e}")))
                }
            }
        };
        let service = bounded(&name, "start", limits.start, cancel, started).await??;
        let listed = bounded(&name, "list its tools", limits.start, cancel, service.list_all_tools()).await?;
        let tools = listed
            .map_err(|e| McpError::Server(format!("server “{name}” could not list its tools: {e}")))?
            .into_iter()
            .map(|t| {
                let input_schema = Value::Object((*t.input_schema).clone());
                let problem = hearth_engine::constraint::check_json_schema(&input_schema)
                    .err()
                    .map(|e| format!("its input schema is not a JSON schema Hearth can use: {e}"));
                ToolInfo {
                    name: t.name.to_string(),
                    description: t.description.map(|d| d.to_string()),
                    input_schema,
                    problem,
                }
            })
            .collect();
        Ok(Self { name, service, tools, stderr, limits, gone: Default::default() })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tools the server listed when it started.
    pub fn tools(&self) -> &[ToolInfo] {
        &self.tools
    }

    /// Whether the server has gone (exited, closed its connection).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.gone.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Calls `tool` with `arguments` (a JSON object) within the call's time
    /// limit; `cancel` stops it. A tool's own error (`isError`) is an
    /// outcome, not an `Err`: the model reads it and may try again.
    pub async fn call(&self, tool: &str, arguments: Value, cancel: &CancellationToken) -> Result<CallOutcome> {
        let Value::Object(arguments) = arguments else {
            return Err(McpError::Server(format!("the arguments of “{tool}” are not a JSON object")));
        };
        let started = Instant::now();
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let answer =
            bounded(&self.name, &format!("run “{tool}”"), self.limits.call, cancel, self.service.call_tool(params))
                .await?;
        let result = match answer {
            Ok(r) => r,
            Err(e) if matches!(e, rmcp::service::ServiceError::TransportClosed) || self.service.is_closed() => {
                self.gone.store(true, std::sync::atomic::Ordering::SeqCst);
                // Its last words are still in the pipe; read them first.
                self.stderr.wait_closed(Duration::from_millis(500)).await;
                return Err(McpError::Server(format!(
                    "server “{}” stopped during the call{}",
                    self.name,
                    self.stderr.note()
                )));
            }
            Err(e) => return Err(McpError::Server(format!("server “{}” failed the call: {e}", self.name))),
        };
        let value = serde_json::to_value(&result).unwrap_or(Value::Null);
        let ResultText { text, truncated } = ResultText::from_result(&value, self.limits.result_bytes);
        let is_error = value.get("isError").and_then(Value::as_bool).unwrap_or(false);
        Ok(CallOutcome { text, is_error, truncated, elapsed: started.elapsed() })
    }

    /// Ends the session; a child process is asked to exit, then killed.
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// Hearth as MCP knows it.
/// reqwest is built without a crypto provider of its own (see Cargo.toml) and
/// panics on a client built before one is installed: install ring's, once per
/// process. One installed already (by the binary, or another library) stays.
fn install_tls_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn client_info() -> ClientConfig {
    let mut info = ClientConfig::default();
    info.client_info = Implementation::new("Hearth", env!("CARGO_PKG_VERSION"));
    info
}

/// `fut` within `limit`, or stopped by `cancel`.
async fn bounded<T>(
    name: &str,
    what: &str,
    limit: Duration,
    cancel: &CancellationToken,
    fut: impl std::future::Future<Output = T>,
) -> Result<T> {
    tokio::select! {
        out = fut => Ok(out),
        () = tokio::time::sleep(limit) => Err(McpError::Timeout(format!(
            "server “{name}” did not {what} within {} s", limit.as_secs()
        ))),
        () = cancel.cancelled() => Err(McpError::Cancelled),
    }
}

/// The program `command` names: as given when it holds a path, else found
/// on `PATH` (the server's own `PATH` first), so a missing program is named
/// before anything starts. On Windows `npx` is `npx.cmd`; `which` knows.
fn resolve_command(
    name: &str,
    command: &str,
    env: &std::collections::BTreeMap<String, String>,
) -> Result<std::path::PathBuf> {
    let path = std::path::Path::new(command);
    if path.components().count() > 1 || path.is_absolute() {
        return if path.exists() {
            Ok(path.to_path_buf())
        } else {
            Err(McpError::Start(format!("server “{name}”: the command “{command}” does not exist")))
        };
    }
    let search = env.get("PATH").cloned().or_else(|| std::env::var("PATH").ok()).unwrap_or_default();
    let exts: Vec<String> = if cfg!(windows) {
        std::env::var("PATHEXT")
            .unwrap_or_else(|_| ".EXE;.CMD;.BAT;.COM".into())
            .split(';')
            .map(str::to_ascii_lowercase)
            .collect()
    } else {
        vec![String::new()]
    };
    for dir in std::env::split_paths(&search) {
        for ext in &exts {
            let candidate = dir.join(format!("{command}{ext}"));
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
    }
    Err(McpError::Start(format!(
        "server “{name}”: the command “{command}” was not found (is it installed, and on the PATH?)"
    )))
}

fn is_executable(path: &std::path::Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return false };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// The last bytes a server wrote to stderr. Its pipe is read to the end,
/// so a server that floods stderr never blocks on a full pipe, nor fills
/// memory.
#[derive(Clone, Default)]
struct StderrTail {
    bytes: Arc<Mutex<VecDeque<u8>>>,
    closed: Arc<tokio::sync::Notify>,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl StderrTail {
    fn drain(&self, mut err: tokio::process::ChildStderr) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = this.bytes.lock().unwrap_or_else(|p| p.into_inner());
                t.extend(&buf[..n]);
                let over = t.len().saturating_sub(STDERR_TAIL_BYTES);
                t.drain(..over);
            }
            this.done.store(true, std::sync::atomic::Ordering::SeqCst);
            this.closed.notify_waiters();
        });
    }

    /// Waits up to `limit` for the pipe's end (a dead server's last words).
    async fn wait_closed(&self, limit: Duration) {
        let notified = self.closed.notified();
        if self.done.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let _ = tokio::time::timeout(limit, notified).await;
    }

    /// " (it said: …)" with the last line or two written, if any.
    fn note(&self) -> String {
        let bytes: Vec<u8> = self.bytes.lock().unwrap_or_else(|p| p.into_inner()).iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let last: Vec<String> = lines[lines.len().saturating_sub(2)..]
            .iter()
            .map(|l| {
                if l.chars().count() > 200 {
                    format!("{}…", l.chars().take(200).collect::<String>())
                } else {
                    l.to_string()
                }
            })
            .collect();
        if last.is_empty() {
            return String::new();
        }
        format!(" (it said: {})", last.join(" / "))
    }
}
