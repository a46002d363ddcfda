#!/usr/bin/python3
"""Oracle test: our chat templates (inference/chat_template.h) against transformers' own renderer.

Usage: /usr/bin/python3 chat_template_oracle.py SWITCHYARD_BINARY WORK_DIR

For each of the five families' chat templates (chat_templates.py), writes a model directory with
the hand-made byte-level tokenizer (tiny_tokenizer.py) and a tokenizer_config.json holding the
template and its special tokens, and for a set of conversations (one turn, a system message,
several turns, a reasoning turn, non-ASCII text, with and without the generation prompt) compares
`switchyard tokenize --chat` with transformers' _compile_jinja_template(template).render(...) --
the function apply_chat_template renders with: the same text, byte for byte. A conversation the
template refuses (raise_exception) must be refused by both, with the template's message.

Exit 77 (ctest: skipped) when transformers or jinja2 is missing, saying why.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_templates  # noqa: E402
import tiny_tokenizer  # noqa: E402

try:
    from transformers.utils.chat_template_utils import _compile_jinja_template
    import jinja2  # noqa: F401
except ImportError as e:
    print(f"SKIP: transformers' chat template renderer is not usable: {e}; scripts/install-deps.sh "
          "installs python3-jinja2 and transformers")
    sys.exit(77)

CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"},
     {"role": "assistant", "content": "<think>\nfirst I add\n</think>\n\nA1"},
     {"role": "user", "content": "Q2"}],
    [{"role": "user", "content": "héllo 世界 ✓ \"quoted\" {{ not a tag }}"}],
    [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],  # mixtral refuses
]


def ours(binary, model_dir, conversation, add, work, kwargs=None):
    path = os.path.join(work, "chat.json")
    body = {"messages": conversation, "add_generation_prompt": add}
    if kwargs is not None:
        body["chat_template_kwargs"] = kwargs
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f, ensure_ascii=False)
    r = subprocess.run([binary, "tokenize", "--model", model_dir, "--chat", path],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads(r.stdout)["text"], None


def theirs(template, bos, eos, conversation, add, kwargs=None):
    context = {"messages": conversation, "add_generation_prompt": add, **(kwargs or {})}
    if bos is not None:
        context["bos_token"] = bos
    if eos is not None:
        context["eos_token"] = eos
    try:
        return _compile_jinja_template(template).render(**context), None
    except jinja2.exceptions.TemplateError as e:
        return None, str(e)


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures, checked = [], 0
    for family, (template, bos, eos) in chat_templates.FAMILIES.items():
        model_dir = os.path.join(work, family)
        tiny_tokenizer.write(model_dir, chat_template=template, bos_token=bos, eos_token=eos)
        for i, conversation in enumerate(CONVERSATIONS):
            for add in (True, False):
                want, want_err = theirs(template, bos, eos, conversation, add)
                got, got_err = ours(binary, model_dir, conversation, add, work)
                checked += 1
                where = f"{family} conversation {i} add_generation_prompt={add}"
                if want_err is not None:
                    if got_err is None or want_err not in got_err:
                        failures.append(f"{where}: transformers refuses ({want_err!r}), switchyard "
                                        f"gave {got!r} / {got_err!r}")
                    continue
                if got != want:
                    failures.append(f"{where}:\n  transformers {want!r}\n  switchyard   "
                                    f"{got if got is not None else got_err!r}")
        # chat_template_kwargs (issue 45): extra variables, as apply_chat_template's keyword
        # arguments; Qwen3's enable_thinking=False closes an empty <think> block.
        for kwargs in ({"enable_thinking": False}, {"enable_thinking": True}):
            want, _ = theirs(template, bos, eos, CONVERSATIONS[0], True, kwargs)
            got, got_err = ours(binary, model_dir, CONVERSATIONS[0], True, work, kwargs)
            checked += 1
            if got != want:
                failures.append(f"{family} chat_template_kwargs {kwargs}:\n  transformers "
                                f"{want!r}\n  switchyard   {got if got is not None else got_err!r}")
            elif family == "qwen3_moe" and kwargs["enable_thinking"] is False and \
                    "<think>" not in got:
                failures.append(f"{family}: enable_thinking=False left no <think> block: {got!r}")
    for f in failures:
        print("FAIL", f)
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
