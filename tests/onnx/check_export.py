#!/usr/bin/env python3
"""Checks a `pipedream export` output with the `onnx` package (export_test.cpp):
the model passes onnx.checker and each initializer the safetensors file holds
(stored as "{layer}.{initializer name}") has exactly its values.

Usage: check_export.py out.onnx weights.safetensors
"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_file import read_safetensors  # noqa: E402


def main():
    model = onnx.load(sys.argv[1])
    onnx.checker.check_model(model)
    # "{layer}.{initializer name}" -> the initializer's name
    weights = {name.split(".", 1)[1]: a for name, a in read_safetensors(sys.argv[2]).items()}
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for name, want in weights.items():
        got = inits[name]
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert np.array_equal(got, want), name
    print(f"{len(weights)} initializers equal the safetensors values")


if __name__ == "__main__":
    main()
