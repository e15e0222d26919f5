//! Commands through Tauri's IPC on the mock runtime: argument names, the
//! `{kind, message}` error shape, and the settings checks.

use serde_json::{json, Value};
use tauri::ipc::{CallbackFn, InvokeBody};
use tauri::test::{get_ipc_response, mock_builder, mock_context, noop_assets, INVOKE_KEY};
use tauri::webview::InvokeRequest;
use tauri::WebviewWindowBuilder;

fn app() -> (tempfile::TempDir, tauri::App<tauri::test::MockRuntime>, tauri::WebviewWindow<tauri::test::MockRuntime>) {
    let dir = tempfile::tempdir().unwrap();
    let config = hearth_app::config::AppConfig {
        data_dir: Some(dir.path().to_path_buf()),
        model: Some(dir.path().join("no-model-here.gguf")),
        ..Default::default()
    };
    let app = hearth_app::builder(mock_builder(), config).build(mock_context(noop_assets())).expect("the app builds");
    // What the app's setup does once the event loop runs.
    hearth_app::startup::start(app.handle());
    let webview = WebviewWindowBuilder::new(&app, "main", Default::default()).build().unwrap();
    (dir, app, webview)
}

fn call(webview: &tauri::WebviewWindow<tauri::test::MockRuntime>, cmd: &str, args: Value) -> Result<Value, Value> {
    get_ipc_response(
        webview,
        InvokeRequest {
            cmd: cmd.into(),
            callback: CallbackFn(0),
            error: CallbackFn(1),
            url: "tauri://localhost".parse().unwrap(),
            body: InvokeBody::Json(args),
            headers: Default::default(),
            invoke_key: INVOKE_KEY.to_string(),
        },
    )
    .map(|b| b.deserialize::<Value>().unwrap())
}

#[test]
fn commands_over_ipc() {
    let (dir, app, w) = app();
    assert!(dir.path().join("hearth.db").exists(), "the database lives in HEARTH_DATA_DIR");
    assert_eq!(call(&w, "app_startup_error", json!({})).unwrap(), Value::Null);
    let err = call(&w, "app_move_database_aside", json!({})).unwrap_err();
    assert_eq!(err["kind"], "invalidSettings", "nothing to move aside when the database opened");

    // A second app on the same data folder is refused, and says why.
    let err = hearth_app::state::lock_data_dir(dir.path()).expect_err("the data folder is locked");
    assert_eq!(err.kind, hearth_app::error::ErrorKind::Busy);
    assert!(err.message.contains("already running"), "{}", err.message);

    // Conversations.
    let c = call(&w, "conversations_create", json!({})).unwrap();
    let id = c["id"].as_i64().unwrap();
    assert_eq!(c["title"], "");
    let renamed = call(&w, "conversations_rename", json!({"id": id, "title": "Plans"})).unwrap();
    assert_eq!(renamed["title"], "Plans");
    assert_eq!(call(&w, "conversations_list", json!({})).unwrap().as_array().unwrap().len(), 1);
    assert_eq!(call(&w, "conversations_thread", json!({"id": id})).unwrap(), json!([]));
    assert_eq!(call(&w, "conversations_search", json!({"query": "plan"})).unwrap()[0]["conversation"]["id"], id);

    // Errors are {kind, message}.
    let err = call(&w, "conversations_thread", json!({"id": 999})).unwrap_err();
    assert_eq!(err["kind"], "notFound");
    assert!(err["message"].as_str().unwrap().contains("999"));
    let err = call(&w, "conversations_rename", json!({"id": id, "title": "  "})).unwrap_err();
    assert_eq!(err["kind"], "invalidSettings");

    // Settings: defaults, validation by field, refusal of bad values.
    let mut settings = call(&w, "settings_get", json!({"conversationId": id})).unwrap();
    assert_eq!(settings["temperature"].as_f64().unwrap() as f32, 0.7);
    settings["temperature"] = json!(7.5);
    settings["topP"] = json!(0);
    let errors = call(&w, "settings_validate", json!({"settings": settings})).unwrap();
    let fields: Vec<&str> = errors.as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["temperature", "topP"]);
    let err = call(&w, "settings_set", json!({"conversationId": id, "settings": settings})).unwrap_err();
    assert_eq!(err["kind"], "invalidSettings");
    assert!(err["message"].as_str().unwrap().contains("temperature"));
    settings["temperature"] = json!(0.0);
    settings["topP"] = json!(1.0);
    settings["seed"] = json!(42);
    call(&w, "settings_set", json!({"conversationId": id, "settings": settings})).unwrap();
    assert_eq!(call(&w, "settings_get", json!({"conversationId": id})).unwrap()["seed"], 42);

    // Bad input for every field: NaN and infinities (JSON's null), values
    // out of range, numbers past u32 and values of the wrong type. Each is
    // a field error naming that field, never serde's words, and the saved
    // settings stay as they were.
    let saved = call(&w, "settings_get", json!({"conversationId": id})).unwrap();
    let big = json!(u64::from(u32::MAX) + 1);
    let bad: &[(&str, &[Value])] = &[
        ("temperature", &[json!(f64::NAN), json!(f64::INFINITY), json!(-0.1), json!(5.5), json!("hot")]),
        ("topK", &[json!(-1), json!(100_001), big.clone(), json!(2.5), Value::Null]),
        ("topP", &[json!(f64::NEG_INFINITY), json!(0), json!(1.01), json!(true)]),
        ("minP", &[Value::Null, json!(-0.01), json!(1)]),
        ("repeatPenalty", &[Value::Null, json!(0), json!(10.5)]),
        ("penaltyWindow", &[json!(-1), json!(1_000_001), big.clone()]),
        ("maxNewTokens", &[json!(0), json!(1_000_001), big.clone(), json!(1e300)]),
        ("seed", &[json!(-1), big.clone(), json!(0.5), json!("42")]),
        ("stopStrings", &[json!([""]), json!(vec!["x"; 17]), json!("stop"), json!([1])]),
        ("contextLength", &[json!(8), json!((1u64 << 20) + 1), big.clone()]),
        ("overflow", &[json!("sideways"), json!(1)]),
        ("systemPrompt", &[json!("x".repeat((1 << 20) + 1)), json!(7)]),
    ];
    for (field, values) in bad {
        for value in values.iter() {
            let mut s = saved.clone();
            s[field] = value.clone();
            let errors = call(&w, "settings_validate", json!({"settings": s})).unwrap();
            let named: Vec<&str> = errors.as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
            assert_eq!(named, [*field], "{field} = {value}");
            let err = call(&w, "settings_set", json!({"conversationId": id, "settings": s})).unwrap_err();
            assert_eq!(err["kind"], "invalidSettings", "{field} = {value}");
            let message = err["message"].as_str().unwrap();
            assert!(
                message.starts_with(field) && !message.contains("invalid type") && !message.contains("expected"),
                "{field} = {value}: {message}"
            );
            let err = call(&w, "settings_defaults_set", json!({"settings": s})).unwrap_err();
            assert_eq!(err["kind"], "invalidSettings");
            let err = call(&w, "presets_save", json!({"preset": {"name": "Bad", "settings": s}})).unwrap_err();
            assert_eq!(err["kind"], "invalidSettings");
        }
    }
    assert_eq!(call(&w, "settings_get", json!({"conversationId": id})).unwrap(), saved);
    assert_eq!(call(&w, "presets_list", json!({})).unwrap(), json!([]));

    // Presets.
    let presets = call(&w, "presets_save", json!({"preset": {"name": "Exact", "settings": settings}})).unwrap();
    assert_eq!(presets[0]["name"], "Exact");
    assert_eq!(call(&w, "presets_delete", json!({"name": "Exact"})).unwrap(), json!([]));

    // Models: a missing file is refused in words; the status says why nothing loaded.
    let err = call(&w, "models_open", json!({"path": dir.path().join("nope.gguf")})).unwrap_err();
    assert_eq!(err["kind"], "badModel");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        let s = call(&w, "models_status", json!({})).unwrap();
        if s["state"] != "loading" || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status["state"], "failed", "{status}");
    assert_eq!(status["error"]["kind"], "badModel");

    // The model library: header facts for each file opened before, an
    // error for one that is cut short or gone, never a failed list.
    assert_eq!(call(&w, "models_library", json!({})).unwrap(), json!([]));
    // The configured model is a missing file here; the real one is in the models folder.
    let default_model =
        hearth_engine::paths::models_dir(|k| std::env::var_os(k)).join(hearth_engine::paths::DEFAULT_MODEL_FILE);
    let cut = dir.path().join("cut.gguf");
    let mut head = vec![0u8; 1 << 20];
    std::io::Read::read_exact(&mut std::fs::File::open(&default_model).unwrap(), &mut head).unwrap();
    std::fs::write(&cut, &head).unwrap();
    let gone = dir.path().join("gone.gguf");
    {
        use tauri::Manager;
        let state = app.state::<hearth_app::state::AppState>();
        let store = state.store().unwrap();
        store.record_model(&gone.display().to_string(), "gone", 10).unwrap();
        store.record_model(&cut.display().to_string(), "cut", 98_362_432).unwrap();
        store.record_model(&default_model.display().to_string(), "SmolLM2-135M-Instruct.Q4_1", 98_362_432).unwrap();
    }
    let library = call(&w, "models_library", json!({})).unwrap();
    let rows = library.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{library}");
    assert_eq!(rows[0]["path"], default_model.display().to_string());
    assert_eq!((rows[0]["exists"].clone(), rows[0]["error"].clone()), (json!(true), Value::Null));
    let facts = &rows[0]["facts"];
    assert_eq!(facts["architecture"], "llama");
    assert_eq!(facts["parameterCount"], 134_515_008);
    assert_eq!(facts["contextLength"], 8192);
    assert_eq!(facts["fileSize"], 98_362_432);
    assert_eq!(facts["kvBytesPerToken"], 23_040);
    assert_eq!(facts["memoryBytes"], 96_576_768 + 23_040 * 8192);
    let types: Vec<&str> =
        facts["quantTypes"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(types, ["Q4_1", "Q8_0", "F32"]);
    assert_eq!(
        (rows[1]["exists"].clone(), rows[1]["facts"].clone(), rows[1]["error"]["kind"].clone()),
        (json!(true), Value::Null, json!("badModel"))
    );
    assert!(rows[1]["error"]["message"].as_str().unwrap().contains("truncated"), "{}", rows[1]);
    assert_eq!((rows[2]["exists"].clone(), rows[2]["error"]["kind"].clone()), (json!(false), json!("badModel")));
    // Forgetting: the file stays unless asked; a path not in the list is
    // never deleted.
    let stray = dir.path().join("stray.gguf");
    std::fs::write(&stray, b"GGUF").unwrap();
    let err = call(&w, "models_forget", json!({"path": stray, "deleteFile": true})).unwrap_err();
    assert_eq!(err["kind"], "notFound");
    assert!(stray.exists());
    call(&w, "models_forget", json!({"path": default_model, "deleteFile": false})).unwrap();
    assert!(default_model.is_file(), "removing from the list keeps the file");
    call(&w, "models_forget", json!({"path": cut, "deleteFile": true})).unwrap();
    assert!(!cut.exists(), "deleted when asked");
    call(&w, "models_forget", json!({"path": gone, "deleteFile": true})).unwrap();
    assert_eq!(call(&w, "models_library", json!({})).unwrap(), json!([]));

    // Cache budgets: checked, kept, and read back.
    let err = call(&w, "caches_budgets_set", json!({"budgets": {"memoryMb": 1, "diskMb": 10}})).unwrap_err();
    assert_eq!(err["kind"], "invalidSettings");
    call(&w, "caches_budgets_set", json!({"budgets": {"memoryMb": 512, "diskMb": 0}})).unwrap();
    assert_eq!(call(&w, "caches_budgets_get", json!({})).unwrap(), json!({"memoryMb": 512, "diskMb": 0}));
    // Device: checked before it is kept; a GPU this build lacks is refused.
    assert_eq!(call(&w, "device_get", json!({})).unwrap(), json!("auto"));
    let err = call(&w, "device_set", json!({"device": "tpu"})).unwrap_err();
    assert_eq!(err["kind"], "invalidSettings");
    if !cfg!(feature = "cuda") {
        let err = call(&w, "device_set", json!({"device": "cuda"})).unwrap_err();
        assert!(err["message"].as_str().unwrap().contains("CUDA"), "{err}");
    }
    call(&w, "device_set", json!({"device": "CPU"})).unwrap();
    assert_eq!(call(&w, "device_get", json!({})).unwrap(), json!("cpu"));
    let states = call(&w, "conversations_cache_states", json!({})).unwrap();
    assert_eq!(states, json!([{"conversationId": id, "state": "cold"}]));

    // Delete and undo.
    call(&w, "conversations_delete", json!({"id": id})).unwrap();
    assert_eq!(call(&w, "conversations_list", json!({})).unwrap(), json!([]));
    call(&w, "conversations_restore", json!({"id": id})).unwrap();
    assert_eq!(call(&w, "conversations_list", json!({})).unwrap().as_array().unwrap().len(), 1);

    // Sending needs a channel argument; an empty message is refused before anything is stored.
    let err =
        call(&w, "chat_send", json!({"conversationId": id, "text": "   ", "onEvent": "__CHANNEL__:1"})).unwrap_err();
    assert_eq!(err["kind"], "invalidSettings");
    // "Generate N" takes 1 to 8 replies at once; anything else is refused by name.
    for n in [0, 9] {
        let err = call(
            &w,
            "chat_send",
            json!({"conversationId": id, "text": "hi", "variants": n, "onEvent": "__CHANNEL__:1"}),
        )
        .unwrap_err();
        assert_eq!(err["kind"], "invalidSettings");
        assert!(err["message"].as_str().unwrap().starts_with("variants"), "{err}");
    }
    assert_eq!(call(&w, "conversations_thread", json!({"id": id})).unwrap(), json!([]));

    // The local API server: off by default with a key made once; on, it
    // answers over HTTP (503 here: no model); a taken port is refused and
    // leaves it off.
    let state = call(&w, "api_server_get", json!({})).unwrap();
    assert_eq!((state["settings"]["enabled"].clone(), state["url"].clone()), (json!(false), Value::Null));
    let key = state["settings"]["key"].as_str().unwrap().to_string();
    assert_eq!(call(&w, "api_server_get", json!({})).unwrap()["settings"]["key"], key, "the key is kept");
    assert_eq!(
        call(&w, "api_server_set", json!({"enabled": true, "port": 80})).unwrap_err()["kind"],
        "invalidSettings"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let on = call(&w, "api_server_set", json!({"enabled": true, "port": port})).unwrap();
    assert_eq!(on["url"], format!("http://127.0.0.1:{port}/v1"));
    let answer = http(port, &format!("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"));
    assert!(answer.starts_with("HTTP/1.1 400"), "a body without messages: {answer}");
    let answer = http(port, &format!("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\nContent-Length: 45\r\nConnection: close\r\n\r\n{{\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}"));
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("model_not_loaded"), "{answer}");
    assert!(http(port, &format!("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"))
        .starts_with("HTTP/1.1 401"));
    // Only to the loopback name, and never from another origin's page (a
    // page cannot read the key, but a server without one must not be driven).
    let forbidden = http(port, &format!("GET /v1/models HTTP/1.1\r\nHost: evil.example:{port}\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"));
    assert!(forbidden.starts_with("HTTP/1.1 403"), "{forbidden}");
    let forbidden = http(port, &format!("GET /v1/models HTTP/1.1\r\nHost: localhost:{port}\r\nOrigin: https://evil.example\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"));
    assert!(forbidden.starts_with("HTTP/1.1 403"), "{forbidden}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = taken.local_addr().unwrap().port();
    let err = call(&w, "api_server_set", json!({"enabled": true, "port": busy_port})).unwrap_err();
    assert!(err["message"].as_str().unwrap().contains("choose another port"), "{err}");
    let off = call(&w, "api_server_get", json!({})).unwrap();
    assert_eq!((off["settings"]["enabled"].clone(), off["url"].clone()), (json!(false), Value::Null));
    let renewed = call(&w, "api_server_new_key", json!({})).unwrap();
    assert_ne!(renewed["settings"]["key"], key);

    // Remote endpoints: a bad URL or one that does not answer is refused
    // before anything is kept; a conversation runs locally until told otherwise.
    let err =
        call(&w, "endpoints_add", json!({"name": "x", "baseUrl": "gpu:8000", "apiKey": null, "allowPlainText": false}))
            .unwrap_err();
    assert_eq!(err["kind"], "invalidSettings");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = call(
        &w,
        "endpoints_add",
        json!({"name": "x", "baseUrl": format!("http://127.0.0.1:{dead}"), "apiKey": "k", "allowPlainText": false}),
    )
    .unwrap_err();
    assert_eq!(err["kind"], "remote");
    assert!(err["message"].as_str().unwrap().contains("cannot reach"), "{err}");
    assert_eq!(call(&w, "endpoints_list", json!({})).unwrap(), json!([]));
    assert_eq!(call(&w, "conversations_backend", json!({"id": id})).unwrap(), json!({"kind": "local"}));
    let err = call(
        &w,
        "conversations_set_backend",
        json!({"id": id, "backend": {"kind": "remote", "endpointId": 42, "model": "m"}}),
    )
    .unwrap_err();
    assert_eq!(err["kind"], "notFound");

    // Conversations as files: each format written, and read back; a bad
    // file is refused with kind badImport and adds nothing.
    let files = dir.path().join("exports");
    std::fs::create_dir_all(&files).unwrap();
    let md = files.join("plans.md");
    call(&w, "conversations_export", json!({"id": id, "format": "markdown", "path": md})).unwrap();
    assert!(std::fs::read_to_string(&md).unwrap().starts_with("# Plans\n"));
    let js = files.join("plans.json");
    call(&w, "conversations_export", json!({"id": id, "format": "json", "path": js})).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&std::fs::read(&js).unwrap()).unwrap()["format"], "hearth-conversation");
    let bundle = files.join("plans.hearth");
    call(&w, "conversations_export", json!({"id": id, "format": "bundle", "path": bundle})).unwrap();
    assert_eq!(&std::fs::read(&bundle).unwrap()[..4], b"PK\x03\x04");
    let err = call(&w, "conversations_export", json!({"id": id, "format": "pdf", "path": md})).unwrap_err();
    assert!(
        err.as_str().is_some_and(|e| e.contains("pdf")) || err["message"].as_str().is_some_and(|e| e.contains("pdf")),
        "{err}"
    );
    let backup = files.join("backup.json");
    assert_eq!(call(&w, "conversations_backup", json!({"path": backup})).unwrap(), json!(1));
    // Already here: nothing added, twice over.
    let same = call(&w, "conversations_import", json!({"path": backup})).unwrap();
    assert_eq!(
        (same["conversationIds"].clone(), same["skippedDuplicates"].clone(), same["cache"].clone()),
        (json!([]), json!(1), json!("none"))
    );
    let same = call(&w, "conversations_import", json!({"path": bundle})).unwrap();
    assert_eq!(
        (same["skippedDuplicates"].clone(), same["cache"].clone()),
        (json!(1), json!("none")),
        "an empty conversation has no cache"
    );
    let plain = files.join("plain.json");
    std::fs::write(
        &plain,
        r#"[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHi!"}]"#,
    )
    .unwrap();
    let added = call(&w, "conversations_import", json!({"path": plain})).unwrap();
    let new_id = added["conversationIds"][0].as_i64().unwrap();
    assert_eq!(call(&w, "conversations_thread", json!({"id": new_id})).unwrap().as_array().unwrap().len(), 2);
    let junk = files.join("junk.json");
    std::fs::write(&junk, b"{\"format\": \"hearth-conversation\", \"version\": 99}").unwrap();
    let err = call(&w, "conversations_import", json!({"path": junk})).unwrap_err();
    assert_eq!(err["kind"], "badImport");
    assert!(err["message"].as_str().unwrap().contains("newer Hearth"), "{err}");
    let err = call(&w, "conversations_import", json!({"path": files.join("missing.json")})).unwrap_err();
    assert_eq!(err["kind"], "badImport");
    assert_eq!(call(&w, "conversations_list", json!({})).unwrap().as_array().unwrap().len(), 2);
}

/// One HTTP exchange with the local API server, as text.
fn http(port: u16, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// MCP servers in Settings: a bad `mcpServers` file adds nothing and says
/// why; a taken name is refused; connecting starts a server and lists its
/// tools (a bad schema named); a server that cannot start keeps its error;
/// the list survives a restart; removing stops a server.
#[test]
fn mcp_servers_over_ipc() {
    let (dir, app, w) = app();
    assert_eq!(call(&w, "mcp_servers_list", json!({})).unwrap(), json!([]));
    let err = call(
        &w,
        "mcp_servers_import",
        json!({"json": r#"{"mcpServers": {"a": {"command": "x"}, "b": {"args": []}}}"#}),
    )
    .unwrap_err();
    assert_eq!(err, json!({"kind": "tool", "message": "server “b” has neither a command nor a URL"}));
    let err = call(&w, "mcp_servers_import", json!({"json": "not json"})).unwrap_err();
    assert!(err["message"].as_str().unwrap().starts_with("the file is not valid JSON"), "{err}");
    assert_eq!(call(&w, "mcp_servers_list", json!({})).unwrap(), json!([]), "nothing of a refused file is added");

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/mcp/tests/data/scripted_server.py");
    let file = dir.path().join("mcp.json");
    std::fs::write(
        &file,
        json!({"mcpServers": {
            "scripted": {"command": "python3", "args": [script]},
            "missing": {"command": "hearth-no-such-command"}
        }})
        .to_string(),
    )
    .unwrap();
    let listed = call(&w, "mcp_servers_import_file", json!({"path": file})).unwrap();
    let names: Vec<_> = listed.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["missing", "scripted"]);
    assert!(listed.as_array().unwrap().iter().all(|s| s["running"] == false), "nothing starts until used: {listed}");
    let err = call(&w, "mcp_servers_import_file", json!({"path": file})).unwrap_err();
    assert_eq!(err["message"], "a server named “scripted” already exists");
    let err = call(
        &w,
        "mcp_servers_add",
        json!({"config": {"name": "x", "transport": {"type": "http", "url": "ftp://h", "headers": {}}}}),
    )
    .unwrap_err();
    assert!(err["message"].as_str().unwrap().contains("not an http"), "{err}");

    let states = call(&w, "mcp_servers_connect", json!({"name": "scripted"})).unwrap();
    let scripted = states.as_array().unwrap().iter().find(|s| s["name"] == "scripted").unwrap().clone();
    assert_eq!(scripted["running"], true);
    let tools = scripted["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "echo" && t["problem"].is_null()));
    assert!(tools.iter().any(|t| t["name"] == "bad_schema" && t["problem"].is_string()));

    let err = call(&w, "mcp_servers_connect", json!({"name": "missing"})).unwrap_err();
    assert_eq!(err["kind"], "tool");
    let states = call(&w, "mcp_servers_list", json!({})).unwrap();
    assert!(states[0]["error"].as_str().unwrap().contains("was not found"), "{states}");

    call(&w, "mcp_servers_remove", json!({"name": "missing"})).unwrap();
    let states = call(&w, "mcp_servers_list", json!({})).unwrap();
    assert_eq!(states.as_array().unwrap().len(), 1);
    // What the next start reads: the database has the server left.
    let stored = hearth_store::Store::open(dir.path().join("hearth.db")).unwrap().mcp_servers().unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].name, "scripted");
    assert!(stored[0].transport.contains("scripted_server.py"));
    drop(w);
    drop(app);
}
