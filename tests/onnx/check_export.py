#!/usr/bin/env python3
"""Checks a `pipedream export` output with the `onnx` package (export_test.cpp):
the model passes onnx.checker and each initializer the safetensors file holds
(stored as "{layer}.{initializer name}") has exactly its values.

Usage: check_export.py out.onnx weights.safetensors
"""
import json
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load_safetensors(path):
    """name without the layer prefix -> array (F32 only, as --save writes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        out[name.split(".", 1)[1]] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
    return out


def main():
    model = onnx.load(sys.argv[1])
    onnx.checker.check_model(model)
    weights = load_safetensors(sys.argv[2])
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for name, want in weights.items():
        got = inits[name]
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert np.array_equal(got, want), name
    print(f"{len(weights)} initializers equal the safetensors values")


if __name__ == "__main__":
    main()
