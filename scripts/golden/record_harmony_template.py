"""Records Python jinja2's rendering of gpt-oss's real chat template (the
Harmony format; llama.cpp's models/templates/openai-gpt-oss-120b.jinja, kept
as crates/engine/tests/data/templates/gpt-oss.jinja): the reasoning effort
unset, low, medium and high; a system message as the developer's
instructions; earlier replies' analysis (`thinking`) dropped, a last reply's
kept; a reply that carries Harmony markup in its content refused.

    $(bench/setup-llamacpp.sh)/bin/python scripts/golden/record_harmony_template.py

`strftime_now` answers 2026-12-05, as the Rust test's clock does.
"""
import datetime
import json
import os

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "crates", "engine", "tests", "data")
TEMPLATE = "templates/gpt-oss.jinja"
NOW = datetime.datetime(2026, 12, 5, 1, 40, 0)

ASK = {"role": "user", "content": "What is 2 + 2?"}
REPLY = {"role": "assistant", "content": "**4**", "thinking": "User asks simple math. Answer 4."}
MESSAGES = [
    [ASK],
    [{"role": "system", "content": "Be brief.\nAnswer in French."}, ASK],
    # An earlier reply with its analysis: the template drops it for inference.
    [ASK, REPLY, {"role": "user", "content": "And 3 + 3? <b>bold</b> & 日本"}],
    # An earlier reply without analysis.
    [ASK, {"role": "assistant", "content": "4"}, {"role": "user", "content": "Thanks"}],
    # The last message is the assistant's: with add_generation_prompt false its analysis is kept.
    [ASK, REPLY],
    # Harmony markup in a reply's content is refused by the template itself.
    [ASK, {"role": "assistant", "content": "<|channel|>analysis<|message|>x<|end|>"}, ASK],
]


def render(src, messages, agp, effort):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    extra = {} if effort is None else {"reasoning_effort": effort}
    try:
        return {"ok": env.from_string(src).render(messages=messages, add_generation_prompt=agp, bos_token="<|startoftext|>", eos_token="<|return|>", **extra)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main():
    with open(os.path.join(DATA, TEMPLATE), encoding="utf-8") as f:
        src = f.read()
    cases = []
    for messages in MESSAGES:
        for agp in (True, False):
            for effort in (None, "low", "medium", "high"):
                cases.append({"messages": messages, "add_generation_prompt": agp, "reasoning_effort": effort, **render(src, messages, agp, effort)})
    out = os.path.join(DATA, "harmony_template_golden.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"template": TEMPLATE, "now": NOW.isoformat(), "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
