#!/usr/bin/env python3
"""End to end: `switchyard train` -> HDF5 checkpoint -> `switchyard generate` reproduces the task.

Trains examples/configs/tiny.json on the copy task alone (the other tasks weighted 0; 300 steps
reach copy exact-match 1.0 on the held-out split), then asks greedy `switchyard generate --model
CKPT_DIR` to answer copy prompts it has not been shown in this order:
    prompt  = [8 (copy tag), 16+s_1 .. 16+s_n, 1 (SEP)]    (runtime/data/synthetic_vocab.h)
    answer  = 16+s_1 .. 16+s_n, 2 (EOS)                    (--stop-tokens 2 ends it)
Every prompt must be answered exactly. It also loads the .h5 file by its own path, and checks that
a checkpoint whose tensor bytes were altered is refused (the per-tensor crc32c).

usage: train_generate_e2e.py SWITCHYARD CONFIG WORKDIR
"""
import os
import random
import shutil
import subprocess
import sys


def run(cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.stderr.write("command failed (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout,
                                                            p.stderr))
        sys.exit(1)
    return p


def generate(switchyard, model, prompt, max_tokens, beam=0):
    p = run([switchyard, "generate", "--model", model, "--prompt-ids",
             ",".join(map(str, prompt)), "--max-tokens", str(max_tokens), "--stop-tokens", "2",
             "--beam", str(beam)])
    line = p.stdout.strip().splitlines()[-1]
    return [int(t) for t in line.split(",")]


def main():
    switchyard, config, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ckpt_dir = os.path.join(work, "ckpt")
    steps = 300
    train = run([switchyard, "train", "--config", config, "--set", "checkpoint.dir=" + ckpt_dir,
                 "--set", "train.steps=%d" % steps, "--set", "log.progress=none",
                 "--set", "data.tasks.reverse.weight=0", "--set", "data.tasks.sort.weight=0",
                 "--set", "data.tasks.modadd.weight=0", "--set", "data.tasks.markov.weight=0"])
    final = [l for l in train.stdout.splitlines() if l.startswith("final")]
    print(final[-1] if final else train.stdout[-400:])

    rng = random.Random(7)
    num_symbols, min_len, max_len = 12, 2, 6  # tiny.json's data.synthetic
    prompts = [[8, 16, 17, 18, 1], [8, 27, 27, 27, 27, 27, 27, 1], [8, 16, 27, 1]]
    while len(prompts) < 24:
        n = rng.randint(min_len, max_len)
        prompts.append([8] + [16 + rng.randrange(num_symbols) for _ in range(n)] + [1])
    wrong = 0
    for prompt in prompts:
        want = prompt[1:-1] + [2]
        got = generate(switchyard, ckpt_dir, prompt, max_len + 2)
        ok = got == want
        wrong += not ok
        print("%s prompt %s -> %s%s" % ("ok  " if ok else "FAIL", prompt, got,
                                        "" if ok else " (want %s)" % want))
    if wrong:
        print("FAIL: %d of %d copy prompts answered wrongly" % (wrong, len(prompts)))
        return 1

    for prompt in prompts[:6]:  # beam search (width 4) agrees with greedy on a sure answer
        got = generate(switchyard, ckpt_dir, prompt, max_len + 2, beam=4)
        if got != prompt[1:-1] + [2]:
            print("FAIL: --beam 4 answered %s with %s" % (prompt, got))
            return 1
    print("ok   --beam 4 answers the first 6 prompts exactly")

    h5 = os.path.join(ckpt_dir, "step-%08d.h5" % steps)
    got = generate(switchyard, h5, prompts[0], max_len + 2)
    if got != prompts[0][1:-1] + [2]:
        print("FAIL: loading %s by file gave %s" % (h5, got))
        return 1

    # Flip one byte in the middle of the file, which lies inside the tensor data (parameters and
    # moments are almost all of its bytes). HDF5 keeps no checksum of raw data; the crc32c must
    # catch it.
    bad_dir = os.path.join(work, "bad")
    os.makedirs(bad_dir)
    bad = os.path.join(bad_dir, "step-%08d.h5" % steps)
    data = bytearray(open(h5, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(bad, "wb").write(bytes(data))
    p = run([switchyard, "generate", "--model", bad, "--prompt-ids", "8,16,1", "--max-tokens",
             "2"], check=False)
    if p.returncode == 0:
        print("FAIL: a checkpoint with a flipped byte loaded without an error")
        return 1
    print("corrupt checkpoint refused: " + p.stderr.strip().splitlines()[-1])
    print("PASS: %d copy prompts answered exactly by the model trained for %d steps"
          % (len(prompts), steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
