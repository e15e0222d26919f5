#!/usr/bin/env python3
"""A Hugging Face Hub-compatible server on 127.0.0.1, for tests: nothing in
Hearth's tests reaches the internet.

Written from the Hub's HTTP API documentation
(https://huggingface.co/docs/hub/api and huggingface_hub's file_download.py
behaviour), the endpoints Hearth and the official `huggingface_hub` client use:

  GET  /api/models?search=&author=&filter=gguf&sort=&direction=-1&limit=
  GET  /api/models/{org}/{name}[/revision/{rev}]
  GET  /api/models/{org}/{name}/tree/{rev}[/{dir}][?recursive=true]
  HEAD|GET /{org}/{name}/resolve/{rev}/{path}
       small files: 200 with ETag (git blob sha1) and X-Repo-Commit;
       LFS files: 302 to a second host (the "CDN"), with X-Linked-Etag
       ("<sha256>"), X-Linked-Size and X-Repo-Commit, as the Hub does.
  GET  {cdn}/blobs/{sha256}  (Range: bytes=a-b / a-, 206 + Content-Range)

A gated repo answers 401 (X-Error-Code: GatedRepo) to `resolve` without
`Authorization: Bearer <token>`; an unknown repo 404 (RepoNotFound).

Repos come from a folder: REPOS/{org}/{name}/... (every file; those over
LFS_THRESHOLD bytes, and every .gguf, are LFS) and an optional
REPOS/{org}/{name}/.repo.json with downloads, likes, lastModified, gated,
license, trendingScore.

Test hooks (never on the real Hub):
  POST /_fault  {"kind": ..., "times": N, ...}  a fault for the next N matching
                transfers (1 if not given):
     cut         {"after": N}            close the connection after N body bytes
     wrong-range {}                      a Content-Range that is not the one asked
     html        {}                      200 with an HTML page in place of the file
     loop        {}                      resolve redirects to itself
     corrupt     {}                      the file's bytes with one byte flipped
     slow        {"rate": B}             send at most B bytes per second
  GET  /_log    every request both hosts saw: method, host, path, range,
                whether it carried Authorization
  POST /_log/clear

Run: hub_server.py REPOS --token TOKEN  prints "HUB http://127.0.0.1:P CDN http://127.0.0.1:Q"
"""

import argparse
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_THRESHOLD = 10 * 1024 * 1024
DEFAULT_META = {
    "downloads": 0,
    "likes": 0,
    "lastModified": "2026-01-01T00:00:00.000Z",
    "gated": False,
    "license": "apache-2.0",
    "trendingScore": 0,
}


class Repo:
    def __init__(self, root, repo_id):
        self.id = repo_id
        self.root = root
        meta = dict(DEFAULT_META)
        meta_path = os.path.join(root, ".repo.json")
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                meta.update(json.load(f))
        self.meta = meta
        self.files = {}
        for dirpath, _, names in os.walk(root):
            for n in names:
                full = os.path.join(dirpath, n)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                if rel == ".repo.json":
                    continue
                self.files[rel] = self._describe(full)
        listing = "\n".join(f"{p} {d['oid']}" for p, d in sorted(self.files.items()))
        self.sha = hashlib.sha1(listing.encode()).hexdigest()

    @staticmethod
    def _describe(full):
        size = os.path.getsize(full)
        sha256 = hashlib.sha256()
        sha1 = hashlib.sha1(b"blob %d\0" % size)
        with open(full, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                sha256.update(chunk)
                sha1.update(chunk)
        lfs = size > LFS_THRESHOLD or full.endswith(".gguf")
        return {"path": full, "size": size, "sha256": sha256.hexdigest(), "oid": sha1.hexdigest(), "lfs": lfs}

    def summary(self):
        m = self.meta
        tags = ["gguf"] + ([f"license:{m['license']}"] if m.get("license") else [])
        return {
            "_id": hashlib.sha1(self.id.encode()).hexdigest()[:24],
            "id": self.id,
            "modelId": self.id,
            "author": self.id.split("/")[0],
            "likes": m["likes"],
            "downloads": m["downloads"],
            "trendingScore": m["trendingScore"],
            "lastModified": m["lastModified"],
            "createdAt": m["lastModified"],
            "gated": m["gated"],
            "private": False,
            "tags": tags,
            "library_name": "gguf",
        }

    def info(self):
        d = self.summary()
        d.update(
            {
                "sha": self.sha,
                "disabled": False,
                "cardData": {"license": self.meta.get("license")},
                "siblings": [{"rfilename": p} for p in sorted(self.files)],
                "usedStorage": sum(f["size"] for f in self.files.values()),
            }
        )
        return d

    def tree(self, prefix, recursive):
        out, dirs = [], set()
        prefix = prefix.strip("/")
        for p, f in sorted(self.files.items()):
            if prefix and not p.startswith(prefix + "/"):
                continue
            rest = p[len(prefix) + 1 :] if prefix else p
            if "/" in rest and not recursive:
                d = (prefix + "/" if prefix else "") + rest.split("/")[0]
                if d not in dirs:
                    dirs.add(d)
                    out.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
                continue
            entry = {"type": "file", "oid": f["oid"], "size": f["size"], "path": p}
            if f["lfs"]:
                entry["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": 134}
            out.append(entry)
        return out


class State:
    def __init__(self, repos_dir, token):
        self.token = token
        self.repos = {}
        self.blobs = {}
        for org in sorted(os.listdir(repos_dir)):
            org_dir = os.path.join(repos_dir, org)
            if not os.path.isdir(org_dir):
                continue
            for name in sorted(os.listdir(org_dir)):
                root = os.path.join(org_dir, name)
                if os.path.isdir(root):
                    repo = Repo(root, f"{org}/{name}")
                    self.repos[repo.id] = repo
                    for f in repo.files.values():
                        self.blobs[f["sha256"]] = f
        self.lock = threading.Lock()
        self.faults = []
        self.log = []
        self.cdn = None

    def take_fault(self, kinds):
        """The first fault of `kinds` set, used up after its `times` (default 1)."""
        with self.lock:
            for i, f in enumerate(self.faults):
                if f["kind"] in kinds:
                    f["times"] = f.get("times", 1) - 1
                    if f["times"] <= 0:
                        self.faults.pop(i)
                    return f
        return None


def make_handler(state, role):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def record(self):
            with state.lock:
                state.log.append(
                    {
                        "host": role,
                        "method": self.command,
                        "path": self.path,
                        "range": self.headers.get("Range"),
                        "authorization": self.headers.get("Authorization") is not None,
                    }
                )

        def send_json(self, status, body, headers=None):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def error(self, status, code, message):
            self.send_json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

        def authorized(self):
            return self.headers.get("Authorization") == f"Bearer {state.token}" and state.token

        def do_HEAD(self):
            self.handle_request()

        def do_GET(self):
            self.handle_request()

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/_fault":
                with state.lock:
                    state.faults.append(body)
                self.send_json(200, {"ok": True})
            elif self.path == "/_log/clear":
                with state.lock:
                    state.log.clear()
                    state.faults.clear()
                self.send_json(200, {"ok": True})
            else:
                self.error(404, "EntryNotFound", "no such endpoint")

        def handle_request(self):
            url = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(url.path)
            query = urllib.parse.parse_qs(url.query)
            if path == "/_log":
                with state.lock:
                    return self.send_json(200, list(state.log))
            self.record()
            if role == "cdn":
                m = re.fullmatch(r"/blobs/([0-9a-f]{64})", path)
                if not m or m.group(1) not in state.blobs:
                    return self.error(404, "EntryNotFound", "no such blob")
                return self.send_file(state.blobs[m.group(1)])
            if path == "/api/models":
                return self.search(query)
            m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
            if m:
                repo = self.repo(m.group(1))
                return repo and self.send_json(200, repo.info())
            m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
            if m:
                repo = self.repo(m.group(1))
                recursive = query.get("recursive", ["false"])[0] in ("true", "1", "True")
                return repo and self.send_json(200, repo.tree(m.group(3) or "", recursive))
            m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            if m:
                return self.resolve(m.group(1), m.group(3))
            self.error(404, "EntryNotFound", f"no route for {path}")

        def repo(self, repo_id):
            repo = state.repos.get(repo_id)
            if repo is None:
                self.error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}.")
            return repo

        def search(self, query):
            repos = list(state.repos.values())
            term = query.get("search", [""])[0].lower()
            author = query.get("author", [None])[0]
            repos = [r for r in repos if term in r.id.lower() and (author is None or r.id.startswith(author + "/"))]
            for f in query.get("filter", []):
                repos = [r for r in repos if f == "gguf" and any(p.endswith(".gguf") for p in r.files)]
            sort = query.get("sort", ["downloads"])[0]
            key = {"downloads": "downloads", "likes": "likes", "lastModified": "lastModified", "trendingScore": "trendingScore"}.get(sort, "downloads")
            repos.sort(key=lambda r: (r.meta[key], r.id), reverse=query.get("direction", ["-1"])[0] == "-1")
            limit = int(query.get("limit", ["30"])[0])
            # As the Hub does: with expand[] a result holds its ids and only
            # the properties named, so a client that forgets one sees it missing.
            expand = query.get("expand[]", [])
            results = [r.summary() for r in repos[:limit]]
            if expand:
                results = [{k: v for k, v in d.items() if k in ("_id", "id") or k in expand} for d in results]
            self.send_json(200, results)

        def resolve(self, repo_id, file_path):
            repo = self.repo(repo_id)
            if repo is None:
                return
            f = repo.files.get(file_path)
            if f is None:
                return self.error(404, "EntryNotFound", f"{file_path} does not exist in {repo_id}")
            if repo.meta["gated"] and not self.authorized():
                return self.error(
                    401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to access it. Please log in."
                )
            if state.take_fault({"loop"}):
                self.send_response(302)
                self.send_header("Location", self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            common = {"X-Repo-Commit": repo.sha}
            if f["lfs"]:
                self.send_response(302)
                self.send_header("Location", f"{state.cdn}/blobs/{f['sha256']}?repo={urllib.parse.quote(repo_id)}")
                self.send_header("X-Linked-Etag", f'"{f["sha256"]}"')
                self.send_header("X-Linked-Size", str(f["size"]))
                self.send_header("ETag", f'"{f["oid"]}"')
                self.send_header("Content-Length", "0")
                for k, v in common.items():
                    self.send_header(k, v)
                self.end_headers()
                return
            self.send_file(f, etag=f'"{f["oid"]}"', extra=common)

        def send_file(self, f, etag=None, extra=None):
            size = f["size"]
            start, end = 0, size - 1
            partial = False
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
                if not m:
                    return self.error(416, "RangeNotSatisfiable", "bad range")
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                if start >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                partial = True
            fault = state.take_fault({"cut", "wrong-range", "html", "corrupt", "slow"}) if self.command == "GET" else None
            if fault and fault["kind"] == "html":
                page = b"<!doctype html><html><body>Please log in</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            self.send_response(206 if partial else 200)
            length = end - start + 1
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            if partial:
                shown = (start + 1, end + 1) if fault and fault["kind"] == "wrong-range" else (start, end)
                self.send_header("Content-Range", f"bytes {shown[0]}-{shown[1]}/{size}")
            if etag:
                self.send_header("ETag", etag)
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command == "HEAD":
                return
            limit = length
            if fault and fault["kind"] == "cut":
                limit = min(length, int(fault.get("after", length // 2)))
            with open(f["path"], "rb") as src:
                if fault and fault["kind"] in ("corrupt", "slow"):
                    self.send_slowly(src, start, limit, fault)
                else:
                    self.wfile.flush()
                    sent = 0
                    while sent < limit:
                        n = os.sendfile(self.connection.fileno(), src.fileno(), start + sent, min(limit - sent, 1 << 24))
                        if n == 0:
                            break
                        sent += n
            if limit < length:
                # A transfer cut mid-file: the connection drops.
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

        def send_slowly(self, src, start, limit, fault):
            src.seek(start)
            rate = int(fault.get("rate", 1 << 30))
            sent = 0
            flipped = False
            while sent < limit:
                chunk = bytearray(src.read(min(limit - sent, 1 << 16, rate)))
                if not chunk:
                    break
                if fault["kind"] == "corrupt" and not flipped:
                    chunk[len(chunk) // 2] ^= 0xFF
                    flipped = True
                self.wfile.write(chunk)
                sent += len(chunk)
                if fault["kind"] == "slow":
                    time.sleep(len(chunk) / rate)

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that drops a transfer it no longer wants (a header read,
        # a pause) is no error of the server's.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def serve(role, state, port=0):
    server = Server(("127.0.0.1", port), make_handler(state, role))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("repos")
    ap.add_argument("--token", default="")
    args = ap.parse_args()
    state = State(args.repos, args.token)
    cdn = serve("cdn", state)
    state.cdn = f"http://127.0.0.1:{cdn.server_address[1]}"
    hub = serve("hub", state)
    print(f"HUB http://127.0.0.1:{hub.server_address[1]} CDN {state.cdn}", flush=True)
    try:
        sys.stdin.read()  # until the test closes our stdin
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
