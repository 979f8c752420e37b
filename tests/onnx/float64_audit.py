#!/usr/bin/python3
"""Ours and PyTorch's float32 gradients, each against float64, per parameter:
whether a gradient of ours that misses PyTorch's float32 by more than the
numerics test allows is a float32 rounding error of the size PyTorch's own
(the model amplifies rounding: a SiLU or sigmoid gate, a BatchNorm over few
values) or an error of ours.

tests/onnx/torch_numerics_test.cpp writes our gradients at the initial
weights (DIR/ours.safetensors) when one misses its bound; torch_reference.py
left DIR/args.json and DIR/reference.safetensors (the batch, PyTorch's
float32 gradients and their scales). This rebuilds the compared model,
computes its gradients in float64, and prints for the parameters where ours
are furthest from float64: ours against float64, PyTorch float32 against
float64 (both over the scale the test uses), and their ratio; then each
error as one vector: its cosine with the gradient, the common scale of the
whole gradient it amounts to, and what is left without it. The last line
is the worst ratio over the parameters where ours are beyond 1e-3 of
float64, and the worst PyTorch float32 error anywhere in the model.

  float64_audit.py DIR [--top K]     e.g. DIR = build/onnx_test/numerics_efficientnet_b0
"""
import argparse
import copy
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    with open(os.path.join(args.dir, "args.json")) as f:
        ref_args = argparse.Namespace(**json.load(f))
    ref = torch_reference.read_safetensors(os.path.join(args.dir, "reference.safetensors"))
    ours = {k.split(".", 1)[1]: torch.from_numpy(v.copy()).double()
            for k, v in torch_reference.read_safetensors(os.path.join(args.dir, "ours.safetensors")).items()}
    model32, _ = torch_reference.compared_model(ref_args)
    model = copy.deepcopy(model32).double().train()
    x32 = torch.from_numpy(ref["input"].copy())
    x = x32.long() if ref_args.tokens else x32.double()
    y = torch.from_numpy(ref["labels"].copy()).long()
    model.zero_grad(set_to_none=True)
    torch_reference.loss_of(model, x, y).backward()
    exact = {n: p.grad for n, p in model.named_parameters()}

    rows = []
    for name, g64 in exact.items():
        scale = float(ref[f"scale/{name}"][0])
        torch32 = torch.from_numpy(ref[f"grad/{name}"].copy()).double().reshape(g64.shape)
        mine = ours[name].reshape(g64.shape)
        e_ours = float((mine - g64).abs().max()) / scale
        e_torch = float((torch32 - g64).abs().max()) / scale
        e_between = float((mine - torch32).abs().max()) / scale
        rows.append((e_ours, e_torch, e_between, name))
    rows.sort(reverse=True)
    print(f"{'parameter':50s} {'ours-f64':>9s} {'torch32-f64':>11s} {'ratio':>6s} {'ours-torch32':>12s}")
    for e_ours, e_torch, e_between, name in rows[: args.top]:
        print(f"{name:50s} {e_ours:9.2e} {e_torch:11.2e} {e_ours / max(e_torch, 1e-30):6.2f} {e_between:12.2e}")
    # The errors as whole vectors: how much of each is a common scale of
    # the whole gradient (one scalar upstream of every parameter), and what
    # is left after removing that scale.
    flat64 = torch.cat([g.flatten() for g in exact.values()])
    for who, grads in (("ours", ours),
                       ("PyTorch float32", {n: torch.from_numpy(ref[f"grad/{n}"].copy()).double() for n in exact})):
        err = torch.cat([grads[n].flatten() for n in exact]) - flat64
        scale = float(err @ flat64 / (flat64 @ flat64))
        print(f"{who}: |error| {float(err.norm() / flat64.norm()):.2e} of |gradient|, cosine with the gradient "
              f"{float(err @ flat64 / err.norm() / flat64.norm()):.4f}: the gradient times {1 + scale:.6f}, "
              f"then {float((err - scale * flat64).norm() / flat64.norm()):.2e} of |gradient| left")
    beyond = [r for r in rows if r[0] > 1e-3]
    ratio = max((r[0] / max(r[1], 1e-30) for r in beyond), default=0.0)
    torch_worst = max(rows, key=lambda r: r[1])
    print(f"{len(beyond)} of ours beyond 1e-3 of float64, worst ratio to PyTorch float32's own error {ratio:.2f}; "
          f"ours' worst {rows[0][0]:.2e} ({rows[0][3]}), PyTorch float32's worst {torch_worst[1]:.2e} ({torch_worst[3]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
