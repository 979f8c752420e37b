#!/usr/bin/python3
"""PyTorch's side of tests/onnx/torch_ops_test.cpp: exports a small module
(file.py:Class, scripts/export_torch.py's settings: training mode, weights
as initializers) and records, in float64 from the same float32 weights and
input, its output, the gradient of the input and of every parameter for a
fixed upstream gradient dy; also PyTorch's own float32 errors against that.

  input, dy           float32
  y, dx, grad/<name>  float64 results, stored as float32
  err32/y, err32/dx, err32/<name>
                      PyTorch float32's max |f32 - f64| / max |f64| (a
                      gradient zero in exact arithmetic: / its module's largest)

  torch_op_reference.py FILE.py:CLASS OUT_DIR (--input C,H,W | --tokens T) [--batch N] [--kwargs JSON]

Token ids (--tokens) are stored as float; their gradient dx as zeros.
"""
import argparse
import copy
import importlib.util
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


export_torch = load("export_torch", os.path.join(HERE, "..", "..", "scripts", "export_torch.py"))
torch_reference = load("torch_reference", os.path.join(HERE, "torch_reference.py"))


def run(model, x, dy):
    model.train()
    tokens = not x.is_floating_point()
    x = x.clone() if tokens else x.clone().requires_grad_(True)
    y = model(x)
    y.backward(dy)
    dx = torch.zeros(x.shape, dtype=dy.dtype) if tokens else x.grad  # token ids have no gradient
    return y.detach(), dx, {n: p.grad for n, p in model.named_parameters()}


def rel(a, b, scale=None):
    scale = float(b.abs().max()) if scale is None else scale
    return torch.tensor([float((a.double() - b).abs().max()) / max(scale, 1e-300)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--input", default="")
    ap.add_argument("--tokens", type=int, default=0, help="token input of this length (a language model)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--kwargs", default="{}")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    model = export_torch.load_module(args.model, json.loads(args.kwargs))
    reference = copy.deepcopy(model)
    x = export_torch.example_input(argparse.Namespace(seed=1, tokens=args.tokens, batch=args.batch, input=args.input), model)
    export_torch.export(model, x, os.path.join(args.out, "model.onnx"), 17)
    y_shape = reference(x).shape
    dy = torch.randn(y_shape, generator=torch.Generator().manual_seed(3))
    y32, dx32, g32 = run(copy.deepcopy(reference), x, dy)
    y64, dx64, g64 = run(copy.deepcopy(reference).double(), x if args.tokens else x.double(), dy.double())
    out = {"input": x.float(), "dy": dy, "y": y64.float(), "dx": dx64.float(),
           "err32/y": rel(y32, y64), "err32/dx": rel(dx32, dx64)}
    module_max = {}
    for n, g in g64.items():
        module_max[n.rsplit(".", 1)[0]] = max(module_max.get(n.rsplit(".", 1)[0], 0.0), float(g.abs().max()))
    for n, g in g64.items():
        scale = float(g.abs().max())
        if scale < 1e-6 * module_max[n.rsplit(".", 1)[0]]:  # zero in exact arithmetic (a bias before BatchNorm)
            scale = module_max[n.rsplit(".", 1)[0]]
        out[f"grad/{n}"] = g.float()
        out[f"err32/{n}"] = rel(g32[n], g, scale)
    out = {k: v.float() for k, v in out.items()}
    torch_reference.write_safetensors(os.path.join(args.out, "reference.safetensors"), out)
    print(f"torch_op_reference.py: {args.model} {args.kwargs}: output {list(y64.shape)}")


if __name__ == "__main__":
    sys.exit(main())
