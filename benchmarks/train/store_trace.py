#!/usr/bin/python3
"""The expert store's access pattern from a routing trace (log.routing_trace).

The routing trace has one trace step per token; the store is accessed, per training step and MoE
layer, once per activated expert (the union over the step's tokens). Writes that per-step trace,
which `switchyard bench cache --trace` replays (MoESys LFU, LRU, W-TinyLFU and Belady).

    store_trace.py ROUTING_TRACE TOKENS_PER_STEP OUT
"""
import collections
import sys


def main():
    src, tokens_per_step, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    lines = open(src).read().splitlines()
    head = lines[:2]
    rows = [l.split() for l in lines[2:] if l and not l.startswith("#")]
    agg = collections.defaultdict(set)
    for r in rows:
        agg[(int(r[0]) // tokens_per_step, int(r[1]))].update(int(x) for x in r[2:])
    with open(dst, "w") as out:
        out.write(head[0] + "\n" + head[1] + "\n")
        for (step, layer) in sorted(agg):
            out.write(f"{step} {layer} " + " ".join(str(e) for e in sorted(agg[(step, layer)])) + "\n")


if __name__ == "__main__":
    main()
