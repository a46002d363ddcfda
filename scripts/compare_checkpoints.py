#!/usr/bin/python3
"""Compares two Switchyard training checkpoints tensor for tensor and attribute for attribute, bit
for bit, with h5py (an independent HDF5 reader). The config stored under meta/config is compared as
JSON without the keys that say where and how a run was started (checkpoint.dir, checkpoint.resume,
checkpoint.resume_from, expert_store.dir), so a resumed run compares equal to an uninterrupted one.

Either side may be a sharded checkpoint (a directory of shard-I-of-N.h5 files, written by
`switchyard convert --ep-size N`): its tensors are the union of its shards' (a tensor in two shards
is a difference), every shard's meta/ group and root attributes are compared, and the root
attributes shard_index and num_shards, which say where a file sits in its set, are then left out.

    compare_checkpoints.py A B [--ignore-config BLOCK ...]
        A, B: a step-*.h5 file or a sharded checkpoint's directory. --ignore-config parallel
        leaves the config's "parallel" block out too (a checkpoint resaved by a run at another
        ep_size records that run's layout). Exit 0 when equal; else prints what differs, exit 1.
"""
import argparse
import json
import os
import re
import sys

import h5py
import numpy as np

PLACE_KEYS = {"checkpoint": ("dir", "resume", "resume_from"), "expert_store": ("dir",)}
SHARD_NAME = re.compile(r"shard-(\d{5,9})-of-(\d{5,9})\.h5")
SHARD_ATTRS = ("shard_index", "num_shards")


def open_files(path):
    """The HDF5 files of a checkpoint: one, or a sharded directory's, by shard index."""
    if not os.path.isdir(path):
        return [h5py.File(path, "r")]
    names = sorted((int(m.group(1)), n) for n in os.listdir(path)
                   if (m := SHARD_NAME.fullmatch(n)))
    if not names:
        raise SystemExit(f"{path}: no shard-*-of-*.h5 file")
    return [h5py.File(os.path.join(path, n), "r") for _, n in names]


def comparable_config(f, ignore):
    config = json.loads(bytes(f["meta/config"][()]).decode())
    for block, keys in PLACE_KEYS.items():
        for key in keys:
            config.get(block, {}).pop(key, None)
    for block in ignore:
        config.pop(block, None)
    return config


def tensors(files, path, diffs):
    """{name: dataset} over every file, meta/ aside."""
    out = {}
    for f in files:
        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset) or name.startswith("meta/"):
                return
            if name in out:
                diffs.append(f"{name} is in two shards of {path}")
            out[name] = obj
        f.visititems(visit)
    return out


def same_dataset(x, y):
    a, b = np.asarray(x[()]), np.asarray(y[()])
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def same_attrs(x, y, where, diffs, skip=()):
    for key in set(x.attrs) | set(y.attrs):
        if key in skip:
            continue
        if key not in x.attrs or key not in y.attrs or not np.array_equal(x.attrs[key],
                                                                         y.attrs[key]):
            diffs.append(f"{where}@{key}")


def differences(path_a, path_b, ignore=()):
    diffs = []
    files_a, files_b = open_files(path_a), open_files(path_b)
    sharded = len(files_a) > 1 or len(files_b) > 1 or os.path.isdir(path_a) or os.path.isdir(
        path_b)
    try:
        ta, tb = tensors(files_a, path_a, diffs), tensors(files_b, path_b, diffs)
        for name in sorted(set(ta) | set(tb)):
            if name not in tb:
                diffs.append(f"{name} missing from {path_b}")
            elif name not in ta:
                diffs.append(f"{name} missing from {path_a}")
            else:
                if not same_dataset(ta[name], tb[name]):
                    diffs.append(name)
                same_attrs(ta[name], tb[name], name, diffs)
        # Every file's metadata and root attributes against the other side's first file.
        ref = files_b[0]
        for f in files_a + files_b[1:]:
            meta = set(f["meta"].keys()) | set(ref["meta"].keys())
            for key in sorted(meta):
                name = f"meta/{key}"
                if key not in f["meta"] or key not in ref["meta"]:
                    diffs.append(f"{name} missing from {f.filename if key not in f['meta'] else ref.filename}")
                elif key != "config":
                    if not same_dataset(f[name], ref[name]):
                        diffs.append(f"{name} of {f.filename}")
                    same_attrs(f[name], ref[name], name, diffs)
            # The config's length attribute follows checkpoint.dir; the JSON is compared instead.
            if comparable_config(f, ignore) != comparable_config(ref, ignore):
                diffs.append(f"meta/config of {f.filename}")
            same_attrs(f, ref, f"{f.filename}:", diffs, SHARD_ATTRS if sharded else ())
    finally:
        for f in files_a + files_b:
            f.close()
    return diffs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--ignore-config", action="append", default=[], metavar="BLOCK")
    args = parser.parse_args()
    diffs = differences(args.a, args.b, args.ignore_config)
    if diffs:
        print(f"mismatch ({len(diffs)}): {', '.join(diffs[:10])}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
