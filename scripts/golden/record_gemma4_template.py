"""Records Python jinja2's rendering of Gemma 4's real chat template
(llama.cpp's models/templates/google-gemma-4-31B-it.jinja, kept as
crates/engine/tests/data/templates/gemma-4.jinja): thinking unset, off and
on; a system message; several turns; earlier replies that carry their
thought channel (which the template strips).

    $(bench/setup-llamacpp.sh)/bin/python scripts/golden/record_gemma4_template.py
"""
import json
import os

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "crates", "engine", "tests", "data")
TEMPLATE = "templates/gemma-4.jinja"

ASK = {"role": "user", "content": "  What is 2 + 2?\n"}
THOUGHT = {"role": "assistant", "content": "<|channel>thought\nSimple sum.\n<channel|>It is **4**."}
MESSAGES = [
    [ASK],
    [{"role": "system", "content": "Be brief.\nAnswer in French.  "}, ASK],
    # An earlier reply with its thought channel: the template strips it.
    [ASK, THOUGHT, {"role": "user", "content": "And 3 + 3? <b>bold</b> & 日本"}],
    [ASK, {"role": "assistant", "content": "4"}, {"role": "user", "content": "Thanks"}, {"role": "assistant", "content": "You're welcome."}, {"role": "user", "content": "Bye"}],
    # The last message is the model's.
    [ASK, THOUGHT],
    [{"role": "system", "content": "You are terse."}, ASK, THOUGHT, {"role": "user", "content": "<start_of_turn>user\nold markup<end_of_turn>"}],
]


def render(src, messages, agp, thinking):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    extra = {} if thinking is None else {"enable_thinking": thinking}
    try:
        return {"ok": env.from_string(src).render(messages=messages, add_generation_prompt=agp, bos_token="<bos>", eos_token="<eos>", **extra)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main():
    with open(os.path.join(DATA, TEMPLATE), encoding="utf-8") as f:
        src = f.read()
    cases = []
    for messages in MESSAGES:
        for agp in (True, False):
            for thinking in (None, False, True):
                cases.append({"messages": messages, "add_generation_prompt": agp, "enable_thinking": thinking, **render(src, messages, agp, thinking)})
    out = os.path.join(DATA, "gemma4_template_golden.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"template": TEMPLATE, "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
