#!/usr/bin/python3
"""The everyday command line (issue 45): typos get the nearest command or option
(launcher/command_line_typos.h), `switchyard help [COMMAND]` prints that command's help, and
`generate` takes llama.cpp's short flags (-m -p -n -s -t, and -f FILE or - for a prompt file);
without -n it generates until the model's end of sequence or the context is full.
Each row runs the real binary: its exit status, and text that must appear in its output. The
short-flag rows generate from a one-step training checkpoint and compare with the long flags.

    command_line_test.py SWITCHYARD WORK_DIR
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tiny_checkpoint import train_tiny  # noqa: E402

ROWS = [
    # (arguments, exit status (None: any but 0), text that must appear in stdout + stderr)
    (["generat", "--model", "x"], 1,
     "error: unknown command 'generat' for 'switchyard'; did you mean 'generate'?"),
    (["generate", "--modle", "x"], 1,
     "error: 'switchyard generate' has no option '--modle'; did you mean '--model'?"),
    (["bench", "infr"], 1, "unknown command 'infr' for 'switchyard bench'; did you mean 'infer'?"),
    (["train", "--config", "x", "--wait-for-lok"], 1, "did you mean '--wait-for-lock'?"),
    (["--versio"], 1, "'switchyard' has no option '--versio'; did you mean '--version'?"),
    (["help"], 0, "Usage: switchyard"),
    (["help", "generate"], 0, "--max-tokens"),
    (["help", "serve"], 0, "-c,--context,--ctx-size"),
    (["help", "bench", "infer"], 0, "--policies"),
    (["help", "generat"], 1, "did you mean 'generate'?"),
    # Values that look like options, and options with glued values, are not typos.
    (["generate", "--model", "/nonexistent", "--prompt-ids", "1", "--max-tokens", "-1"], None,
     "--max-tokens: -1 is not an integer"),
    (["convert", "--in", "/nonexistent", "--out", "/nonexistent-out", "--dtype=bf16"], 1,
     "/nonexistent does not exist"),
    # One log level for the process, before or after the command's name.
    (["--log-level", "bogus", "inspect", "/nonexistent"], 1,
     "log level 'bogus' (--log-level or SY_LOG_LEVEL): expected trace, debug, info, warning"),
    (["inspect", "/nonexistent", "--log-level", "loud"], 1, "log level 'loud'"),
    # An option far from every name is still named, not reported as a missing argument.
    (["inspect", "--bogus-option-far-from-any-name"], 1,
     "'switchyard inspect' has no option '--bogus-option-far-from-any-name'; run 'switchyard "
     "help inspect' for its options"),
]


def main():
    binary, work = sys.argv[1], os.path.abspath(sys.argv[2])
    failures = 0
    for args, code, text in ROWS:
        r = subprocess.run([binary] + args, capture_output=True, text=True, timeout=60)
        out = r.stdout + r.stderr
        ok = (r.returncode != 0 if code is None else r.returncode == code) and text in out
        print(("ok   " if ok else "FAIL ") + " ".join(args) + f": exit {r.returncode}" +
              ("" if ok else f", wanted {code} and {text!r} in:\n{out[:600]}"), flush=True)
        failures += not ok

    # Short flags give what the long ones give.
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    train_tiny(binary, f"{work}/ckpt")
    long_form = ["generate", "--model", f"{work}/ckpt", "--prompt-ids", "3,4,5", "--max-tokens",
                 "6", "--temperature", "0.9", "--seed", "7", "--threads", "1"]
    short_form = ["generate", "-m", f"{work}/ckpt", "--prompt-ids", "3,4,5", "-n", "6",
                  "--temperature", "0.9", "-s", "7", "-t", "1"]
    want = subprocess.run([binary] + long_form, capture_output=True, text=True, timeout=120)
    got = subprocess.run([binary] + short_form, capture_output=True, text=True, timeout=120)
    ok = want.returncode == 0 and got.returncode == 0 and want.stdout == got.stdout and \
        len(want.stdout.strip().split(",")) == 6
    print(("ok   " if ok else "FAIL ") + f"-m -n -s -t give --model --max-tokens --seed --threads' "
          f"tokens: {got.stdout.strip()!r} / {want.stdout.strip()!r}", flush=True)
    failures += not ok
    # -f reads a prompt file (and - standard input); a model without a tokenizer says so.
    prompt = os.path.join(work, "prompt.txt")
    with open(prompt, "w") as f:
        f.write("Hello")
    for args, stdin in ((["-f", prompt], None), (["-f", "-"], "Hello")):
        r = subprocess.run([binary, "generate", "-m", f"{work}/ckpt"] + args + ["-n", "1"],
                           capture_output=True, text=True, timeout=120, input=stdin)
        ok = r.returncode == 1 and "tokenizer" in r.stderr
        print(("ok   " if ok else "FAIL ") + f"generate {' '.join(args)} reads the prompt text "
              f"(and needs a tokenizer): {r.stderr.strip()[-160:]}", flush=True)
        failures += not ok
    # -c bounds prompt + answer: 3 prompt tokens in a context of 8 leave 5.
    r = subprocess.run([binary, "generate", "-m", f"{work}/ckpt", "--prompt-ids", "3,4,5", "-n",
                        "20", "-c", "8"], capture_output=True, text=True, timeout=120)
    ok = r.returncode == 0 and len(r.stdout.strip().split(",")) == 5 and \
        "generating at most 5 tokens, not --max-tokens 20: --ctx-size is 8 tokens" in r.stderr
    print(("ok   " if ok else "FAIL ") + f"-c 8 leaves 5 tokens after a prompt of 3: "
          f"{r.stdout.strip()!r}", flush=True)
    failures += not ok
    r = subprocess.run([binary, "generate", "-m", f"{work}/ckpt", "--prompt-ids", "3,4,5", "-n",
                        "2", "-c", "3"], capture_output=True, text=True, timeout=120)
    ok = r.returncode == 1 and "--ctx-size 3 leaves no room to generate" in r.stderr
    print(("ok   " if ok else "FAIL ") + f"-c 3 with a prompt of 3: {r.stderr.strip()[-100:]}",
          flush=True)
    failures += not ok
    # Warnings go through the logger: shown by default, silenced by --log-level error or
    # SY_LOG_LEVEL=off, and never on stdout (which holds the tokens alone).
    past = [binary, "generate", "-m", f"{work}/ckpt", "--prompt-ids", "3,4,5", "-n", "2",
            "-c", "20"]
    shown = subprocess.run(past, capture_output=True, text=True, timeout=120)
    quiet = subprocess.run(past + ["--log-level", "error"], capture_output=True, text=True,
                           timeout=120)
    off = subprocess.run(past, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SY_LOG_LEVEL="off"))
    ok = "warning: --ctx-size 20 is past" in shown.stderr and "warning" not in shown.stdout and \
        "warning" not in quiet.stderr and "warning" not in off.stderr and \
        shown.stdout == quiet.stdout == off.stdout
    print(("ok   " if ok else "FAIL ") + "warnings on stderr at the default level, silenced by "
          "--log-level error and SY_LOG_LEVEL=off", flush=True)
    failures += not ok
    # Without -n: until the end of sequence, or the context (16 tokens, the trained seq_len).
    r = subprocess.run([binary, "generate", "-m", f"{work}/ckpt", "--prompt-ids", "3,4,5"],
                       capture_output=True, text=True, timeout=120)
    until_full = r.stdout.strip().split(",")
    ok = r.returncode == 0 and len(until_full) == 13
    print(("ok   " if ok else "FAIL ") + f"no -n: until the context of 16 is full, 13 tokens after "
          f"a prompt of 3: {r.stdout.strip()!r}", flush=True)
    failures += not ok
    if ok:
        # The same model with an end-of-sequence id (generation_config.json, as Hugging Face
        # models carry it) that the answer reaches at its third token: it stops there.
        eos_dir = f"{work}/ckpt-eos"
        shutil.copytree(f"{work}/ckpt", eos_dir)
        with open(os.path.join(eos_dir, "generation_config.json"), "w") as f:
            f.write('{"eos_token_id": %d}' % int(until_full[2]))
        stop = until_full.index(until_full[2]) + 1
        r = subprocess.run([binary, "generate", "-m", eos_dir, "--prompt-ids", "3,4,5"],
                           capture_output=True, text=True, timeout=120)
        ok = r.returncode == 0 and r.stdout.strip().split(",") == until_full[:stop]
        print(("ok   " if ok else "FAIL ") + f"no -n: stops at the model's end of sequence "
              f"({until_full[2]}): {r.stdout.strip()!r}", flush=True)
        failures += not ok
        r = subprocess.run([binary, "generate", "-m", eos_dir, "--prompt-ids", "3,4,5", "-n",
                            "13"], capture_output=True, text=True, timeout=120)
        ok = r.returncode == 0 and r.stdout.strip().split(",") == until_full
        print(("ok   " if ok else "FAIL ") + f"-n 13: exactly 13 tokens: {r.stdout.strip()!r}",
              flush=True)
        failures += not ok
    r = subprocess.run([binary, "generate", "-m", f"{work}/ckpt", "--prompt-ids",
                        ",".join(["3"] * 16)], capture_output=True, text=True, timeout=120)
    ok = r.returncode == 0 and r.stdout.strip() == "" and "fills the context of 16" in r.stderr
    print(("ok   " if ok else "FAIL ") + f"no -n, a prompt that fills the context: its logits "
          f"only, with a note: {r.stderr.strip()[-120:]}", flush=True)
    failures += not ok
    # --model ORG/NAME: a model in the Hugging Face cache (HF_HOME/hub/models--ORG--NAME, the
    # snapshot refs/main names), as huggingface-cli download leaves it.
    hf_home = f"{work}/hf-home"
    repo = f"{hf_home}/hub/models--tiny-org--tiny-moe"
    shutil.copytree(f"{work}/ckpt", f"{repo}/snapshots/0123abcd")
    os.makedirs(f"{repo}/refs")
    with open(f"{repo}/refs/main", "w") as f:
        f.write("0123abcd")
    env = dict(os.environ, HF_HOME=hf_home)
    env.pop("HF_HUB_CACHE", None)
    by_path = subprocess.run([binary, "generate", "-m", f"{work}/ckpt", "--prompt-ids", "3,4,5",
                              "-n", "4"], capture_output=True, text=True, timeout=120)
    by_name = subprocess.run([binary, "generate", "-m", "tiny-org/tiny-moe", "--prompt-ids",
                              "3,4,5", "-n", "4"], capture_output=True, text=True, timeout=120,
                             env=env)
    ok = by_name.returncode == 0 and by_name.stdout == by_path.stdout and \
        "snapshots/0123abcd" in by_name.stderr
    print(("ok   " if ok else "FAIL ") + f"-m ORG/NAME from the Hugging Face cache: "
          f"{by_name.stdout.strip()!r} == {by_path.stdout.strip()!r}", flush=True)
    failures += not ok
    missing = subprocess.run([binary, "generate", "-m", "tiny-org/absent", "--prompt-ids", "3"],
                             capture_output=True, text=True, timeout=60, env=env)
    ok = missing.returncode == 1 and "models--tiny-org--absent" in missing.stderr and \
        "huggingface-cli download tiny-org/absent" in missing.stderr
    print(("ok   " if ok else "FAIL ") + f"-m ORG/NAME not in the cache: "
          f"{missing.stderr.strip()[-160:]}", flush=True)
    failures += not ok
    r = subprocess.run([binary, "generate", "-m", f"{work}/ckpt", "-f", prompt, "-p", "x"],
                       capture_output=True, text=True, timeout=60)
    ok = r.returncode != 0 and "excludes" in r.stderr
    print(("ok   " if ok else "FAIL ") + f"-f and -p exclude each other: {r.stderr.strip()[:120]}",
          flush=True)
    failures += not ok
    print("PASS: every row" if failures == 0 else f"FAIL: {failures} rows")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
