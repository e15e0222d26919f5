"""Hearth's OpenAI-compatible API, driven by the official `openai` client.

`tests/api/run.sh` starts `hearth-cli serve` on the default model with an
API key and runs this file; HEARTH_API_URL and HEARTH_API_KEY say where.
"""

import json
import os
import threading
import time
import unittest
import urllib.error
import urllib.request

import openai

URL = os.environ["HEARTH_API_URL"]  # http://127.0.0.1:PORT/v1
KEY = os.environ["HEARTH_API_KEY"]
ROOT = URL.rsplit("/v1", 1)[0]

client = openai.OpenAI(base_url=URL, api_key=KEY, max_retries=0, timeout=300)


def ask(text, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 24)
    return client.chat.completions.create(model="default", messages=[{"role": "user", "content": text}], **kw)


def raw(path, body, headers=None):
    """POSTs bytes; returns (status, parsed JSON body)."""
    request = urllib.request.Request(URL + path, data=body, method="POST", headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def health():
    with urllib.request.urlopen(ROOT + "/health", timeout=10) as r:
        return json.loads(r.read())


class Api(unittest.TestCase):
    def test_models_lists_the_loaded_model(self):
        models = client.models.list().data
        self.assertEqual(len(models), 1)
        self.assertIn("SmolLM2", models[0].id)

    def test_streamed_and_whole_replies_agree(self):
        whole = ask("Name three colours.")
        text = whole.choices[0].message.content
        self.assertTrue(text)
        self.assertEqual(whole.choices[0].finish_reason, "length")
        self.assertEqual(whole.usage.completion_tokens, 24)
        self.assertEqual(whole.usage.total_tokens, whole.usage.prompt_tokens + 24)

        chunks = list(ask("Name three colours.", stream=True, stream_options={"include_usage": True}))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(streamed, text)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason], ["length"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 24)

    def test_completions_continue_raw_text(self):
        a = client.completions.create(model="default", prompt="The capital of France is", max_tokens=8, temperature=0)
        self.assertTrue(a.choices[0].text)
        b = "".join(c.choices[0].text for c in client.completions.create(model="default", prompt="The capital of France is", max_tokens=8, temperature=0, stream=True))
        self.assertEqual(b, a.choices[0].text)

    def test_stop_ends_before_the_stop_string(self):
        text = ask("Write a short poem about the sea.", max_tokens=40).choices[0].message.content
        words = [w for w in text.split() if len(w) > 3]
        self.assertTrue(words, text)
        stop = words[len(words) // 2]
        stopped = ask("Write a short poem about the sea.", max_tokens=40, stop=[stop])
        self.assertEqual(stopped.choices[0].finish_reason, "stop")
        self.assertEqual(stopped.choices[0].message.content, text[: text.index(stop)])

    def test_the_same_seed_gives_the_same_text(self):
        kw = dict(temperature=1.0, top_p=1.0, max_tokens=32, seed=1234)
        first = ask("Tell me a fact about cats.", **kw).choices[0].message.content
        second = ask("Tell me a fact about cats.", **kw).choices[0].message.content
        self.assertEqual(first, second)

    def test_speculation_gives_the_same_text_as_without(self):
        # A reply that repeats its context, where drafts are taken: greedy
        # and seeded, with drafts (always, or auto) and without.
        text = "Repeat exactly, twice: the quick brown fox jumps over the lazy dog near the river bank."
        for kw in (dict(temperature=0), dict(temperature=1.0, top_p=1.0, seed=77)):
            replies = [ask(text, max_tokens=60, extra_body={"speculation": mode, "draft_tokens": 6}, **kw).choices[0].message.content
                       for mode in ("off", "ngram", "auto")]
            self.assertEqual(replies[1], replies[0], kw)
            self.assertEqual(replies[2], replies[0], kw)
        status, body = raw("/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}], "draft_tokens": 33}).encode())
        self.assertEqual((status, body["error"]["param"]), (400, "draft_tokens"))
        status, body = raw("/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}], "draft_model": "other.gguf"}).encode())
        self.assertEqual((status, body["error"]["param"]), (400, "draft_model"))

    def test_a_draft_model_gives_the_same_text_and_one_of_another_vocabulary_is_refused(self):
        request = urllib.request.Request(URL + "/models", headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(request, timeout=30) as r:
            model = json.loads(r.read())["data"][0]["path"]
        text = "Repeat exactly, twice: the quick brown fox jumps over the lazy dog near the river bank."
        plain = ask(text, max_tokens=40, extra_body={"speculation": "off"}).choices[0].message.content
        # The model's own file as its draft model: the same vocabulary, token by token.
        drafted = ask(text, max_tokens=40, extra_body={"draft_model": model, "draft_tokens": 4}).choices[0].message.content
        self.assertEqual(drafted, plain)
        gemma = os.path.join(os.path.dirname(model), "gemma-3-270m-q4_k_m.gguf")
        status, body = raw("/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}], "draft_model": gemma}).encode())
        self.assertEqual(status, 400, body)
        self.assertIn("cannot draft for", body["error"]["message"])
        self.assertIn("its vocabulary has", body["error"]["message"])
        status, body = raw("/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}], "draft_model": gemma + ".missing"}).encode())
        self.assertEqual(status, 400, body)
        self.assertIn("cannot open the draft model", body["error"]["message"])
        status, body = raw("/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}], "speculation": "draft"}).encode())
        self.assertEqual((status, body["error"]["param"]), (400, "draft_model"))
        # The default model carries no MTP head to draft with.
        status, body = raw("/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}], "speculation": "mtp"}).encode())
        self.assertEqual(status, 400, body)
        self.assertIn("no MTP head", body["error"]["message"])
        # The server goes on answering.
        self.assertEqual(ask(text, max_tokens=40, extra_body={"speculation": "off"}).choices[0].message.content, plain)

    def test_n_samples_variants_each_with_its_seed(self):
        kw = dict(temperature=1.0, top_p=1.0, max_tokens=16)
        both = ask("Invent a name for a boat.", n=2, seed=50, **kw)
        self.assertEqual([c.index for c in both.choices], [0, 1])
        # Variant b samples with seed + b, as a request of its own would.
        alone = ask("Invent a name for a boat.", n=1, seed=51, **kw)
        self.assertEqual(both.choices[1].message.content, alone.choices[0].message.content)
        # Both choices' tokens count (one that ended early, fewer).
        self.assertGreater(both.usage.completion_tokens, 16)
        self.assertLessEqual(both.usage.completion_tokens, 32)
        self.assertEqual(both.choices[1].finish_reason, alone.choices[0].finish_reason)

    def test_logprobs_give_the_likeliest_tokens(self):
        r = ask("Say yes.", max_tokens=6, logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 6)
        for t in content:
            self.assertEqual(len(t.top_logprobs), 3)
            # Greedy: the chosen token is the likeliest.
            self.assertEqual(t.top_logprobs[0].token, t.token)
            self.assertAlmostEqual(t.top_logprobs[0].logprob, t.logprob, places=4)
            self.assertLessEqual(t.logprob, 0)
        # The tokens' bytes spell the reply.
        self.assertEqual(bytes(b for t in content for b in t.bytes).decode("utf-8"), r.choices[0].message.content)

    def test_a_reply_ended_by_its_end_token_counts_and_lists_its_text_tokens_only(self):
        r = ask("What is 2 + 2?", max_tokens=60, logprobs=True)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        content = r.choices[0].logprobs.content
        self.assertTrue(all(t.bytes for t in content), [t.token for t in content][-3:])
        self.assertEqual(len(content), r.usage.completion_tokens)
        self.assertEqual(bytes(b for t in content for b in t.bytes).decode("utf-8"), r.choices[0].message.content)

    def test_a_second_turn_reuses_the_first_turns_cache(self):
        first_q = "Tell me about the moon in one sentence. " + str(time.time())
        first = ask(first_q, max_tokens=20)
        history = [
            {"role": "user", "content": first_q},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "And the sun?"},
        ]
        second = client.chat.completions.create(model="default", messages=history, max_tokens=8, temperature=0)
        cached = second.usage.prompt_tokens_details.cached_tokens
        # All of the first prompt, and the reply's tokens that the template renders the same way.
        self.assertGreaterEqual(cached, first.usage.prompt_tokens)
        self.assertLess(cached, second.usage.prompt_tokens)

    def test_eight_clients_at_once(self):
        results, errors = [None] * 8, []

        def one(i):
            try:
                chunks = ask(f"Count from {i} to {i + 5}.", max_tokens=20, stream=True)
                results[i] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(errors, [])
        self.assertTrue(all(results), results)
        # Each equals its reply alone (greedy; a decode step shared with others sums as alone).
        self.assertEqual(results[3], ask("Count from 3 to 8.", max_tokens=20).choices[0].message.content)

    def test_a_client_that_disconnects_stops_its_reply(self):
        stream = ask("Write a very long story about a dragon.", max_tokens=4000, temperature=0.8, stream=True)
        for i, _ in enumerate(stream):
            if i == 5:
                break
        self.assertEqual(health()["requests_running"], 1)
        stream.close()
        deadline = time.time() + 5
        while health()["requests_running"] and time.time() < deadline:
            time.sleep(0.02)
        self.assertEqual(health(), {"status": "ok", "requests_running": 0, "requests_queued": 0})

    def test_a_wrong_key_is_401(self):
        bad = openai.OpenAI(base_url=URL, api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError) as e:
            bad.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(e.exception.status_code, 401)
        self.assertEqual(e.exception.body["code"], "invalid_api_key")

    def test_bad_requests_are_400_naming_the_field(self):
        status, body = raw("/chat/completions", b"{not json")
        self.assertEqual(status, 400)
        self.assertIn("not valid JSON", body["error"]["message"])
        with self.assertRaises(openai.BadRequestError) as e:
            ask("hi", temperature=7)
        self.assertEqual(e.exception.body["param"], "temperature")
        with self.assertRaises(openai.BadRequestError) as e:
            ask("hi", n=20)
        self.assertEqual(e.exception.body["param"], "n")
        with self.assertRaises(openai.BadRequestError) as e:
            ask("word " * 9000, max_tokens=4)
        self.assertEqual(e.exception.body["code"], "context_length_exceeded")

    def test_structured_output_follows_the_schema(self):
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "population": {"type": "integer"}},
                  "required": ["city", "population"], "additionalProperties": False}
        r = ask("Name a city and its population.", max_tokens=60, temperature=1.0, seed=3,
                response_format={"type": "json_schema", "json_schema": {"name": "city", "strict": True, "schema": schema}})
        if r.choices[0].finish_reason == "stop":
            v = json.loads(r.choices[0].message.content)
            self.assertEqual(set(v), {"city", "population"})
            self.assertIsInstance(v["population"], int)
        with self.assertRaises(openai.BadRequestError) as e:
            ask("hi", response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "dependentSchemas": {}}}})
        self.assertEqual(e.exception.body["param"], "response_format")
        self.assertIn("dependentSchemas", e.exception.body["message"])

    def test_a_required_tool_call_comes_back_as_tool_calls(self):
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                                 "required": ["city"], "additionalProperties": False}}}]
        r = ask("What's the weather in Paris?", tools=tools, tool_choice="required", parallel_tool_calls=False, max_tokens=60)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        call = choice.message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertIn("city", json.loads(call.function.arguments))
        # The result goes back as a tool message; the client's types round-trip.
        messages = [{"role": "user", "content": "What's the weather in Paris?"}, choice.message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"}]
        again = client.chat.completions.create(model="default", messages=messages, tools=tools, temperature=0, max_tokens=16)
        self.assertIn(again.choices[0].finish_reason, ("stop", "length", "tool_calls"))
        # Streamed: the client assembles the call from its delta.
        stream = client.chat.completions.create(model="default", messages=messages[:1], tools=tools, tool_choice="required",
                                                parallel_tool_calls=False, temperature=0, max_tokens=60, stream=True)
        names, finish = [], None
        for chunk in stream:
            for d in chunk.choices[0].delta.tool_calls or []:
                names.append(d.function.name)
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual((names, finish), (["get_weather"], "tool_calls"))

    def test_identical_requests_reuse_one_cache(self):
        # A short prompt (under the 64 tokens a shared beginning needs to be
        # cloned): each repeat still reads all of it but its last token from
        # the cache the one before left.
        first = ask("Say hello.", max_tokens=8)
        for _ in range(5):
            again = ask("Say hello.", max_tokens=8)
            self.assertEqual(again.usage.prompt_tokens, first.usage.prompt_tokens)
            self.assertGreaterEqual(again.usage.prompt_tokens_details.cached_tokens, first.usage.prompt_tokens - 1)
            self.assertEqual(again.choices[0].message.content, first.choices[0].message.content)

    def test_a_required_call_with_parallel_calls_ends(self):
        # parallel_tool_calls left at its default (true): the small model
        # would repeat its call to the token limit; the reply ends after a
        # few calls, each call made once, and no markup is left as content.
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                                 "required": ["city"]}}}]
        for kw in ({}, {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}):
            r = ask("Is it raining in Paris?", tools=tools, max_tokens=300, **({"tool_choice": "required"} | kw))
            choice = r.choices[0]
            self.assertEqual(choice.finish_reason, "tool_calls", choice)
            self.assertIsNone(choice.message.content, choice)
            calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls]
            self.assertEqual(len(calls), len(set(calls)), calls)
            self.assertLess(r.usage.completion_tokens, 300)
        # Cut at the limit part way through a call: no markup as content.
        r = ask("Is it raining in Paris?", tools=tools, tool_choice="required", max_tokens=6)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertNotIn("<tool_call>", r.choices[0].message.content or "")

    def test_a_wrong_method_is_405_in_openais_shape(self):
        request = urllib.request.Request(URL + "/chat/completions", method="GET", headers={"Authorization": f"Bearer {KEY}"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=10)
        self.assertEqual(e.exception.code, 405)
        self.assertEqual(json.loads(e.exception.read())["error"]["code"], "method_not_allowed")

    def test_a_megabytes_prompt_is_refused_without_stalling_a_stream(self):
        # 7 MB could not fit the context whatever its tokens: refused from its
        # size, before the worker would spend seconds tokenizing it.
        gaps, done = [], threading.Event()

        def chat():
            last = time.perf_counter()
            for chunk in ask("Write a long story about a lighthouse.", max_tokens=400, stream=True, seed=3, temperature=0.8):
                now = time.perf_counter()
                if not done.is_set():
                    gaps.append(now - last)
                last = now

        # Built before the stream starts: this client's own work must not
        # hold the streaming thread up and count as the server's gap.
        big = json.dumps({"messages": [{"role": "user", "content": "x" * 7_000_000}]}).encode()
        streaming = threading.Thread(target=chat)
        streaming.start()
        time.sleep(1.0)
        status, body = raw("/chat/completions", big)
        done.set()
        streaming.join()
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["code"], "context_length_exceeded")
        self.assertLessEqual(max(gaps[1:]), 0.2, f"the longest gap between chunks: {max(gaps[1:]):.3f} s")

    def test_idle_connections_do_not_lock_clients_out(self):
        # 1,100 connections that never send a request (more than a desktop's
        # default of 1,024 descriptors): /health and a request still answer.
        import resource
        import socket
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 1200 <= hard or hard == resource.RLIM_INFINITY:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
        host, port = ROOT.split("//")[1].split(":")
        idle = []
        try:
            # Some had a request answered and stay open (kept alive): they are
            # idle too, and closed first like the silent ones when needed.
            for _ in range(300):
                s = socket.create_connection((host, int(port)), timeout=5)
                s.sendall(f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
                self.assertIn(b" 200 ", s.recv(4096))
                idle.append(s)
            for _ in range(800):
                idle.append(socket.create_connection((host, int(port)), timeout=5))
            t0 = time.perf_counter()
            self.assertEqual(health()["status"], "ok")
            self.assertTrue(client.models.list().data)
            self.assertLess(time.perf_counter() - t0, 5)
        finally:
            for s in idle:
                s.close()

    def test_a_connection_trickling_headers_is_closed(self):
        import socket
        host, port = ROOT.split("//")[1].split(":")
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: " + f"{host}:{port}".encode() + b"\r\n")
        t0 = time.perf_counter()
        closed = False
        while time.perf_counter() - t0 < 25:
            try:
                s.sendall(b"X-Slow: 1\r\n")
                s.settimeout(1)
                if s.recv(4096) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
        s.close()
        self.assertTrue(closed, "the server kept a connection that never finished its headers")
        self.assertLess(time.perf_counter() - t0, 20)

    def test_a_second_host_or_a_foreign_absolute_target_is_refused(self):
        import socket
        host, port = ROOT.split("//")[1].split(":")

        def status(head):
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(head.encode())
                return int(s.recv(4096).split(b" ")[1])

        auth = f"Authorization: Bearer {KEY}\r\n"
        self.assertEqual(status(f"GET /v1/models HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}Connection: close\r\n\r\n"), 200)
        self.assertEqual(status(f"GET /v1/models HTTP/1.1\r\nHost: {host}:{port}\r\nHost: evil.example\r\n{auth}Connection: close\r\n\r\n"), 400)
        self.assertEqual(status(f"GET http://evil.example/v1/models HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}Connection: close\r\n\r\n"), 403)
        self.assertEqual(status(f"GET http://{host}:{port}/v1/models HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}Connection: close\r\n\r\n"), 200)

    def test_an_oversized_body_is_413(self):
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (9 << 20)}]}).encode()
        status, answer = raw("/chat/completions", body)
        self.assertEqual(status, 413)
        self.assertEqual(answer["error"]["code"], "request_too_large")


if __name__ == "__main__":
    unittest.main(verbosity=2)
