"""Records Python jinja2's rendering of templates that take tools (Hermes's
`<tool_call>` form: Qwen3 and Qwen 3.5; Llama 3.3's JSON calls and
`ipython` results; Gemma 4's `<|tool_call>call:NAME{…}` blocks; Mistral's
`[TOOL_CALLS]` forms (Small 3.2, Ministral 3, Devstral, Nemo); kept in
crates/engine/tests/data/templates/) with a `tools` list, an assistant
message carrying `tool_calls` (arguments as an object, as Hearth passes
them) and `tool` messages, for crates/engine/tests/tools.rs.

    $(bench/setup-llamacpp.sh)/bin/python scripts/golden/record_tool_templates.py
"""
import datetime
import json
import os

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "crates", "engine", "tests", "data")
# (file, bos, eos, whether it takes several calls in one message)
TEMPLATES = [
    ("templates/qwen3.jinja", "", "<|im_end|>", True),
    ("templates/qwen3.5.jinja", "", "<|im_end|>", True),
    ("templates/llama-3.3.jinja", "<|begin_of_text|>", "<|eot_id|>", False),
    ("templates/gemma-4.jinja", "<bos>", "<eos>", True),
    ("templates/mistral-small-3.2.jinja", "<s>", "</s>", True),
    ("templates/ministral-3-reasoning.jinja", "<s>", "</s>", True),
    ("templates/devstral-small.jinja", "<s>", "</s>", True),
    ("templates/mistral-nemo.jinja", "<s>", "</s>", True),
    ("templates/glm-4.6.jinja", "", "", True),
    ("templates/glm-4.7-flash.jinja", "", "", True),
]
# Mistral's templates take call ids of nine letters and digits only (Hearth
# gives them such ids: `ToolFormat::prepare`).
NINE = {"call_0": "c4ll0id00", "call_1": "c4ll1id01"}

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "description": "The weather in a city."}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
CALL = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CALL2 = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": {}}}
MESSAGES = [
    [{"role": "user", "content": "Weather in Paris?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
    [{"role": "user", "content": "Weather and time?"},
     {"role": "assistant", "content": "", "tool_calls": [CALL, CALL2]},
     {"role": "tool", "content": "{\"temperature\": 18}", "tool_call_id": "call_0"},
     {"role": "tool", "content": "12:00", "tool_call_id": "call_1"}],
    [{"role": "user", "content": "Weather?"},
     {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL]},
     {"role": "tool", "content": "sunny", "tool_call_id": "call_0"},
     {"role": "assistant", "content": "It is sunny."},
     {"role": "user", "content": "Thanks"}],
]


def render(src, messages, tools, bos, eos):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    # jinja2's own `tojson` (keys sorted, `<>&'` escaped), as plain text:
    # jinja2 returns it as Markup, and `'"' + key + '": ' + x|tojson` (Nemo's
    # template) then escapes the plain side; Hugging Face's and llama.cpp's
    # renderers return text, and so does Hearth's.
    # GLM's templates pass `ensure_ascii=False`, which Hugging Face's
    # `tojson` takes: then no character is escaped.
    def tojson(x, indent=None, ensure_ascii=True):
        if not ensure_ascii:
            return json.dumps(x, sort_keys=True, indent=indent, ensure_ascii=False)
        return str(jinja2.utils.htmlsafe_json_dumps(x, sort_keys=True, indent=indent))

    env.filters["tojson"] = tojson
    # A fixed day (Mistral Small 3.2 writes the date); the test sets the same.
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 1, 1).strftime(fmt)
    extra = {"tools": tools} if tools else {}
    return env.from_string(src).render(messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos, **extra)


def main():
    cases = []
    for name, bos, eos, several in TEMPLATES:
        with open(os.path.join(DATA, name), encoding="utf-8") as f:
            src = f.read()
        for messages in MESSAGES:
            if "istral" in name or "devstral" in name:
                messages = json.loads(json.dumps(messages))
                for m in messages:
                    for c in m.get("tool_calls", []):
                        c["id"] = NINE[c["id"]]
                    if "tool_call_id" in m:
                        m["tool_call_id"] = NINE[m["tool_call_id"]]
            if not several and any(len(m.get("tool_calls", [])) > 1 for m in messages):
                continue
            for tools in (TOOLS, None):
                if "nemo" in name and tools:
                    # Nemo's template walks a tool's keys; Hearth hands
                    # templates maps in sorted key order (minijinja's), so
                    # its cases give them in that order.
                    tools = json.loads(json.dumps(tools, sort_keys=True))
                cases.append({"template": name, "bos": bos, "eos": eos, "messages": messages, "tools": tools,
                              "ok": render(src, messages, tools, bos, eos)})
    out = os.path.join(DATA, "tool_template_golden.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
