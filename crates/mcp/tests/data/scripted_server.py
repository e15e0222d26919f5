#!/usr/bin/env python3
"""An MCP server over stdio that misbehaves on request, written against the
wire format (newline-delimited JSON-RPC), not an SDK, so it can break it.

Tools: echo (well-behaved), hang (never answers), die (exits mid-call),
garbage (answers with malformed JSON-RPC, then nothing), flood (a result of
1 MiB and 1 MiB of stderr), html (markup as its result), bad_schema (an input
schema that is not a JSON schema). `--hang-on-start` never answers
`initialize`; `--count FILE` appends a line to FILE on each start; `--only
NAME` lists that tool alone (so a model offered it can call nothing else).
"""
import json
import os
import sys
import time

if "--count" in sys.argv:
    with open(sys.argv[sys.argv.index("--count") + 1], "a") as f:
        f.write("start\n")

TOOLS = [
    {"name": "echo", "description": "Says the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "die", "description": "Exits mid-call.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "garbage", "description": "Answers with malformed JSON-RPC.", "inputSchema": {"type": "object"}},
    {"name": "flood", "description": "A very long result.", "inputSchema": {"type": "object"}},
    {"name": "html", "description": "Markup as a result.", "inputSchema": {"type": "object"}},
    {"name": "bad_schema", "description": "A broken schema.",
     "inputSchema": {"type": "object", "properties": {"x": {"type": "strnig"}}}},
]


if "--only" in sys.argv:
    ONLY = sys.argv[sys.argv.index("--only") + 1]
    TOOLS = [t for t in TOOLS if t["name"] == ONLY]


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def text(s):
    return {"content": [{"type": "text", "text": s}], "isError": False}


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue  # a notification
    if method == "initialize":
        if "--hang-on-start" in sys.argv:
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "scripted", "version": "1"}}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments") or {}
        if name == "echo":
            send({"jsonrpc": "2.0", "id": mid, "result": text(args.get("text", ""))})
        elif name == "hang":
            pass
        elif name == "die":
            sys.stderr.write("fatal: the tool broke\n")
            sys.stderr.flush()
            os._exit(3)
        elif name == "garbage":
            sys.stdout.write("this is not JSON\n{\"jsonrpc\": \"2.0\", \"id\": [1, 2], \"result\": 7}\n{\"half\": \n")
            sys.stdout.flush()
        elif name == "flood":
            sys.stderr.write("x" * (1 << 20) + "\n")
            sys.stderr.flush()
            send({"jsonrpc": "2.0", "id": mid, "result": text("y" * (1 << 20))})
        elif name == "html":
            send({"jsonrpc": "2.0", "id": mid, "result": text("<script>alert(1)</script><b>bold</b>")})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": f"unknown tool {name}"}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})
