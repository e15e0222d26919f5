"""Records Python jinja2's rendering of reasoning models' chat templates:
Qwen3 and SmolLM3 (thinking switched by `enable_thinking`, earlier
thinking dropped from history) and a DeepSeek-R1 distill (the generation prompt opens the
thinking block, history keeps only what follows `</think>`).

    python scripts/golden/record_reasoning_templates.py

The template texts are the models' published ones, kept beside the golden
file in crates/engine/tests/data/templates/.
"""
import json
import os

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "crates", "engine", "tests", "data")

TEMPLATES = {
    "qwen3": ("templates/qwen3.jinja", "", "<|im_end|>"),
    "smollm3": ("templates/smollm3.jinja", "", "<|im_end|>"),
    "ministral-3-reasoning": ("templates/ministral-3-reasoning.jinja", "<s>", "</s>"),
    "deepseek-r1-distill-qwen": ("templates/deepseek-r1-distill-qwen.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}

THOUGHT = "<think>\nThe user adds two and two.\nThat is four.\n</think>\n\nThe answer is 4."
# Each template's own tags, for its cases' replies.
TAGS = {"ministral-3-reasoning": ("[THINK]", "[/THINK]")}
MESSAGES = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}],
    # An earlier reply with its thinking: the template decides what the next turn sees of it.
    [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": THOUGHT}, {"role": "user", "content": "And 3 + 3?"}],
    # A reply that began inside a thinking block the prompt opened (R1 distills): no open tag.
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Greet back.\n</think>\n\nHello!"}, {"role": "user", "content": "Bye"}],
    # Thinking switched off in Qwen3 leaves an empty block in the reply.
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\n\n</think>\n\nHello!"}, {"role": "user", "content": "<b>x</b> & y"}],
    # The last message is the assistant's (a continued reply): its thinking stays.
    [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": THOUGHT}],
]


def render(src, messages, agp, bos, eos, thinking):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    extra = {} if thinking is None else {"enable_thinking": thinking}
    try:
        return {"ok": env.from_string(src).render(messages=messages, add_generation_prompt=agp, bos_token=bos, eos_token=eos, **extra)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main():
    templates = {}
    cases = []
    for name, (rel, bos, eos) in TEMPLATES.items():
        with open(os.path.join(DATA, rel), encoding="utf-8") as f:
            src = f.read()
        templates[name] = {"file": rel, "bos_token": bos, "eos_token": eos}
        for messages in MESSAGES:
            if name in TAGS:
                open_tag, close_tag = TAGS[name]
                messages = [dict(m, content=m["content"].replace("<think>", open_tag).replace("</think>", close_tag)) for m in messages]
            for agp in (True, False):
                for thinking in (None, True, False):
                    cases.append({"template": name, "messages": messages, "add_generation_prompt": agp, "enable_thinking": thinking,
                                  **render(src, messages, agp, bos, eos, thinking)})
    out = os.path.join(DATA, "reasoning_template_golden.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"templates": templates, "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
