#!/usr/bin/python3
"""The distributed save holds no more than a few experts' states at once, whatever their number.

Under `MPIRUN -np NP switchyard train` (ep_size NP), each case trains 2 steps twice: once without
a checkpoint and once ending with the final checkpoint, each rank under `/usr/bin/time -f %M`.
The save's cost on a rank is its peak RSS with the save less its peak without (the operating
system's measurement, not the trainer's). It must stay under --bound-mib, a fixed budget (a few
expert tensors plus the HDF5 writer's buffers) that does not grow with the expert count, for
every expert count given (--experts 8 32), with the expert states in memory and on the store.
A third run resumes from the saved checkpoint for 2 more steps: a rank restores only its own
experts, rank 0 reading and sending them one tensor at a time, so its cost must stay under the
bound plus 1.25x its own experts' states (1 / np of them).

A save that gathers every expert's states on rank 0 (as the distributed save did before it
streamed) costs rank 0 two to two and a half times all the expert states: with the default sizes
144 to 167 MiB at 8 experts and 611 to 707 MiB at 32 (measured on the binary before the change);
the streamed save costs 3 to 7 MiB. A restore that broadcasts the whole checkpoint holds all the
expert states twice on every rank (packed and unpacked): the old binary's resumed runs (which
also end with its save) cost 152 to 718 MiB; the streamed restore 6 to 111 MiB. Prints the measured costs and "distributed save memory ok".

    distributed_save_memory.py --switchyard BIN --mpirun "mpirun ARGS" --np 2 --config CFG \
        [--experts 8 32] [--bound-mib 48]
"""
import os
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed_equivalence import mpi_script_args, run  # noqa: E402

HIDDEN = 128
INTER = 1024  # one expert tensor: 128 x 1024 floats = 0.5 MiB


def main():
    def extra(ap):
        ap.add_argument("--experts", type=int, nargs="+", default=[8, 32])
        ap.add_argument("--bound-mib", type=float, default=48.0)

    args = mpi_script_args(extra)

    tmp = tempfile.mkdtemp(prefix="sy_save_memory_")
    launcher = shlex.split(args.mpirun) + ["-np", str(args.np)]
    # Each rank under /usr/bin/time, its peak RSS (KiB) in TAG.rss.RANK.
    timed = ["sh", "-c", 'exec /usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"']

    def peak_rss_mib(tag, experts, store, save, resume_dir=None):
        steps = 4 if resume_dir else 2
        cmd = launcher + timed + [f"{tmp}/{tag}", args.switchyard, "train", "--config",
                                  args.config,
                                  "--set", f"model.num_experts={experts}",
                                  "--set", f"model.hidden_size={HIDDEN}",
                                  "--set", f"model.moe_intermediate_size={INTER}",
                                  "--set", f"parallel.ep_size={args.np}",
                                  "--set", f"train.steps={steps}",
                                  "--set", "train.eval_every=0",
                                  "--set", "train.eval_batches=1", "--set", "train.threads=1",
                                  "--set", "log.progress=lines"]
        if resume_dir:
            cmd += ["--set", f"checkpoint.dir={resume_dir}", "--resume"]
        elif save:
            cmd += ["--set", f"checkpoint.dir={tmp}/{tag}-ckpt"]
        if store:
            # A cache of 2 experts per rank (an expert's master, m and v: 3 x 3 tensors).
            cache_mib = 2 * 9 * HIDDEN * INTER * 4 / (1 << 20) + 1
            cmd += ["--set", f'expert_store.dir="{tmp}/{tag}-store"', "--set",
                    "expert_store.filesystem=posix", "--set", f"expert_store.cache_mib={cache_mib}"]
        run(cmd, tag)
        written = f"{resume_dir or f'{tmp}/{tag}-ckpt'}/step-{steps:08d}.h5"
        if (save or resume_dir) and not os.path.exists(written):
            sys.exit(f"FAIL: {tag} wrote no {written}")
        peaks = []
        for r in range(args.np):
            with open(f"{tmp}/{tag}.rss.{r}") as f:
                peaks.append(int(f.read().split()[-1]) / 1024.0)
        return peaks

    failures = []
    for store in (False, True):
        for experts in args.experts:
            mode = "store" if store else "memory"
            # All expert states (values, m, v) of the model: 2 layers x experts x 3 tensors.
            states_mib = 2 * experts * 3 * 3 * HIDDEN * INTER * 4 / (1 << 20)
            base = peak_rss_mib(f"{mode}-e{experts}-nosave", experts, store, save=False)
            saved = peak_rss_mib(f"{mode}-e{experts}-save", experts, store, save=True)
            resumed = peak_rss_mib(f"{mode}-e{experts}-resume", experts, store, save=True,
                                   resume_dir=f"{tmp}/{mode}-e{experts}-save-ckpt")
            # A rank restores its own experts' states (1 / np of them), then trains on them.
            own_mib = states_mib / args.np
            for r in range(args.np):
                cost, restore = saved[r] - base[r], resumed[r] - base[r]
                print(f"{mode}, {experts} experts ({states_mib:.0f} MiB of expert states), "
                      f"rank {r}: peak RSS {base[r]:.0f} MiB without the save, "
                      f"{saved[r]:.0f} MiB with it, {resumed[r]:.0f} MiB resumed: the save "
                      f"costs {cost:.1f} MiB, the restore {restore:.1f} MiB")
                if cost > args.bound_mib:
                    failures.append(f"{mode}, {experts} experts, rank {r}: the save costs "
                                    f"{cost:.1f} MiB > {args.bound_mib} MiB")
                if restore > args.bound_mib + 1.25 * own_mib:
                    failures.append(f"{mode}, {experts} experts, rank {r}: the restore costs "
                                    f"{restore:.1f} MiB > {args.bound_mib} + 1.25 x "
                                    f"{own_mib:.0f} MiB (its own experts' states)")
    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    print("distributed save memory ok")


if __name__ == "__main__":
    main()
