#!/usr/bin/python3
"""PyTorch CPU eager's training step for bench/onnx_zoo.sh: the model
scripts/export_torch.py builds from the same arguments, one thread, batch
$BATCH, forward + cross-entropy + backward + SGD step; prints the median
milliseconds of 10 steps after 3."""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch

ROOT = os.environ["ROOT"]
spec = importlib.util.spec_from_file_location("export_torch", os.path.join(ROOT, "scripts", "export_torch.py"))
export_torch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(export_torch)

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--input", default="3,32,32")
ap.add_argument("--tokens", type=int, default=0)
ap.add_argument("--classes", type=int, default=0)
ap.add_argument("--kwargs", default="{}")
args = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
kwargs = json.loads(args.kwargs)
if args.classes:
    kwargs["num_classes"] = args.classes
model = export_torch.load_module(args.model, kwargs)
export_torch.set_dropout(model, 0.0)
model.train()
batch = int(os.environ.get("BATCH", "8"))
x = export_torch.example_input(argparse.Namespace(seed=1, tokens=args.tokens, batch=batch, input=args.input), model)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
times = []
for i in range(13):
    t0 = time.perf_counter()
    y = model(x)
    target = torch.zeros(y.shape[:-1], dtype=torch.long)
    loss = torch.nn.functional.cross_entropy(y.reshape(-1, y.shape[-1]), target.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i >= 3:
        times.append(time.perf_counter() - t0)
print(round(statistics.median(times) * 1000, 1))
