#!/usr/bin/env python3
"""Renders conversations with miles' Inkling chat template, for quill's differential test.

    render_miles_template.py --template inkling_fixed.jinja --input CONVERSATIONS.jsonl --out RENDERED.jsonl

The template is radixark/miles, miles/utils/chat_template_utils/templates/inkling_fixed.jinja. It
is not part of this repository: pass its path (on the GPU machine, carry a copy).

Rendering follows miles' apply_chat_template_from_str (miles/utils/chat_template_utils/template.py):
tool-call arguments given as JSON text are parsed into objects first, flat tool specs are wrapped
as {"type": "function", "function": spec}, and the template is rendered by Hugging Face
transformers' render_jinja_template (the code path of tokenizer.apply_chat_template) with
add_generation_prompt false. Without transformers, an equivalent jinja2 environment is used
(ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks), tojson = json.dumps with
ensure_ascii=False, raise_exception), and the output says which one rendered.

Input lines: {"id", "messages", ["tools"], ["kwargs": {"reasoning_effort": ...}]}.
Output lines: {"id", "text"} or {"id", "error"}, in input order, plus a first line
{"renderer": ..., "template_sha256": ...}.
"""

import argparse
import copy
import hashlib
import json
import sys


def normalize(conv):
    messages = copy.deepcopy(conv["messages"])
    for m in messages:
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function")
            if fn is not None and isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.loads(fn["arguments"])
    tools = conv.get("tools")
    if tools:
        tools = [t if isinstance(t, dict) and "function" in t else {"type": "function", "function": t} for t in tools]
    else:
        tools = None
    return messages, tools, conv.get("kwargs", {})


def jinja2_renderer(template):
    """transformers' chat-template environment, rebuilt (used without transformers, and as a check)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)

    def render(messages, tools, kwargs):
        args = {"messages": messages, "add_generation_prompt": False}
        if tools is not None:
            args["tools"] = tools
        args.update(kwargs)
        return compiled.render(**args)

    return render, f"jinja2 {jinja2.__version__} (transformers' environment, rebuilt)"


def transformers_renderer(template):
    try:
        import transformers
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return None, None

    def render(messages, tools, kwargs):
        rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=template,
                                            add_generation_prompt=False, **kwargs)
        return rendered[0]

    return render, f"transformers {transformers.__version__} render_jinja_template"


def render_or_error(render, conv):
    try:
        return {"text": render(*normalize(conv))}
    except Exception as e:  # the template's raise_exception and bad input alike
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--template", required=True, help="miles' inkling_fixed.jinja")
    ap.add_argument("--input", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    raw = open(args.template, "rb").read()
    template = raw.decode("utf-8")
    fallback, fallback_name = jinja2_renderer(template)
    primary, who = transformers_renderer(template)
    convs = [json.loads(line) for line in open(args.input, encoding="utf-8", newline="") if line.strip()]
    if primary is not None and "error" in render_or_error(primary, convs[0]) and "text" in render_or_error(fallback, convs[0]):
        print(f"{who} failed on {convs[0]['id']}: {render_or_error(primary, convs[0])['error']}; using {fallback_name}",
              file=sys.stderr)
        primary = None
    if primary is None:
        primary, who = fallback, fallback_name
    lines = [json.dumps({"renderer": who, "template_sha256": hashlib.sha256(raw).hexdigest()}, ensure_ascii=False)]
    errors = disagree = 0
    for conv in convs:
        got = render_or_error(primary, conv)
        errors += "error" in got
        if primary is not fallback and render_or_error(fallback, conv) != got:
            disagree += 1
            print(f"{conv['id']}: {fallback_name} renders differently", file=sys.stderr)
        lines.append(json.dumps(dict({"id": conv["id"]}, **got), ensure_ascii=False))
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{args.out}: {len(lines) - 1} conversations rendered by {who}, {errors} errors, "
          f"{disagree} differing from {fallback_name}", file=sys.stderr)


if __name__ == "__main__":
    main()
