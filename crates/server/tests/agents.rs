//! Real coding agents on Hearth: Codex (`codex exec`, the Responses API),
//! Claude Code (`claude -p`, the Messages API), opencode (`opencode run`)
//! and Qwen Code (`qwen -p`, both chat completions), as pinned npm packages
//! (`scripts/setup-agents.sh`), each against the API server on a made
//! gpt-oss file that calls the agent's own shell tool to read a file and,
//! once the file's text has come back, answers with its word. The answer
//! can only arrive if the agent ran its tool and sent the result back.
//!
//! Skipped (with a note) where the agents are not installed, unless
//! `HEARTH_REQUIRE_AGENTS` is set, as `./hearth test` sets it.

#[path = "../../engine/tests/common/o200k.rs"]
#[allow(dead_code, reason = "this binary uses part of the shared vocabulary helper")]
mod o200k;

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::Peer;

/// The word in the file, which the made model answers with once it has read it.
const WORD: &str = "pumpkin";
/// In capitals: the trigger itself is one of the word's tokens, which the
/// model must not write (see `write_scripted_gpt_oss_call`).
const ANSWER: &str = "The word is PUMPKIN";

/// The folder the agents are installed in, or `None` (the test is skipped).
fn agents() -> Option<PathBuf> {
    let dir = std::env::var_os("HEARTH_AGENTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth/agents"));
    if ["codex", "claude", "opencode", "qwen"].iter().all(|a| dir.join("node_modules/.bin").join(a).exists()) {
        return Some(dir);
    }
    assert!(
        std::env::var_os("HEARTH_REQUIRE_AGENTS").is_none(),
        "the agents are not installed in {}: run scripts/setup-agents.sh",
        dir.display()
    );
    eprintln!("skipped: the agents are not installed (scripts/setup-agents.sh)");
    None
}

/// A working folder holding the file the agent is asked to read.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), format!("The secret word is {WORD}.\n")).unwrap();
    dir
}

/// Runs `command` for at most `limit`; its status and its output (stdout, then stderr).
fn run(mut command: Command, limit: Duration) -> (bool, String, String) {
    use std::io::Read;
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the agent starts");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.success();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, reader.join().unwrap(), err_reader.join().unwrap())
}

fn model(dir: &Path, name: &str, arguments: &str) -> PathBuf {
    let path = dir.join("agent-gpt-oss.gguf");
    o200k::write_scripted_gpt_oss_call(&path, name, arguments, WORD, ANSWER);
    path
}

#[test]
fn codex_runs_its_shell_tool_through_the_responses_api() {
    let Some(agents) = agents() else { return };
    let peer = Peer::start(|dir| model(dir, "exec_command", r#"{"cmd":"cat secret"}"#));
    let work = workspace();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "model = \"hearth\"\nmodel_provider = \"hearth\"\nweb_search = \"disabled\"\nmodel_context_window = 131072\n\
             [model_providers.hearth]\nname = \"Hearth\"\nbase_url = \"{}\"\nenv_key = \"HEARTH_TEST_KEY\"\nwire_api = \"responses\"\n",
            peer.url()
        ),
    )
    .unwrap();
    let mut codex = Command::new(agents.join("node_modules/.bin/codex"));
    codex
        // No sandbox: Codex's own would need its helper binaries, which it
        // will not write under a temporary folder; the command only reads.
        .args(["exec", "--skip-git-repo-check", "--color", "never", "--sandbox", "danger-full-access"])
        .arg("Run cat on the file named secret here and tell me the word in it.")
        .current_dir(work.path())
        .env("CODEX_HOME", home.path())
        .env("HEARTH_TEST_KEY", "key");
    let (ok, out, err) = run(codex, Duration::from_secs(180));
    assert!(ok && out.contains(ANSWER), "codex exec: ok {ok}\nstdout:\n{out}\nstderr:\n{err}");
}

#[test]
fn claude_code_runs_its_bash_tool_through_the_messages_api() {
    let Some(agents) = agents() else { return };
    let peer = Peer::start(|dir| model(dir, "Bash", r#"{"command":"cat secret"}"#));
    let work = workspace();
    let home = tempfile::tempdir().unwrap();
    let mut claude = Command::new(agents.join("node_modules/.bin/claude"));
    claude
        .args(["-p", "Run cat on the file named secret here and tell me the word in it."])
        .args(["--model", "hearth", "--allowedTools", "Bash"])
        .current_dir(work.path())
        .env("HOME", home.path())
        .env("ANTHROPIC_BASE_URL", peer.url().trim_end_matches("/v1"))
        .env("ANTHROPIC_API_KEY", "key")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1");
    let (ok, out, err) = run(claude, Duration::from_secs(180));
    assert!(ok && out.contains(ANSWER), "claude -p: ok {ok}\nstdout:\n{out}\nstderr:\n{err}");
}

#[test]
fn opencode_runs_its_bash_tool_through_chat_completions() {
    let Some(agents) = agents() else { return };
    let peer = Peer::start(|dir| model(dir, "bash", r#"{"command":"cat secret"}"#));
    let work = workspace();
    let home = tempfile::tempdir().unwrap();
    let config = serde_json::json!({
        "provider": {"hearth": {"npm": "@ai-sdk/openai-compatible", "name": "Hearth",
            "options": {"baseURL": peer.url(), "apiKey": "key"}, "models": {"hearth": {"name": "Hearth"}}}},
        "model": "hearth/hearth",
        "permission": {"bash": "allow"},
    });
    std::fs::write(work.path().join("opencode.json"), config.to_string()).unwrap();
    let mut opencode = Command::new(agents.join("node_modules/.bin/opencode"));
    opencode
        .args(["run", "--model", "hearth/hearth", "--dir"])
        .arg(work.path())
        .arg("Run cat on the file named secret here and tell me the word in it.")
        .current_dir(work.path())
        .env("HOME", home.path())
        .env("OPENCODE_CONFIG", work.path().join("opencode.json"));
    let (ok, out, err) = run(opencode, Duration::from_secs(180));
    assert!(ok && out.contains(ANSWER), "opencode run: ok {ok}\nstdout:\n{out}\nstderr:\n{err}");
}

#[test]
fn qwen_code_runs_its_shell_tool_through_chat_completions() {
    let Some(agents) = agents() else { return };
    let peer = Peer::start(|dir| model(dir, "run_shell_command", r#"{"command":"cat secret"}"#));
    let work = workspace();
    let home = tempfile::tempdir().unwrap();
    let mut qwen = Command::new(agents.join("node_modules/.bin/qwen"));
    qwen.args(["-p", "Run cat on the file named secret here and tell me the word in it."])
        .args(["--approval-mode", "yolo"])
        .current_dir(work.path())
        .env("HOME", home.path())
        .env("OPENAI_BASE_URL", peer.url())
        .env("OPENAI_API_KEY", "key")
        .env("OPENAI_MODEL", "hearth")
        .env("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1");
    let (ok, out, err) = run(qwen, Duration::from_secs(180));
    assert!(ok && out.contains(ANSWER), "qwen -p: ok {ok}\nstdout:\n{out}\nstderr:\n{err}");
}
