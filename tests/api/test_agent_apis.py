"""The APIs coding agents speak, driven by the official clients: OpenAI's
Responses API through `openai` and Anthropic's Messages API through
`anthropic`. Each test checks the shapes the clients parse, not only that
no exception was raised.

`tests/api/run.sh` starts `hearth-cli serve` on the default model with an
API key and runs this file; HEARTH_API_URL and HEARTH_API_KEY say where.
"""

import json
import os
import unittest
import urllib.error
import urllib.request

import anthropic
import openai

URL = os.environ["HEARTH_API_URL"]  # http://127.0.0.1:PORT/v1
KEY = os.environ["HEARTH_API_KEY"]
ROOT = URL.rsplit("/v1", 1)[0]

# The Anthropic SDK of 2026 has no typed sampling fields: they go as extras.
GREEDY = {"temperature": 0}

oa = openai.OpenAI(base_url=URL, api_key=KEY, max_retries=0, timeout=300)
# Anthropic's client adds /v1 itself.
an = anthropic.Anthropic(base_url=ROOT, api_key=KEY, max_retries=0, timeout=300)

WEATHER = {"name": "get_weather", "description": "The weather in a city now.",
           "schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                      "required": ["city"], "additionalProperties": False}}


def post(path, body, headers=None):
    """POSTs JSON; returns (status, parsed body)."""
    request = urllib.request.Request(URL + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "x-api-key": KEY, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Responses(unittest.TestCase):
    def test_plain_and_streamed_replies_agree(self):
        r = oa.responses.create(model="default", input="Name three colours.", temperature=0, max_output_tokens=20)
        self.assertEqual(r.object, "response")
        self.assertTrue(r.id.startswith("resp_"))
        self.assertEqual(r.status, "incomplete")
        self.assertEqual(r.incomplete_details.reason, "max_output_tokens")
        self.assertEqual(r.output[0].type, "message")
        self.assertEqual(r.output[0].content[0].type, "output_text")
        self.assertTrue(r.output_text)
        self.assertEqual(r.usage.output_tokens, 20)
        self.assertEqual(r.usage.total_tokens, r.usage.input_tokens + 20)

        events = list(oa.responses.create(model="default", input="Name three colours.", temperature=0,
                                          max_output_tokens=20, stream=True))
        kinds = [e.type for e in events]
        self.assertEqual(kinds[:4], ["response.created", "response.in_progress", "response.output_item.added",
                                     "response.content_part.added"])
        self.assertEqual(kinds[-4:], ["response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.incomplete"])
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        self.assertEqual(streamed, r.output_text)
        self.assertEqual(events[-1].response.output_text, r.output_text)

    def test_previous_response_id_continues_from_the_cache(self):
        first = oa.responses.create(model="default", instructions="You are terse.",
                                    input="My name is Ada. Remember it.", temperature=0, max_output_tokens=16)
        again = oa.responses.create(model="default", instructions="You are terse.", previous_response_id=first.id,
                                    input="What is my name?", temperature=0, max_output_tokens=16)
        self.assertEqual(again.previous_response_id, first.id)
        # The first turn's prompt came from its cache: only the new turn ran.
        self.assertGreater(again.usage.input_tokens, first.usage.input_tokens)
        self.assertGreaterEqual(again.usage.input_tokens_details.cached_tokens, first.usage.input_tokens - 1)

        got = oa.responses.retrieve(first.id)
        self.assertEqual((got.id, got.output_text), (first.id, first.output_text))
        oa.responses.delete(first.id)
        with self.assertRaises(openai.NotFoundError):
            oa.responses.retrieve(first.id)
        with self.assertRaises(openai.BadRequestError) as e:
            oa.responses.create(model="default", previous_response_id=first.id, input="Hi", max_output_tokens=4)
        self.assertEqual(e.exception.body["param"], "previous_response_id")

    def test_a_function_call_and_its_output_round_trip(self):
        tools = [{"type": "function", "name": WEATHER["name"], "description": WEATHER["description"],
                  "parameters": WEATHER["schema"], "strict": True}]
        r = oa.responses.create(model="default", input="Is it raining in Paris?", tools=tools,
                                tool_choice="required", parallel_tool_calls=False, temperature=0, max_output_tokens=60)
        calls = [o for o in r.output if o.type == "function_call"]
        self.assertEqual(len(calls), 1, r.output)
        self.assertEqual(calls[0].name, "get_weather")
        self.assertIsInstance(json.loads(calls[0].arguments)["city"], str)
        self.assertEqual(r.status, "completed")

        answer = oa.responses.create(model="default", previous_response_id=r.id, tools=tools, temperature=0,
                                     max_output_tokens=24,
                                     input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                             "output": "Rain, 12 degrees."}])
        self.assertEqual(answer.output[-1].type, "message")
        self.assertGreater(answer.usage.input_tokens_details.cached_tokens, 0)

        # Streamed, the call comes as an item with its arguments.
        events = list(oa.responses.create(model="default", input="Is it raining in Paris?", tools=tools,
                                          tool_choice="required", parallel_tool_calls=False, temperature=0,
                                          max_output_tokens=60, stream=True))
        done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
        self.assertEqual([c.name for c in done], ["get_weather"])
        args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        self.assertEqual(args, done[0].arguments)

    def test_a_namespace_offers_its_functions(self):
        # Codex groups some of its tools in a namespace; a call of one says which.
        tools = [{"type": "namespace", "name": "weather_v1", "description": "Weather tools.",
                  "tools": [{"type": "function", "name": WEATHER["name"], "description": WEATHER["description"],
                             "parameters": WEATHER["schema"], "strict": False}]}]
        r = oa.responses.create(model="default", input="Is it raining in Paris?", tools=tools, tool_choice="required",
                                parallel_tool_calls=False, temperature=0, max_output_tokens=60)
        call = [o for o in r.output if o.type == "function_call"][0]
        self.assertEqual((call.name, call.to_dict().get("namespace")), ("get_weather", "weather_v1"))

    def test_a_json_schema_is_followed(self):
        schema = {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
                  "required": ["colour"], "additionalProperties": False}
        r = oa.responses.create(model="default", input="Pick a colour.", temperature=0, max_output_tokens=30,
                                text={"format": {"type": "json_schema", "name": "pick", "schema": schema, "strict": True}})
        self.assertIn(json.loads(r.output_text)["colour"], ("red", "green", "blue"))

    def test_bad_input_is_a_400_naming_it(self):
        for body, param in [
            ({"input": [{"type": "web_search_call", "id": "x"}]}, "input[0].type"),
            ({"input": "Hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
            ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id"),
            ({"input": "Hi", "previous_response_id": "resp_unknown"}, "previous_response_id"),
            ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
             "input[0].content[0].type"),
            ({"input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
        ]:
            status, err = post("/responses", {"model": "default", **body}, {"Authorization": f"Bearer {KEY}"})
            self.assertEqual(status, 400, (body, err))
            self.assertEqual(err["error"]["param"], param, err)


class Messages(unittest.TestCase):
    def test_text_whole_and_streamed(self):
        m = an.messages.create(model="default", max_tokens=20, extra_body=GREEDY,
                               system=[{"type": "text", "text": "You are terse."}],
                               messages=[{"role": "user", "content": "Name three colours."}])
        self.assertEqual((m.type, m.role), ("message", "assistant"))
        self.assertTrue(m.id.startswith("msg_"))
        self.assertEqual(m.content[0].type, "text")
        self.assertIn(m.stop_reason, ("end_turn", "max_tokens"))
        self.assertLessEqual(m.usage.output_tokens, 20)
        if m.stop_reason == "max_tokens":
            self.assertEqual(m.usage.output_tokens, 20)

        with an.messages.stream(model="default", max_tokens=20, extra_body=GREEDY,
                                system=[{"type": "text", "text": "You are terse."}],
                                messages=[{"role": "user", "content": "Name three colours."}]) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        self.assertEqual(text, m.content[0].text)
        self.assertEqual(final.content[0].text, m.content[0].text)
        self.assertEqual(final.stop_reason, m.stop_reason)
        self.assertEqual(final.usage.output_tokens, m.usage.output_tokens)
        # The same prompt again: its tokens but the last came from the cache.
        self.assertGreaterEqual(final.usage.cache_read_input_tokens, m.usage.input_tokens - 1)

    def test_message_start_tells_the_prompts_tokens(self):
        # As Anthropic's API does: the usage in message_start already counts
        # the prompt (read now, and served by the cache), as the end does.
        for _ in range(2):
            events = list(an.messages.create(model="default", max_tokens=3, extra_body=GREEDY, stream=True,
                                             messages=[{"role": "user", "content": "Name four animals."}]))
            self.assertEqual(events[0].type, "message_start")
            start = events[0].message.usage
            end = next(e for e in events if e.type == "message_delta").usage
            self.assertGreater(start.input_tokens + start.cache_read_input_tokens, 5)
            self.assertEqual((start.input_tokens, start.cache_read_input_tokens),
                             (end.input_tokens, end.cache_read_input_tokens))
        # The second time, the cache served the prompt.
        self.assertGreater(start.cache_read_input_tokens, 0)

    def test_a_stop_sequence_is_named(self):
        m = an.messages.create(model="default", max_tokens=40, extra_body=GREEDY, stop_sequences=["4"],
                               messages=[{"role": "user", "content": "What is 2 + 2?"}])
        self.assertEqual((m.stop_reason, m.stop_sequence), ("stop_sequence", "4"))
        self.assertNotIn("4", m.content[0].text)
        # Of several, the one met is named.
        m = an.messages.create(model="default", max_tokens=40, extra_body=GREEDY, stop_sequences=["never here", "4", "zz"],
                               messages=[{"role": "user", "content": "What is 2 + 2?"}])
        self.assertEqual((m.stop_reason, m.stop_sequence), ("stop_sequence", "4"))

    def test_a_tool_use_and_its_result_round_trip(self):
        tools = [{"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["schema"]}]
        ask = {"role": "user", "content": "Is it raining in Paris?"}
        m = an.messages.create(model="default", max_tokens=60, extra_body=GREEDY, tools=tools, messages=[ask],
                               tool_choice={"type": "any", "disable_parallel_tool_use": True})
        self.assertEqual(m.stop_reason, "tool_use")
        uses = [b for b in m.content if b.type == "tool_use"]
        self.assertEqual(len(uses), 1, m.content)
        self.assertEqual(uses[0].name, "get_weather")
        self.assertIsInstance(uses[0].input["city"], str)

        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                               "content": [{"type": "text", "text": "Rain, 12 degrees."}]}]}
        answer = an.messages.create(model="default", max_tokens=24, extra_body=GREEDY, tools=tools,
                                    messages=[ask, {"role": "assistant", "content": m.content}, result])
        self.assertEqual(answer.content[0].type, "text")
        self.assertIn(answer.stop_reason, ("end_turn", "max_tokens"))
        self.assertGreater(answer.usage.cache_read_input_tokens, 0)

        with an.messages.stream(model="default", max_tokens=60, extra_body=GREEDY, tools=tools, messages=[ask],
                                tool_choice={"type": "tool", "name": "get_weather",
                                             "disable_parallel_tool_use": True}) as s:
            final = s.get_final_message()
        self.assertEqual([b.type for b in final.content], ["tool_use"])
        self.assertIsInstance(final.content[0].input["city"], str)
        self.assertEqual(final.stop_reason, "tool_use")

    def test_output_config_format_is_followed(self):
        schema = {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
                  "required": ["colour"], "additionalProperties": False}
        m = an.messages.create(model="default", max_tokens=30, extra_body=GREEDY,
                               output_config={"format": {"type": "json_schema", "schema": schema}},
                               messages=[{"role": "user", "content": "Pick a colour."}])
        self.assertIn(json.loads(m.content[0].text)["colour"], ("red", "green", "blue"))

    def test_count_tokens_counts_the_prompt_a_reply_reads(self):
        messages = [{"role": "user", "content": "What is 2 + 2?"}]
        counted = an.messages.count_tokens(model="default", messages=messages)
        m = an.messages.create(model="default", max_tokens=1, messages=messages)
        self.assertEqual(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens)

    def test_bad_input_is_a_400_in_anthropics_shape(self):
        for body in [
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "x"}]}]},
            {"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            {"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            {"messages": [{"role": "user", "content": "Hi"}], "extra_body": {"temperature": 1.5}},
            {"messages": [{"role": "user", "content": "Hi"}], "output_config": {"format": {"type": "json_schema", "schema": {"type": "object", "if": {}}}}},
        ]:
            with self.assertRaises(anthropic.BadRequestError) as e:
                an.messages.create(model="default", max_tokens=8, **body)
            self.assertEqual(e.exception.body["type"], "error")
            self.assertEqual(e.exception.body["error"]["type"], "invalid_request_error")
        with self.assertRaises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=ROOT, api_key="wrong", max_retries=0).messages.create(
                model="default", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        # The server goes on serving.
        m = an.messages.create(model="default", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        self.assertLessEqual(m.usage.output_tokens, 4)
        self.assertEqual(m.content[0].type, "text")


if __name__ == "__main__":
    unittest.main(verbosity=2)
