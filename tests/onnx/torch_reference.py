#!/usr/bin/python3
"""PyTorch's side of the ONNX numerics tests (tests/onnx/torch_numerics_test.cpp).

Builds a model, exports it with scripts/export_torch.py's settings, then on
one fixed batch records PyTorch's loss, every parameter's gradient and the
losses of 5 plain SGD steps, in a safetensors file the C++ test compares:

  input, labels          the batch
  losses [steps + 1]     loss before each step (losses[0]: the initial loss,
                         losses[steps]: after `steps` updates)
  grad/<name>            d loss / d parameter at the initial weights
  tolerance/<name>       the relative (max-abs normalised) gradient error the
                         test allows: 1e-3, or 3x PyTorch's own float32 error
                         (against float64) where that is larger - models
                         whose BatchNorms see few values per channel
                         (MobileNet, DenseNet at 64x64, batch 4) amplify
                         rounding, and no float32 code can do better there
  loss_tolerance         the same for the loss after the SGD steps

  torch_reference.py MODEL OUT_DIR [--input 3,32,32 | --tokens T] [--classes C]
"""
import argparse
import copy
import importlib.util
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("export_torch", os.path.join(HERE, "..", "..", "scripts", "export_torch.py"))
export_torch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(export_torch)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dtype = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def train(model, x, y, args):
    """Gradients at the initial weights, and the losses of `steps` SGD steps."""
    model.train()
    loss = loss_of(model, x, y)
    loss.backward()
    grads = {name: p.grad.clone().float() for name, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses = [loss.item()]
    for _ in range(args.steps):
        opt.step()
        opt.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        losses.append(loss.item())
    return grads, losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--input", default="3,32,32")
    ap.add_argument("--tokens", type=int, default=0)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)

    kwargs = {} if args.tokens or ":" in args.model else {"num_classes": args.classes}
    model = export_torch.load_module(args.model, kwargs)
    # Dropout cannot match draw for draw (different RNGs): p = 0 for the comparison.
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    reference = copy.deepcopy(model)  # the export's trace must not touch the weights we train
    ns = argparse.Namespace(seed=1, tokens=args.tokens, batch=args.batch, input=args.input)
    x = export_torch.example_input(ns, model)
    export_torch.export(model, x, os.path.join(args.out, "model.onnx"), args.opset)

    g = torch.Generator().manual_seed(2)
    if args.tokens:
        classes = reference.vocab
        y = torch.randint(0, classes, (args.batch, args.tokens), generator=g)
    else:
        y = torch.randint(0, args.classes, (args.batch,), generator=g)

    exact = copy.deepcopy(reference).double()
    grads, losses = train(reference, x, y, args)
    grads64, losses64 = train(exact, x if args.tokens else x.double(), y, args)
    out = {"input": x.to(torch.int32) if args.tokens else x, "labels": y.to(torch.int32)}
    for name, g in grads.items():
        out["grad/" + name] = g
        g64 = grads64[name]
        err32 = float((g.double() - g64).abs().max() / g64.abs().max().clamp_min(1e-300))
        out["tolerance/" + name] = torch.tensor([max(1e-3, 3 * err32)], dtype=torch.float32)
    out["losses"] = torch.tensor(losses, dtype=torch.float32)
    loss_err32 = abs(losses[-1] - losses64[-1]) / abs(losses64[-1])
    out["loss_tolerance"] = torch.tensor([max(1e-3, 3 * loss_err32)], dtype=torch.float32)
    write_safetensors(os.path.join(args.out, "reference.safetensors"), out)
    print(f"torch_reference.py: {args.model}: loss {losses[0]:.6f} -> {losses[-1]:.6f}")


if __name__ == "__main__":
    sys.exit(main())
