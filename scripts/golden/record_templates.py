"""Records Python jinja2's rendering of chat templates, the way Hugging Face
renders them (trim_blocks, lstrip_blocks, raise_exception).

    python scripts/golden/record_templates.py MODEL.gguf OUT.json

The SmolLM2 template is read from the model file; the others are the
families' published templates, written out here or kept in
crates/engine/tests/data/templates/ (`FILES`).
"""
import datetime
import json
import os
import sys

import jinja2
import llama_cpp

LLAMA3 = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{%- if system_message %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}{{- system_message }}{{- "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{ message['content'] | trim }}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

QWEN25 = """{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

MISTRAL = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

PYCOMPAT = """{% for m in messages %}{{ m.role.upper() }}: {{ m.content.strip() }}|{{ m.content.startswith('W') }}|{{ m.content.replace('a', 'A') }}|{{ m.content.split(' ')|length }}
{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"""

MESSAGES = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi there. How can I help?"}, {"role": "user", "content": "  Tell me a joke.  "}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Where is the treasure?"}, {"role": "assistant", "content": "Arr, under the palm!"}, {"role": "user", "content": "Which palm?\nThere are many."}],
    [{"role": "user", "content": "Unicode: 日本語 🦀 naïve\r\nline two"}],
    [{"role": "user", "content": "<|im_end|> is text here"}],
    [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
]


def render(src, messages, agp, bos, eos):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    # A fixed day (Granite writes today's date); the test sets the same.
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 1, 1).strftime(fmt)
    try:
        return {"ok": env.from_string(src).render(messages=messages, add_generation_prompt=agp, bos_token=bos, eos_token=eos)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "crates", "engine", "tests", "data")
# Templates kept as files: (file, bos, eos).
FILES = {
    "phi-3.5": ("templates/phi-3.5.jinja", "<s>", "<|endoftext|>"),
    "gemma-2": ("templates/gemma-2.jinja", "<bos>", "<eos>"),
    "granite-3.3": ("templates/granite-3.3.jinja", "", "<|end_of_text|>"),
    "glm-4.6": ("templates/glm-4.6.jinja", "", "<|endoftext|>"),
    "lfm2.5": ("templates/lfm2.5-instruct.jinja", "<|startoftext|>", "<|im_end|>"),
}


def main():
    model, out = sys.argv[1], sys.argv[2]
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    templates = {
        "smollm2": (llm.metadata["tokenizer.chat_template"], "<|im_start|>", "<|im_end|>"),
        "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
        "gemma3": (GEMMA3, "<bos>", "<eos>"),
        "qwen2.5": (QWEN25, "", "<|im_end|>"),
        "mistral": (MISTRAL, "<s>", "</s>"),
        "pycompat": (PYCOMPAT, "", ""),
    }
    for name, (rel, bos, eos) in FILES.items():
        with open(os.path.join(DATA, rel), encoding="utf-8") as f:
            templates[name] = (f.read(), bos, eos)
    cases = []
    for name, (src, bos, eos) in templates.items():
        for messages in MESSAGES:
            for agp in (True, False):
                cases.append({"template": name, "messages": messages, "add_generation_prompt": agp, **render(src, messages, agp, bos, eos)})
    data = {"templates": {k: {"source": v[0], "bos_token": v[1], "eos_token": v[2]} for k, v in templates.items()}, "cases": cases}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
