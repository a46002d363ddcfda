#!/usr/bin/python3
"""Seeds for checkpoint_metadata_fuzzer: real checkpoints in the fuzzer's record encoding.

    make_corpus.py OUT_DIR NAME=CHECKPOINT.h5 ...

fuzz/checkpoint/corpus was made with (CKPT: `switchyard train --config examples/configs/tiny.json
--set train.steps=2`'s step-00000002.h5; HF: `switchyard convert` of a Hugging Face directory to
native):
    make_corpus.py fuzz/checkpoint/corpus tiny_trained_step2=CKPT \
        golden_train_checkpoint=tests/golden/train_checkpoint.h5 converted_from_hf=HF

Each checkpoint (h5py reads it) becomes OUT_DIR/NAME: its root attributes, every dataset (path,
type, extents, "dtype" attribute, the first 64 bytes of its data) and every meta/ entry (strings
with their "length" attribute, byte arrays) in order, as checkpoint_metadata_fuzzer.cc describes.
Then the first one cut to four tensors ("minimal") and malformed variants of that (MALFORMED) are
written next to them.
"""
import os
import struct
import sys

import h5py
import numpy as np

TYPES = ["<f4", "<f8", "<i1", "<i2", "<i4", "<i8", "<u1", "<u2", "<u4", "<u8", ">f4", ">i8"]
DATA_BYTES = 64


def str8(b):
    b = b if isinstance(b, bytes) else b.encode()
    return bytes([len(b[:255])]) + b[:255]


def str16(b):
    b = b if isinstance(b, bytes) else b.encode()
    return struct.pack("<H", len(b[:65535])) + b[:65535]


def root_string(name, value):
    return bytes([0]) + str8(name) + str16(value)


def root_int(name, value):
    return bytes([1]) + str8(name) + struct.pack("<q", value)


def tensor(path, type_code, dims, dtype_attr, data):
    out = bytes([2]) + str8(path) + bytes([type_code, len(dims)])
    out += b"".join(struct.pack("<Q", d) for d in dims)
    return out + str8(dtype_attr) + str16(data)


def meta_string(key, value, length=None):
    flag = 1 if length is not None else 0
    return (bytes([3]) + str8(key) + str16(value) + bytes([flag]) +
            struct.pack("<q", length if length is not None else 0))


def meta_bytes(key, value):
    return bytes([4]) + str8(key) + str16(value)


def encode(path):
    """The records of one real checkpoint: (root attributes, datasets, metadata)."""
    root, datasets, meta = [], [], []
    with h5py.File(path, "r") as f:
        for name, value in f.attrs.items():
            if isinstance(value, (bytes, str, np.bytes_)):
                root.append(root_string(name, value if isinstance(value, bytes) else
                                        str(value).encode()))
            else:
                root.append(root_int(name, int(value)))

        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            if name.startswith("meta/"):
                key = name[len("meta/"):]
                if obj.dtype.kind == "S":
                    length = obj.attrs.get("length")
                    meta.append(meta_string(key, obj[()], None if length is None else
                                            int(length)))
                else:
                    meta.append(meta_bytes(key, obj[()].tobytes()))
                return
            code = TYPES.index(obj.dtype.str) if obj.dtype.str in TYPES else 0
            attr = obj.attrs.get("dtype", b"")
            attr = attr if isinstance(attr, bytes) else str(attr).encode()
            data = obj[()].tobytes()[:DATA_BYTES] if obj.size > 0 else b""
            datasets.append(tensor(name, code, list(obj.shape), attr, data))

        f.visititems(visit)
    return root, datasets, meta


# Malformed variants of a real checkpoint: (name, records to add after the real ones).
MALFORMED = [
    ("newer_version", [root_int("format_version", 2)]),
    ("shard_out_of_range", [root_int("num_shards", 2), root_int("shard_index", 5)]),
    ("unknown_dtype", [tensor("params/odd", 7, [2, 3], "bfloat17", b"")]),
    ("dtype_disagrees", [tensor("params/odd", 0, [4], "i64", b"")]),
    ("rank_7", [tensor("params/deep", 0, [1] * 7, "", b"")]),
    ("huge_extent", [tensor("params/huge", 0, [1 << 40, 1 << 30], "f32", b"")]),
    ("negative_extent", [tensor("params/neg", 0, [1 << 63], "f32", b"")]),
    ("length_past_string", [meta_string("notes", b"{}", length=1 << 40)]),
    ("huge_declared_bytes", [bytes([5]) + str8("blob") + struct.pack("<Q", 1 << 40)]),
]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    first = None
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        root, datasets, meta = encode(path)
        with open(os.path.join(out, name), "wb") as f:
            f.write(b"".join(root + datasets + meta))
        first = first or (root, datasets, meta)
    # The first checkpoint cut to four tensors (a small input runs many times faster: every
    # dataset is a file write), and the malformed variants of that.
    root, datasets, meta = first
    datasets = datasets[:4]
    with open(os.path.join(out, "minimal"), "wb") as f:
        f.write(b"".join(root + datasets + meta))
    for name, extra in MALFORMED:
        # Attributes cannot be written twice: the malformed root attributes replace the real ones.
        names = {r[2:2 + r[1]] for r in extra if r[0] == 1}
        kept = [r for r in root if r[2:2 + r[1]] not in names]
        with open(os.path.join(out, name), "wb") as f:
            f.write(b"".join(kept + extra + datasets + meta))


if __name__ == "__main__":
    main()
