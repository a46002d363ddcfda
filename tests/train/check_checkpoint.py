#!/usr/bin/python3
"""Reads a Switchyard training checkpoint with h5py (an independent HDF5 reader) and checks the
layout the model issue asks for: the config, step, RNG state and data position under meta/, every
expert under its global id as experts/layer{L}/expert{E}/{w_gate,w_up,w_down} with the configured
shapes, and the AdamW moments for every parameter. Prints "checkpoint layout ok" on success.

    check_checkpoint.py FILE.h5 STEP
"""
import json
import sys

import h5py
import numpy as np


def main():
    path, step = sys.argv[1], int(sys.argv[2])
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] in (b"switchyard-checkpoint", "switchyard-checkpoint"), f.attrs["format"]
        assert int(f.attrs["step"]) == step, (int(f.attrs["step"]), step)

        def text(key):
            raw = f["meta"][key][()]
            return raw.decode() if isinstance(raw, bytes) else bytes(raw).decode()

        config = json.loads(text("config"))
        model = config["model"]
        assert json.loads(text("data_position")), "empty data position"
        assert f["meta"]["rng_state"].shape == (8,)
        hidden, inter = model["hidden_size"], model["moe_intermediate_size"]
        shapes = {"w_gate": (inter, hidden), "w_up": (inter, hidden), "w_down": (hidden, inter)}
        layers = sorted(f["experts"].keys())
        assert len(layers) == model["num_layers"], layers
        for layer in layers:
            experts = sorted(f["experts"][layer].keys())
            assert experts == sorted(f"expert{e}" for e in range(model["num_experts"])), experts
            for e in experts:
                for w, shape in shapes.items():
                    d = f["experts"][layer][e][w]
                    assert d.shape == shape, (layer, e, w, d.shape)
                    assert np.isfinite(d[()]).all()
                    name = f"experts/{layer}/{e}/{w}"
                    for moment in ("m", "v"):
                        assert f["optim"][moment][name].shape == shape, (moment, name)
        embed = f["embed_tokens"]
        assert embed.shape[1] == hidden and embed.dtype == np.float32
        assert f["optim"]["steps"].shape[0] > 0 and (f["optim"]["steps"][()] == step).all()
    print("checkpoint layout ok")


if __name__ == "__main__":
    main()
