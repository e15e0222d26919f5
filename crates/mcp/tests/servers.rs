//! Real MCP servers from the package registries (`mcp-server-time` from
//! PyPI, `@modelcontextprotocol/server-everything` from npm, installed by
//! `scripts/setup-mcp-servers.sh`) and a scripted one that misbehaves on
//! request (`tests/data/scripted_server.py`): each failure costs only its
//! own call.
//!
//! Without the installed servers these tests skip, unless
//! `HEARTH_REQUIRE_MCP=1` (as `./hearth test` sets) makes that a failure.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hearth_mcp::{Connection, Limits, McpError, ServerConfig, Servers, Transport};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn installed() -> Option<PathBuf> {
    let dir = std::env::var_os("HEARTH_MCP_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
        cache.join("hearth").join("mcp")
    });
    if dir.join("venv/bin/mcp-server-time").exists() && dir.join("npm/node_modules/.bin/mcp-server-everything").exists()
    {
        return Some(dir);
    }
    assert!(
        std::env::var("HEARTH_REQUIRE_MCP").as_deref() != Ok("1"),
        "the MCP servers are not installed in {}: run scripts/setup-mcp-servers.sh",
        dir.display()
    );
    eprintln!("skipped: the MCP servers are not installed (scripts/setup-mcp-servers.sh)");
    None
}

fn stdio(name: &str, command: impl Into<String>, args: &[&str]) -> ServerConfig {
    ServerConfig {
        name: name.into(),
        transport: Transport::Stdio {
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::new(),
            cwd: None,
        },
    }
}

fn scripted(extra: &[&str]) -> ServerConfig {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/scripted_server.py");
    let mut args = vec![script];
    args.extend_from_slice(extra);
    stdio("scripted", "python3", &args)
}

fn short() -> Limits {
    Limits { start: Duration::from_secs(20), call: Duration::from_secs(3), result_bytes: 4096 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_time_from_pypi_lists_and_answers() {
    let Some(dir) = installed() else { return };
    let config = stdio("time", dir.join("venv/bin/mcp-server-time").to_string_lossy(), &["--local-timezone=UTC"]);
    let cancel = CancellationToken::new();
    let conn = Connection::open(&config, Limits::default(), &cancel).await.unwrap();
    let names: Vec<_> = conn.tools().iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"get_current_time") && names.contains(&"convert_time"), "{names:?}");
    assert!(conn.tools().iter().all(|t| t.problem.is_none()), "{:?}", conn.tools());
    let out = conn.call("get_current_time", json!({"timezone": "Europe/Paris"}), &cancel).await.unwrap();
    assert!(!out.is_error, "{out:?}");
    assert!(out.text.contains("Europe/Paris") && out.text.contains("datetime"), "{}", out.text);
    // A tool's own error is an outcome the model reads, not a failed call.
    let bad = conn.call("get_current_time", json!({"timezone": "Not/AZone"}), &cancel).await.unwrap();
    assert!(bad.is_error, "{bad:?}");
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_from_npm_over_stdio_and_streamable_http() {
    let Some(dir) = installed() else { return };
    let bin = dir.join("npm/node_modules/.bin/mcp-server-everything");
    let cancel = CancellationToken::new();
    let conn =
        Connection::open(&stdio("everything", bin.to_string_lossy(), &[]), Limits::default(), &cancel).await.unwrap();
    assert!(conn.tools().iter().any(|t| t.name == "echo"), "{:?}", conn.tools());
    let out = conn.call("echo", json!({"message": "hello from Hearth"}), &cancel).await.unwrap();
    assert_eq!(out.text, "Echo: hello from Hearth");
    let sum = conn.call("get-sum", json!({"a": 2, "b": 40}), &cancel).await.unwrap();
    assert!(sum.text.contains("42"), "{}", sum.text);
    conn.close().await;

    // The same server as Streamable HTTP, on a free port.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = tokio::process::Command::new(&bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = ServerConfig {
        name: "everything-http".into(),
        transport: Transport::Http { url: format!("http://127.0.0.1:{port}/mcp"), headers: BTreeMap::new() },
    };
    let started = Instant::now();
    let conn = loop {
        match Connection::open(&http, short(), &cancel).await {
            Ok(c) => break c,
            Err(e) if started.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    let out = conn.call("echo", json!({"message": "over HTTP"}), &cancel).await.unwrap();
    assert_eq!(out.text, "Echo: over HTTP");
    conn.close().await;
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_server_costs_only_its_own_call() {
    if installed().is_none() {
        return;
    }
    let count = tempfile::NamedTempFile::new().unwrap();
    let servers = Servers::new(short(), vec![scripted(&["--count", count.path().to_str().unwrap()])]);
    let cancel = CancellationToken::new();

    // A schema no grammar can be built from: named, and not offered.
    let (set, errors) = servers.tool_set(&["scripted".into()], &cancel).await;
    assert!(errors.is_empty(), "{errors:?}");
    let states = servers.states().await;
    let bad = states[0].tools.iter().find(|t| t.name == "bad_schema").unwrap();
    assert!(bad.problem.as_deref().unwrap().contains("not a JSON schema Hearth can use"), "{bad:?}");
    assert!(set.find("bad_schema").is_none() && set.find("echo").is_some());

    // Markup is text, kept as it came.
    let html = servers.call("scripted", "html", json!({}), &cancel).await.unwrap();
    assert_eq!(html.text, "<script>alert(1)</script><b>bold</b>");

    // A flood is cut to the limit; the server stays usable.
    let flood = servers.call("scripted", "flood", json!({}), &cancel).await.unwrap();
    assert!(flood.truncated && flood.text.len() < 4200, "{}", flood.text.len());

    // A hang runs into the time limit.
    let t = Instant::now();
    let hang = servers.call("scripted", "hang", json!({}), &cancel).await.unwrap_err();
    assert!(matches!(hang, McpError::Timeout(_)), "{hang:?}");
    assert!(t.elapsed() < Duration::from_secs(6));

    // Stop cancels a hanging call at once.
    let stop = CancellationToken::new();
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stopper.cancel();
    });
    let t = Instant::now();
    let stopped = servers.call("scripted", "hang", json!({}), &stop).await.unwrap_err();
    assert_eq!(stopped, McpError::Cancelled);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // Malformed JSON-RPC costs that call only.
    let garbage = servers.call("scripted", "garbage", json!({}), &cancel).await;
    assert!(garbage.is_err(), "{garbage:?}");
    let echo = servers.call("scripted", "echo", json!({"text": "still here"}), &cancel).await.unwrap();
    assert_eq!(echo.text, "still here");

    // A server that dies mid-call: that call fails saying so, with what it
    // wrote last; the next call starts it again.
    let died = servers.call("scripted", "die", json!({}), &cancel).await.unwrap_err();
    let message = died.to_string();
    assert!(message.contains("stopped during the call") && message.contains("fatal: the tool broke"), "{message}");
    let starts_before = std::fs::read_to_string(count.path()).unwrap().lines().count();
    let echo = servers.call("scripted", "echo", json!({"text": "back"}), &cancel).await.unwrap();
    assert_eq!(echo.text, "back");
    assert_eq!(std::fs::read_to_string(count.path()).unwrap().lines().count(), starts_before + 1);
    servers.close_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_cannot_start_say_why() {
    let cancel = CancellationToken::new();
    let missing =
        Connection::open(&stdio("nope", "hearth-no-such-command", &[]), short(), &cancel).await.err().unwrap();
    assert_eq!(
        missing.to_string(),
        "server “nope”: the command “hearth-no-such-command” was not found (is it installed, and on the PATH?)"
    );
    let missing_path = Connection::open(&stdio("nope", "/no/such/server", &[]), short(), &cancel).await.err().unwrap();
    assert!(missing_path.to_string().contains("does not exist"), "{missing_path}");

    // A program that exits at once, writing why.
    let exits = stdio("exits", "sh", &["-c", "echo 'cannot open config' >&2; exit 1"]);
    let e = Connection::open(&exits, short(), &cancel).await.err().unwrap().to_string();
    assert!(e.contains("did not start") && e.contains("cannot open config"), "{e}");

    // One that never answers `initialize`.
    if installed().is_some() {
        let limits = Limits { start: Duration::from_secs(2), ..short() };
        let e = Connection::open(&scripted(&["--hang-on-start"]), limits, &cancel).await.err().unwrap();
        assert!(matches!(e, McpError::Timeout(_)), "{e:?}");
    }

    // Nothing listens at the URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let http = ServerConfig {
        name: "gone".into(),
        transport: Transport::Http { url: format!("http://127.0.0.1:{port}/mcp"), headers: BTreeMap::new() },
    };
    let e = Connection::open(&http, short(), &cancel).await.err().unwrap().to_string();
    assert!(e.contains("server “gone”"), "{e}");

    // The error is kept for Settings.
    let servers = Servers::new(short(), Vec::new());
    servers.set(vec![stdio("nope", "hearth-no-such-command", &[])]).await;
    let (set, errors) = servers.tool_set(&["nope".into()], &cancel).await;
    assert!(set.is_empty() && errors.len() == 1);
    assert!(servers.states().await[0].error.as_deref().unwrap().contains("was not found"));
}
