#!/usr/bin/python3
"""A distributed resume whose newest checkpoint has a damaged expert tensor falls back cleanly.

The distributed restore streams the experts from rank 0 one tensor at a time, so a tensor that
fails its checksum is found after the ranks have received others. Here `MPIRUN -np NP switchyard
train` saves at steps 2 and 4; one byte of an expert tensor that another rank owns (the last
expert's w_down, found with h5py) is flipped in the step-4 file; the resumed run must skip that
checkpoint naming it and the checksum, resume from step 2 on every rank (no rank left waiting
for a message, none reading a stale one), and give the losses of steps 3 to 6 of an
uninterrupted run exactly. Prints "distributed damaged resume ok".

    distributed_damaged_resume.py --switchyard BIN --mpirun "mpirun ARGS" --np 2 --config CFG
"""
import json
import os
import shlex
import shutil
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed_equivalence import compare_losses, losses, mpi_script_args, run  # noqa: E402


def main():
    args = mpi_script_args()
    with open(args.config) as f:
        cfg = json.load(f)
    experts, layers = cfg["model"]["num_experts"], cfg["model"]["num_layers"]

    tmp = tempfile.mkdtemp(prefix="sy_damaged_resume_")
    launcher = shlex.split(args.mpirun) + ["-np", str(args.np)]

    def train(tag, steps, ckpt_dir, resume=False):
        cmd = launcher + [args.switchyard, "train", "--config", args.config,
                          "--set", f"parallel.ep_size={args.np}",
                          "--set", f"train.steps={steps}", "--set", "train.eval_every=0",
                          "--set", "train.eval_batches=1", "--set", "train.threads=1",
                          "--set", "log.every=1", "--set", "log.progress=lines",
                          "--set", f"log.metrics={tmp}/{tag}.jsonl",
                          "--set", f"checkpoint.dir={ckpt_dir}", "--set", "checkpoint.every=2",
                          "--set", "checkpoint.keep=0"]
        if resume:
            cmd.append("--resume")
        return run(cmd, tag)

    train("uninterrupted", 6, f"{tmp}/uninterrupted-ckpt")
    train("first", 4, f"{tmp}/ckpt")
    damaged = f"{tmp}/ckpt/step-00000004.h5"
    name = f"experts/layer{layers - 1}/expert{experts - 1}/w_down"
    with h5py.File(damaged, "r") as f:
        ds = f[name]
        offset = ds.id.get_offset()
        size = ds.id.get_storage_size()
    if offset is None or size == 0:
        sys.exit(f"FAIL: {name} has no contiguous data in {damaged}")
    with open(damaged, "r+b") as f:
        f.seek(offset + size // 2)
        byte = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([byte[0] ^ 0x10]))
    out = train("resumed", 6, f"{tmp}/ckpt", resume=True)
    if f"skipping checkpoint {damaged}" not in out or "checksum" not in out:
        sys.stdout.write(out)
        sys.exit(f"FAIL: the resume did not skip {damaged} for its checksum")
    compare_losses(losses(f"{tmp}/resumed.jsonl"), losses(f"{tmp}/uninterrupted.jsonl"),
                   range(3, 7), 0.0, "losses of steps 3-6 resumed from step 2")
    print(f"{name} damaged in step 4: skipped on every rank, resumed from step 2, losses of "
          "steps 3-6 bit-identical to the uninterrupted run")
    shutil.rmtree(tmp, ignore_errors=True)
    print("distributed damaged resume ok")


if __name__ == "__main__":
    main()
