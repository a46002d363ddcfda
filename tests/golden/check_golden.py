#!/usr/bin/env python3
"""Checks the golden files of tests/golden without any Switchyard code (README.md):

  expert_store.bin       decoded by hand from the format in docs/storage.md: both superblocks,
                         the index, every extent's payload and checksum, and zeros everywhere else
  train_checkpoint.h5    read with h5py: the layout of storage/hdf5/checkpoint_layout.h and
                         launcher/training/train_checkpoint.h, every value against the formulas of
                         train_checkpoint_golden_test.cc, every CRC-32C in meta/tensor_crc32c
  tiny.safetensors       loaded with the safetensors library and compared with what
                         make_safetensors_golden.py writes (a stale golden file fails)

    /usr/bin/python3 tests/golden/check_golden.py tests/golden

Prints "golden files ok" at the end; exits 77 (skipped) when h5py or numpy is missing.
"""
import json
import os
import struct
import sys


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli, reflected 0x82F63B78), continuing from `crc` like storage's Crc32c."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def expect(cond, message):
    if not cond:
        fail(message)


# ---- the expert store (docs/storage.md, "The expert store's on-disk format") ----------------

M64 = (1 << 64) - 1
BLOCK = 4096
LAYERS, EXPERTS = 2, 2
KINDS = [(1, [24, 40, 24]), (2, [16, 16, 16])]  # (kind, part sizes) of expert_store_golden_test.cc
SPARE = 1


def extent_seed(layer, expert, kind_index, generation):
    x = ((layer << 40) ^ (expert << 16) ^ kind_index ^ ((generation * 0x9E3779B97F4A7C15) & M64))
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def payload(layer, expert, kind_index, size):
    return bytes((i * 7 + layer * 31 + expert * 11 + kind_index * 101) & 0xFF for i in range(size))


def parse_superblock(image, slot, covered):
    sb = image[slot * BLOCK:(slot + 1) * BLOCK]
    expect(sb[:8] == b"SYXSTORE", f"superblock {slot}: magic {sb[:8]!r}")
    expect(struct.unpack_from("<Q", sb, 4088)[0] == crc32c(sb[:4088]),
           f"superblock {slot}: checksum of bytes [0, 4088)")
    (version, size, sequence, checksum_kind, alignment, layers, experts,
     nkinds) = struct.unpack_from("<IIQIIIII", sb, 8)
    (idx0, idx1, idx_area, idx_bytes, idx_crc, data_offset, file_size) = struct.unpack_from(
        "<7Q", sb, 48)
    kinds = []
    for k in range(nkinds):
        kind, nparts, payload_bytes, stride, pool_offset, pool_extents = struct.unpack_from(
            "<IIQQQQ", sb, 104 + 104 * k)
        parts = list(struct.unpack_from("<8Q", sb, 104 + 104 * k + 40))
        expect(parts[nparts:] == [0] * (8 - nparts), f"superblock {slot}: unused part sizes")
        kinds.append(dict(kind=kind, parts=parts[:nparts], payload=payload_bytes, stride=stride,
                          pool_offset=pool_offset, pool_extents=pool_extents))
    covered.append((slot * BLOCK, slot * BLOCK + 104 + 104 * nkinds))
    covered.append((slot * BLOCK + 4088, slot * BLOCK + BLOCK))
    return dict(version=version, size=size, sequence=sequence, checksum_kind=checksum_kind,
                alignment=alignment, layers=layers, experts=experts, kinds=kinds,
                index_offsets=(idx0, idx1), index_area=idx_area, index_bytes=idx_bytes,
                index_crc=idx_crc, data_offset=data_offset, file_size=file_size)


def check_store(path):
    image = open(path, "rb").read()
    covered = []
    slots = [parse_superblock(image, s, covered) for s in (0, 1)]
    # Created at publish 1 (slot 1), then one publish of every extent: publish 2 in slot 0.
    expect([s["sequence"] for s in slots] == [2, 1], f"sequences {[s['sequence'] for s in slots]}")
    entries_bytes = LAYERS * EXPERTS * len(KINDS) * 48
    for slot, sb in enumerate(slots):
        expect((sb["version"], sb["size"], sb["checksum_kind"], sb["alignment"]) ==
               (1, BLOCK, 1, BLOCK), f"superblock {slot}: version, size, checksum kind, alignment")
        expect((sb["layers"], sb["experts"], len(sb["kinds"])) == (LAYERS, EXPERTS, len(KINDS)),
               f"superblock {slot}: layers, experts, kinds")
        expect(sb["index_bytes"] == entries_bytes, f"superblock {slot}: index bytes")
        expect(sb["index_area"] == BLOCK, f"superblock {slot}: index area {sb['index_area']}")
        expect(sb["file_size"] == len(image), f"superblock {slot}: file size {sb['file_size']}")
        expect(sb["index_offsets"] == (2 * BLOCK, 3 * BLOCK), f"superblock {slot}: index areas")
        expect(sb["data_offset"] == 4 * BLOCK, f"superblock {slot}: data offset")
        pool = sb["data_offset"]
        for (kind, parts), info in zip(KINDS, sb["kinds"]):
            expect(info["kind"] == kind and info["parts"] == parts, f"kind record {info}")
            expect(info["payload"] == sum(parts) and info["stride"] == BLOCK, f"kind record {info}")
            expect(info["pool_offset"] == pool, f"kind {kind}: pool at {info['pool_offset']}")
            expect(info["pool_extents"] == LAYERS * EXPERTS + SPARE, f"kind {kind}: pool size")
            pool += info["pool_extents"] * info["stride"]
        expect(pool == len(image), f"the pools end at {pool}, the file at {len(image)}")
    expect(slots[0]["kinds"] == slots[1]["kinds"], "the two superblocks' kinds differ")

    used = set()
    for slot, sb in enumerate(slots):
        start = sb["index_offsets"][sb["sequence"] % 2]
        index = image[start:start + entries_bytes]
        covered.append((start, start + entries_bytes))
        expect(crc32c(index) == sb["index_crc"], f"superblock {slot}: index checksum")
        position = 0
        for layer in range(LAYERS):
            for expert in range(EXPERTS):
                for k, info in enumerate(sb["kinds"]):
                    (l, e, ki, flags, offset, length, checksum, generation) = struct.unpack_from(
                        "<IIIIQQQQ", index, position * 48)
                    position += 1
                    where = f"publish {sb['sequence']} entry ({layer}, {expert}, {k})"
                    expect((l, e, ki, flags) == (layer, expert, k, 0), f"{where}: identity")
                    if sb["sequence"] == 1:  # the new store: nothing written
                        expect((offset, length, checksum, generation) == (0, 0, 0, 0), where)
                        continue
                    expect(generation == 1 and length == info["payload"], f"{where}: {generation}")
                    expect((offset - info["pool_offset"]) % info["stride"] == 0 and
                           info["pool_offset"] <= offset <
                           info["pool_offset"] + info["pool_extents"] * info["stride"],
                           f"{where}: offset {offset} is not an extent of its pool")
                    expect(offset not in used, f"{where}: extent {offset} used twice")
                    used.add(offset)
                    data = image[offset:offset + length]
                    expect(data == payload(layer, expert, k, length), f"{where}: payload bytes")
                    seed = extent_seed(layer, expert, k, generation)
                    expect(checksum == crc32c(data, seed & 0xFFFFFFFF), f"{where}: checksum")
                    covered.append((offset, offset + length))
    # Every byte the format does not describe is zero (unused superblock bytes, index padding,
    # the rest of each extent, the spare extents).
    mask = bytearray(len(image))
    for begin, end in covered:
        mask[begin:end] = b"\x01" * (end - begin)
    stray = [i for i, (m, b) in enumerate(zip(mask, image)) if not m and b]
    expect(not stray, f"{len(stray)} nonzero bytes outside the format's fields, first at "
                      f"{stray[:1]}")
    print(f"expert_store.bin: {len(image)} bytes, publish 2 of {len(used)} extents: ok")


# ---- the training checkpoint ------------------------------------------------------------------

STEP = 3
SEED = 0x0123456789ABCDEF
DATA_POSITION = '{"epoch":1,"offset":40}'


def param_value(n, j):
    return ((j + n) % 19 - 9) / 8.0


def moment_m(n, j):
    return ((j + 2 * n) % 7 - 3) / 64.0


def moment_v(n, j):
    return ((j + n) % 5) / 256.0


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def check_checkpoint(path, config_path, np, h5py):
    with h5py.File(path, "r") as f:
        attrs = f.attrs
        expect(text(attrs["format"]) == "switchyard-checkpoint", f"format {attrs['format']!r}")
        for key, want in (("format_version", 1), ("step", STEP), ("shard_index", 0),
                          ("num_shards", 1)):
            expect(int(attrs[key]) == want, f"root attribute {key} = {attrs[key]}")

        def meta_text(key):
            ds = f["meta/" + key]
            raw = ds[()]
            return raw[:int(ds.attrs["length"])].decode("utf-8")

        expect(meta_text("config") == open(config_path).read(), "meta/config")
        expect(meta_text("data_position") == DATA_POSITION, "meta/data_position")
        rng = bytes(f["meta/rng_state"][()])
        expect(rng == SEED.to_bytes(8, "little"), f"meta/rng_state {rng.hex()}")
        crcs = json.loads(meta_text("tensor_crc32c"))

        tensors = {}
        f.visititems(lambda name, obj: tensors.__setitem__(name, obj[()])
                     if isinstance(obj, h5py.Dataset) and not name.startswith("meta/") else None)
        steps = tensors.pop("optim/steps")
        params = {n: v for n, v in tensors.items() if not n.startswith("optim/")}
        expect(len(params) > 8, f"{len(params)} parameters")
        expect(list(steps) == [STEP] * len(params), f"optim/steps {steps}")
        expect(set(tensors) == set(params) | {f"optim/{s}/{n}" for s in "mv" for n in params},
               "every parameter has its m and v, and nothing else is stored")
        expect(set(crcs) == set(tensors), "meta/tensor_crc32c names every f32 tensor")
        for name, values in tensors.items():
            kind, base = ("param", name)
            if name.startswith("optim/"):
                kind, base = name.split("/")[1], name.split("/", 2)[2]
            formula = {"param": param_value, "m": moment_m, "v": moment_v}[kind]
            expect(values.dtype == np.dtype("<f4"), f"{name}: dtype {values.dtype}")
            expect(text(f[name].attrs["dtype"]) == "f32", f"{name}: dtype attribute")
            expect(values.shape == params[base].shape, f"{name}: shape {values.shape}")
            want = np.array([formula(len(base), j) for j in range(values.size)], dtype="<f4")
            expect(np.array_equal(values.reshape(-1), want), f"{name}: values")
            expect(crcs[name] == crc32c(values.astype("<f4").tobytes()), f"{name}: crc32c")
    print(f"train_checkpoint.h5: {len(params)} parameters with m and v, step {STEP}: ok")


def check_safetensors(path, golden_dir):
    try:
        import torch
        from safetensors.torch import load_file
        sys.path.insert(0, golden_dir)
        import make_safetensors_golden as made
    except ImportError as e:
        print(f"tiny.safetensors: not checked ({e})")
        return
    loaded = load_file(path)
    expect(set(loaded) == set(made.TENSORS), f"tensors {sorted(loaded)}")
    for name, want in made.TENSORS.items():
        expect(loaded[name].dtype == want.dtype and torch.equal(loaded[name], want), name)
    print(f"tiny.safetensors: {len(loaded)} tensors as make_safetensors_golden.py writes them: ok")


def main():
    golden_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    check_store(os.path.join(golden_dir, "expert_store.bin"))
    check_safetensors(os.path.join(golden_dir, "tiny.safetensors"), golden_dir)
    try:
        import h5py
        import numpy as np
    except ImportError as e:
        print(f"skipped: the training checkpoint needs h5py and numpy ({e})")
        return 77
    check_checkpoint(os.path.join(golden_dir, "train_checkpoint.h5"),
                     os.path.join(golden_dir, "train_checkpoint_config.json"), np, h5py)
    print("golden files ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
