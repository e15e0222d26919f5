#!/usr/bin/env python3
"""Download throughput: `hearth-cli pull` against the official
`huggingface_hub` client, the same file from the same Hub-compatible server
on 127.0.0.1 (tests/hub/hub_server.py, its LFS files behind a redirect to a
second host, as the Hub's CDN), each into an empty Hugging Face cache, in
alternating rounds of one run.

Hearth's figure includes its SHA-256 check of the whole file (the
`huggingface_hub` client checks none); both include the redirect.

    python bench/hub_download.py --cli target/release/hearth-cli --hub-python ~/.cache/hearth/hub-client/venv/bin/python
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "target/release/hearth-cli"))
    ap.add_argument("--hub-python", default=os.path.expanduser("~/.cache/hearth/hub-client/venv/bin/python"))
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="hearth-hub-bench-")
    try:
        repo = os.path.join(work, "repos", "bench-org", "big-GGUF")
        os.makedirs(repo)
        path = os.path.join(repo, "big-Q8_0.gguf")
        chunk = os.urandom(1 << 20)
        with open(path, "wb") as f:
            f.write(b"GGUF")
            for _ in range(args.size_mb):
                f.write(chunk)
        size = os.path.getsize(path)
        server = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests/hub/hub_server.py"), os.path.join(work, "repos")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hub = server.stdout.readline().split()[1]
        env = dict(os.environ, HF_ENDPOINT=hub, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_ENABLE_HF_TRANSFER="0")
        env.pop("HF_TOKEN", None)

        def hearth():
            cache = os.path.join(work, "cache-hearth")
            shutil.rmtree(cache, ignore_errors=True)
            start = time.perf_counter()
            subprocess.run(
                [args.cli, "pull", "bench-org/big-GGUF:Q8_0", "--json"],
                check=True,
                env=dict(env, HF_HUB_CACHE=cache),
                stdout=subprocess.DEVNULL,
            )
            return time.perf_counter() - start

        def official():
            cache = os.path.join(work, "cache-hf")
            shutil.rmtree(cache, ignore_errors=True)
            script = (
                "from huggingface_hub import hf_hub_download\n"
                f"hf_hub_download('bench-org/big-GGUF', 'big-Q8_0.gguf', cache_dir={cache!r})\n"
            )
            start = time.perf_counter()
            subprocess.run([args.hub_python, "-c", script], check=True, env=env, stdout=subprocess.DEVNULL)
            return time.perf_counter() - start

        rows = []
        for r in range(args.rounds):
            h = hearth()
            o = official()
            rows.append((h, o))
            print(f"round {r + 1}: hearth {size / h / 1e6:.0f} MB/s, huggingface_hub {size / o / 1e6:.0f} MB/s", file=sys.stderr)
        server.kill()
        best_h = min(h for h, _ in rows)
        best_o = min(o for _, o in rows)
        print(
            json.dumps(
                {
                    "file_mb": size / 1e6,
                    "hearth_mb_s": size / best_h / 1e6,
                    "huggingface_hub_mb_s": size / best_o / 1e6,
                    "ratio": best_o / best_h,
                    "rounds": [{"hearth_s": h, "huggingface_hub_s": o} for h, o in rows],
                }
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
