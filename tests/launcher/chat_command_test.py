#!/usr/bin/python3
"""`switchyard chat` (issue 45): each answer equals `switchyard generate` on the conversation
rendered through the model's chat template (`switchyard tokenize --chat`, whose template is checked
against transformers in chat_template_oracle.py), cut at the end-of-sequence token; the history
carries the earlier turns, --system opens it, /reset starts over, a conversation past -c is refused
and the chat goes on, and a model without a template is refused by name.

    chat_command_test.py SWITCHYARD WORK_DIR
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_openai_test as t  # noqa: E402  (the tiny Qwen3-MoE and its helpers; exits 77 without them)

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def chat(binary, model_dir, lines, *extra):
    r = subprocess.run([binary, "chat", "-m", model_dir, "-t", t.THREADS, *SAMPLING, *extra],
                       input="".join(line + "\n" for line in lines), capture_output=True,
                       text=True, timeout=300)
    return r.returncode, r.stdout.split("\n"), r.stderr


# Sampled, with a seed: the tiny model's greedy answer hardly depends on the prompt, a sampled one
# does, so a turn that lost its history would show.
SAMPLING = ["--temperature", "1.5", "-s", "3"]


def expected(binary, model_dir, messages, n, work):
    """The answer `generate` gives to the rendered conversation: its text before the EOS."""
    ids = t.chat_prompt_ids(binary, model_dir, messages, work)
    out = t.generate(binary, model_dir, ids, n, *SAMPLING)
    if t.EOS in out:
        out = out[:out.index(t.EOS)]
    return t.decode(binary, model_dir, out)


def main():
    binary, work = sys.argv[1], os.path.abspath(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(work, "tiny-qwen3")
    t.write_model(model, with_tokenizer=True)

    code, out, err = chat(binary, model, ["Hello", "How are you?", "/reset", "Hello", "/exit",
                                          "never read"], "-n", "6")
    first = expected(binary, model, [{"role": "user", "content": "Hello"}], 6, work)
    second = expected(binary, model, [{"role": "user", "content": "Hello"},
                                      {"role": "assistant", "content": first},
                                      {"role": "user", "content": "How are you?"}], 6, work)
    check(code == 0 and len(out) >= 3 and out[0] == first,
          f"turn 1 equals generate on the template: {out[:1]!r} == {first!r}")
    check(len(out) >= 3 and out[1] == second and second != first,
          f"turn 2 carries turn 1: {out[1:2]!r} == {second!r} (and differs from turn 1's)")
    check(len(out) >= 3 and out[2] == first and out[3:] == [""],
          f"/reset starts over, /exit ends: {out[2:]!r}")
    check("/reset" in err and "/exit" in err, "stderr names /reset and /exit")

    system = "Answer in French, always, and be precise about it."
    code, out, _ = chat(binary, model, ["Hi"], "--system", system, "-n", "12")
    want = expected(binary, model, [{"role": "system", "content": system},
                                    {"role": "user", "content": "Hi"}], 12, work)
    alone = expected(binary, model, [{"role": "user", "content": "Hi"}], 12, work)
    check(code == 0 and out[0] == want and want != alone,
          f"--system opens the conversation: {out[0]!r} == {want!r} (without it: {alone!r})")

    code, out, err = chat(binary, model, ["word " * 40, "Hi"], "-c", "32", "-n", "4")
    check(code == 0 and "fills the context of 32" in err and "/reset" in err and
          len(out) >= 2 and out[0] != "",
          f"past -c: refused with advice, then the next line answered: {out[:1]!r}")

    no_template = os.path.join(work, "no-template")
    shutil.copytree(model, no_template)
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        path = os.path.join(no_template, name)
        if os.path.exists(path):
            os.remove(path)
    code, _, err = chat(binary, no_template, ["Hi"])
    check(code == 1 and "chat template" in err, f"no template: {err.strip()[-150:]}")

    if failures:
        print(f"FAIL: {len(failures)} checks failed")
        return 1
    print("PASS: chat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
