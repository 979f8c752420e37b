#!/usr/bin/python3
"""PyTorch peer of `pipedream-bench core`: the same workloads in eager PyTorch.

Same architectures (parameter counts are printed and must equal the C++
ones), same batch sizes, same step (zero grads, forward, cross-entropy,
backward, SGD lr 0.01 momentum 0.9) on synthetic data of the same shapes,
same statistic (median of the timed steps after warm-up). Prints the same
JSON lines with "suite": "torch-peer". A benchmark peer, not a dependency:
run it with Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

WORKLOADS = {"mlp": 128, "cnn": 64, "vgg-mini": 32, "gpt-mini": 8}


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)), (1, 28, 28)


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, 10)), (1, 28, 28)


def vgg_mini():
    # VGG11 at width 1/4 (round(64*0.25) = 16 ...) on 32x32x3, 256-256-10 classifier, no dropout.
    cfg = [64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0]
    layers, c_in = [], 3
    for c in cfg:
        if c == 0:
            layers.append(nn.MaxPool2d(2))
        else:
            c_out = max(1, round(c * 0.25))
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU()]
            c_in = c_out
    layers += [nn.Flatten(), nn.Linear(c_in, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)]
    return nn.Sequential(*layers), (3, 32, 32)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    """Pre-LN GPT block: x + attn(ln1(x)), then x + fc2(gelu_tanh(fc1(ln2(x))))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab=256, context=128, dim=256, depth=4, heads=4):
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.token(tokens) + self.position(torch.arange(t))
        return self.head(self.ln_f(self.blocks(x)))


def build(name):
    if name == "mlp":
        return mlp()
    if name == "cnn":
        return cnn()
    if name == "vgg-mini":
        return vgg_mini()
    return Gpt(), (128,)


def median(v):
    v, n = sorted(v), len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def run(name, batch, args):
    torch.manual_seed(args.seed)
    model, sample_shape = build(name)
    params = sum(p.numel() for p in model.parameters())
    if name == "gpt-mini":
        inputs = torch.randint(0, 256, (batch,) + sample_shape)
        labels = torch.randint(0, 256, (batch,) + sample_shape)
        classes = 256
    else:
        inputs = torch.randn((batch,) + sample_shape)
        labels = torch.randint(0, 10, (batch,))
        classes = 10
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    times, cpu_times = [], []
    loss = None
    for s in range(args.warmup + args.steps):
        c0, t0 = time.process_time(), time.perf_counter()
        opt.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, classes), labels.reshape(-1))
        loss.backward()
        opt.step()
        t1, c1 = time.perf_counter(), time.process_time()
        if s >= args.warmup:
            times.append((t1 - t0) * 1000.0)
            cpu_times.append((c1 - c0) * 1000.0)
    med = median(times)
    return {"suite": "torch-peer", "workload": name, "batch": batch, "threads": torch.get_num_threads(),
            "device": "cpu", "parameters": params, "warmup": args.warmup, "steps": args.steps,
            "median_step_ms": med, "min_step_ms": min(times),
            "median_step_cpu_ms": median(cpu_times), "samples_per_s": batch * 1000.0 / med,
            "final_loss": float(loss), "torch": torch.__version__}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workloads", default="mlp,cnn,vgg-mini,gpt-mini")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.device != "cpu":
        print(f"error: --device {args.device}: the peer compares CPU speed only", file=sys.stderr)
        return 2
    if args.threads < 1 or args.steps < 1 or args.warmup < 0:
        print("error: --threads and --steps must be at least 1, --warmup not negative", file=sys.stderr)
        return 2
    names = [w for w in args.workloads.split(",") if w]
    for w in names:
        if w not in WORKLOADS:
            print(f"error: unknown workload '{w}' (workloads: {', '.join(WORKLOADS)})", file=sys.stderr)
            return 2
    torch.set_num_threads(args.threads)
    for w in names:
        print(json.dumps(run(w, WORKLOADS[w], args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
