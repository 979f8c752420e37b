#!/usr/bin/python3
"""PyTorch's side of OnnxExport.TorchReproducesOutputs (torch_roundtrip_test.cpp):
a model trained by `pipedream train` and written back by `pipedream export`
is loaded into the original PyTorch module and gives our logits.

  torch_roundtrip.py export MODEL DIR [--input 3,32,32 | --tokens T] [--classes C]
      writes DIR/in.onnx (scripts/export_torch.py's settings, Dropout p = 0)
      and DIR/batch.safetensors (the batch both sides run: "input")
  torch_roundtrip.py compare MODEL DIR [same options]
      reads DIR/out.onnx (the export of the trained weights) and
      DIR/ours.safetensors ("eval", "train": our logits on the batch, with
      BatchNorm on the running statistics and on the batch's), loads every
      float initializer of out.onnx into the module's state_dict by name -
      an initializer that is not in the state_dict, or a float parameter or
      buffer that is not an initializer, is an error - and checks PyTorch's
      logits in eval and in training mode against ours (max abs difference
      <= 1e-5 times max(1, max-abs of the logits): float32 logits of size
      10 are 1e-6 apart in their last bit; printed). Also checks that the exported weights are not
      in.onnx's (training changed them), so the comparison is of trained
      weights.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_reference  # noqa: E402  (export settings, safetensors reader and writer)

TOLERANCE = 1e-5


def build(args):
    """The module at its initial weights, Dropout p = 0: torch_reference.py's, untrained."""
    return torch_reference.compared_model(argparse.Namespace(**vars(args), kwargs="{}", pretrain=0))[0]


def export(args):
    import argparse as ap
    import torch
    model = build(args)
    ns = ap.Namespace(seed=1, tokens=args.tokens, batch=args.batch, input=args.input)
    x = torch_reference.export_torch.example_input(ns, model)
    torch_reference.export_torch.export(model, x, os.path.join(args.dir, "in.onnx"), args.opset)
    torch_reference.write_safetensors(os.path.join(args.dir, "batch.safetensors"),
                                      {"input": x.to(torch.int32) if args.tokens else x})


def initializers(path):
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def compare(args):
    import torch
    model = build(args)
    trained = initializers(os.path.join(args.dir, "out.onnx"))
    initial = initializers(os.path.join(args.dir, "in.onnx"))
    state = model.state_dict()
    floats = {n: a for n, a in trained.items() if a.dtype in (np.float32, np.float64)}
    unknown = sorted(n for n in floats if n not in state)
    if unknown:
        sys.exit(f"torch_roundtrip.py: initializers that are not in the state_dict: {unknown}")
    missing = sorted(n for n, t in state.items() if t.is_floating_point() and n not in floats)
    if missing:
        sys.exit(f"torch_roundtrip.py: float parameters/buffers that the export lacks: {missing}")
    changed = 0
    for name, a in floats.items():
        if tuple(a.shape) != tuple(state[name].shape):
            sys.exit(f"torch_roundtrip.py: {name} is {list(a.shape)} in the export, {list(state[name].shape)} in PyTorch")
        changed += not np.array_equal(a, initial[name])
        state[name] = torch.from_numpy(np.array(a, dtype=np.float32))
    model.load_state_dict(state)
    # Not loaded (no initializer): integer buffers, BatchNorm's num_batches_tracked
    # (unused: momentum is set) and the GPT's boolean causal masks (constants of the graph).
    skipped = sorted(n for n, t in state.items() if not t.is_floating_point())
    print(f"loaded {len(floats)} initializers; {changed} differ from in.onnx's; not floats, kept: {len(skipped)}")
    if changed < len(floats) // 2:
        sys.exit(f"torch_roundtrip.py: only {changed} of {len(floats)} initializers changed in training")

    batch = torch_reference.read_safetensors(os.path.join(args.dir, "batch.safetensors"))["input"]
    x = torch.from_numpy(np.array(batch, dtype=np.int64 if args.tokens else np.float32))
    ours = torch_reference.read_safetensors(os.path.join(args.dir, "ours.safetensors"))
    worst = 0.0
    with torch.no_grad():
        for mode in ("eval", "train"):
            model.train(mode == "train")
            got = model(x).numpy()
            want = ours[mode]
            if got.shape != want.shape:
                sys.exit(f"torch_roundtrip.py: {mode}: PyTorch's logits are {got.shape}, ours {want.shape}")
            diff = float(np.abs(got - want).max())
            scale = max(1.0, float(np.abs(want).max()))
            print(f"{os.path.basename(args.model)}: {mode} mode: max |torch - ours| {diff:.3e} over logits "
                  f"of max-abs {float(np.abs(want).max()):.3f} ({diff / scale:.2e} of max(1, that))")
            worst = max(worst, diff / scale)
    if not worst <= TOLERANCE:
        sys.exit(f"torch_roundtrip.py: difference {worst:.3e} of max(1, max-abs logits) > {TOLERANCE}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["export", "compare"])
    ap.add_argument("model")
    ap.add_argument("dir")
    ap.add_argument("--input", default="3,32,32")
    ap.add_argument("--tokens", type=int, default=0)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    os.makedirs(args.dir, exist_ok=True)
    export(args) if args.what == "export" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
