#!/usr/bin/python3
"""Compares two Switchyard training checkpoints tensor for tensor and attribute for attribute, bit
for bit, with h5py (an independent HDF5 reader). The config stored under meta/config is compared as
JSON without the keys that say where and how a run was started (checkpoint.dir, checkpoint.resume,
checkpoint.resume_from, expert_store.dir), so a resumed run compares equal to an uninterrupted one.

    compare_checkpoints.py A.h5 B.h5     exit 0 when equal; else prints what differs and exits 1
"""
import json
import sys

import h5py
import numpy as np

PLACE_KEYS = {"checkpoint": ("dir", "resume", "resume_from"), "expert_store": ("dir",)}


def comparable_config(f):
    config = json.loads(bytes(f["meta/config"][()]).decode())
    for block, keys in PLACE_KEYS.items():
        for key in keys:
            config.get(block, {}).pop(key, None)
    return config


def differences(path_a, path_b):
    diffs = []
    with h5py.File(path_a, "r") as a, h5py.File(path_b, "r") as b:
        def visit(name, obj):
            if name not in b:
                diffs.append(f"{name} missing from {path_b}")
                return
            if isinstance(obj, h5py.Dataset) and name != "meta/config":
                if not np.array_equal(np.asarray(obj[()]), np.asarray(b[name][()])):
                    diffs.append(name)
            if name == "meta/config":
                return  # its length attribute follows checkpoint.dir; the JSON is compared below
            for key, value in obj.attrs.items():
                if key not in b[name].attrs or not np.array_equal(value, b[name].attrs[key]):
                    diffs.append(f"{name}@{key}")
        a.visititems(visit)
        b.visititems(lambda name, obj: None if name in a else diffs.append(f"{name} missing from {path_a}"))
        for key, value in a.attrs.items():
            if key not in b.attrs or not np.array_equal(value, b.attrs[key]):
                diffs.append(f"@{key}")
        if comparable_config(a) != comparable_config(b):
            diffs.append("meta/config")
    return diffs


def main():
    diffs = differences(sys.argv[1], sys.argv[2])
    if diffs:
        print(f"mismatch ({len(diffs)}): {', '.join(diffs[:10])}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
