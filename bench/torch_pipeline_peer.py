#!/usr/bin/env python3
"""Peer of `pipedream run`: the same pipeline in torch.distributed.pipelining.

Takes one of our plans and model specs, builds the same layers in PyTorch
(parameter counts are printed and must equal ours), splits them exactly as
the plan does (stage k's layers on the plan's rank for stage k), and trains
on synthetic data with PyTorch's pipeline schedules over gloo, one process
per worker and one thread each - as `pipedream run` does over MPI. Then it
runs ours and PyTorch's alternately (ABBA: ours, torch, torch, ours per
round pair) and prints JSON lines with each side's samples/s and our
throughput as a ratio against PyTorch's.

    bench/torch_pipeline_peer.py --plan P.json --model cnn --microbatches 8 \
        --batch 8 --ours 1f1b-flush --torch 1f1b [--rounds 2] [--steps 20]

A benchmark, not a dependency: it needs PyTorch 2.4+ (torch.distributed
.pipelining), e.g. in a venv: `python3 -m venv v && v/bin/pip install torch`.
Schedules (--torch): gpipe, 1f1b, interleaved-1f1b (ScheduleInterleaved1F1B),
zb (ScheduleInterleavedZeroBubble). The interleaved ones need a plan whose
workers hold several stages (as ours with --virtual-stages).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import Block as TransformerBlock  # pre-LN GPT block, as pipedream's transformer_block  # noqa: E402


class Embedding(nn.Module):
    """Token plus learned position embedding, as pipedream's embedding."""

    def __init__(self, vocab, dim, context):
        super().__init__()
        self.token, self.position = nn.Embedding(vocab, dim), nn.Embedding(context, dim)

    def forward(self, tokens):
        return self.token(tokens) + self.position(torch.arange(tokens.shape[1]))


def build_layer(spec, shape):
    """One of our layer specs as a torch module, and its per-sample output shape."""
    t = spec["type"]
    if t == "conv2d":
        k, s, p = spec["kernel"], spec.get("stride", 1), spec.get("padding", 0)
        m = nn.Conv2d(shape[0], spec["out_channels"], k, s, p, bias=spec.get("bias", True))
        h, w = ((shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1)
        return m, [spec["out_channels"], h, w]
    if t in ("maxpool2d", "avgpool2d"):
        k = spec["kernel"]
        s, p = spec.get("stride", k), spec.get("padding", 0)
        m = (nn.MaxPool2d if t == "maxpool2d" else nn.AvgPool2d)(k, s, p)
        return m, [shape[0], (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1]
    if t == "relu":
        return nn.ReLU(), shape
    if t == "gelu":
        return nn.GELU(approximate="tanh"), shape
    if t == "flatten":
        return nn.Flatten(), [math.prod(shape)]
    if t == "linear":
        return nn.Linear(shape[-1], spec["out_features"], bias=spec.get("bias", True)), shape[:-1] + [spec["out_features"]]
    if t == "layernorm":
        return nn.LayerNorm(shape[-1]), shape
    if t == "embedding":
        return Embedding(spec["vocab"], spec["dim"], shape[0]), [shape[0], spec["dim"]]
    if t == "transformer_block":
        return TransformerBlock(shape[1], spec["heads"]), shape
    raise SystemExit(f"torch_pipeline_peer: layer type {t} is not mapped to PyTorch")


def build_layers(spec):
    shape, layers = list(spec["input"]["shape"]), []
    for ls in spec["layers"]:
        m, shape = build_layer(ls, shape)
        layers.append(m)
    return layers


def stage_ranks(plan, virtual_stages=1):
    """(first layer, last layer, rank) per stage: the plan's rank, or with
    v virtual stages per worker stage k on worker k mod (stages / v), as
    our interleaved-1f1b places them."""
    stages = sorted(plan["stages"], key=lambda s: s["index"])
    for s in stages:
        if len(s["ranks"]) != 1:
            raise SystemExit("torch_pipeline_peer: replicated stages have no PyTorch pipelining peer")
    if len(stages) % virtual_stages:
        raise SystemExit(f"torch_pipeline_peer: {len(stages)} stages do not split into {virtual_stages} per worker")
    workers = len(stages) // virtual_stages
    return [(s["layers"][0], s["layers"][1], s["ranks"][0] if virtual_stages == 1 else k % workers)
            for k, s in enumerate(stages)]


class _AllWorks:
    """The works of one batch_isend_irecv, waited on together."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()


def patch_gloo_batch_p2p(schedules):
    """torch < 2.8 keeps only the last work of a batch_isend_irecv (pytorch
    issue 132644, fixed upstream by PR 152938): with gloo, which returns one
    work per operation, 1F1B then deadlocks. Wait on all of them, as the fix
    does; nothing else changes."""
    def batch_p2p(p2p_ops, desc=None):
        return _AllWorks(dist.batch_isend_irecv(p2p_ops)) if p2p_ops else None
    schedules._batch_p2p = batch_p2p


def torch_worker(rank, world, args, spec, plan, port, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed import pipelining as pp
    from torch.distributed.pipelining import schedules

    if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 8):
        patch_gloo_batch_p2p(schedules)

    torch.manual_seed(0)
    layers = build_layers(spec)
    lm = spec.get("task") == "language_model"
    classes = spec["classes"]
    sample = spec["input"]["shape"]
    mb = args.batch
    stages = stage_ranks(plan, args.virtual_stages)
    mine = [(k, a, b) for k, (a, b, r) in enumerate(stages) if r == rank]
    params = sum(p.numel() for m in layers for p in m.parameters())

    def example_input(k):
        x = torch.randint(0, classes, [mb] + sample) if lm else torch.randn([mb] + sample)
        with torch.no_grad():
            for m in layers[: stages[k][0]]:
                x = m(x)
        return x

    pstages = [pp.PipelineStage(nn.Sequential(*layers[a : b + 1]), k, len(stages), torch.device("cpu"),
                                input_args=(example_input(k),)) for k, a, b in mine]

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, classes), target.reshape(-1))

    kinds = {"gpipe": pp.ScheduleGPipe, "1f1b": pp.Schedule1F1B,
             "interleaved-1f1b": pp.ScheduleInterleaved1F1B, "zb": pp.ScheduleInterleavedZeroBubble}
    cls = kinds[args.torch]
    single = args.torch in ("gpipe", "1f1b")
    if single and len(pstages) != 1:
        raise SystemExit(f"torch_pipeline_peer: {args.torch} needs one stage per worker")
    sched = cls(pstages[0] if single else pstages, n_microbatches=args.microbatches, loss_fn=loss_fn)
    mine_params = [p for s in pstages for p in s.submod.parameters()]
    # A worker may hold only stages without parameters (ReLUs of an interleaved cnn).
    opt = torch.optim.SGD(mine_params, lr=0.01, momentum=0.9) if mine_params else None
    batch = mb * args.microbatches
    x = torch.randint(0, classes, [batch] + sample) if lm else torch.randn([batch] + sample)
    y = torch.randint(0, classes, [batch] + (sample if lm else []))
    first, last = any(k == 0 for k, _, _ in mine), any(k == len(stages) - 1 for k, _, _ in mine)
    times = []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        if opt:
            opt.zero_grad()
        kw = {"target": y} if last else {}
        if first:
            sched.step(x, **kw)
        else:
            sched.step(**kw)
        if opt:
            opt.step()
        dist.barrier()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"median_step_s": statistics.median(times), "parameters": params, "torch": torch.__version__}, f)
    dist.destroy_process_group()


def run_torch(args, spec, plan, port):
    world = len({r for _, _, r in stage_ranks(plan, args.virtual_stages)})
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        mp.spawn(torch_worker, args=(world, args, spec, plan, port, out.name), nprocs=world, join=True)
        r = json.load(open(out.name))
    r["samples_per_s"] = args.batch * args.microbatches / r["median_step_s"]
    return r


def run_ours(args):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as metrics:
        cmd = [args.pipedream, "run", "--plan", args.plan, "--model", args.model, "--data", "synthetic",
               "--schedule", args.ours, "--microbatches", str(args.microbatches),
               "--batch", str(args.batch * args.microbatches),
               "--minibatches", str(args.warmup + args.steps), "--no-eval", "--threads-per-worker", "1",
               "--metrics", metrics.name] + (["--model-options", args.model_options] if args.model_options else [])
        cmd += args.ours_args.split() if args.ours_args else []
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        summary = [json.loads(l) for l in open(metrics.name) if '"summary"' in l][-1]
    return {"samples_per_s": summary["samples_per_s"], "schedule": summary["schedule"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--model-options", default="")
    p.add_argument("--batch", type=int, default=8, help="microbatch size (ours: run --batch is the whole batch, this x --microbatches)")
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--ours", default="1f1b-flush", help="our --schedule")
    p.add_argument("--ours-args", default="", help="more arguments for our run, e.g. '--virtual-stages 2'")
    p.add_argument("--virtual-stages", type=int, default=1,
                   help="stages per worker for PyTorch's interleaved schedules (stage k on worker k mod S)")
    p.add_argument("--torch", default="1f1b", choices=["gpipe", "1f1b", "interleaved-1f1b", "zb"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2, help="ABBA pairs")
    p.add_argument("--pipedream", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "pipedream"))
    args = p.parse_args()
    # Checked before our side runs: torch.distributed.pipelining came in 2.4.
    if tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
        print(f"error: this peer needs PyTorch 2.4 or newer (torch.distributed.pipelining); "
              f"this python3 has {torch.__version__}", file=sys.stderr)
        sys.exit(2)
    spec_cmd = [args.pipedream, "models", "--model", args.model, "--spec"]
    spec = json.loads(subprocess.check_output(spec_cmd + (["--model-options", args.model_options] if args.model_options else [])))
    plan = json.load(open(args.plan))
    ours, theirs = [], []
    port = 29500 + os.getpid() % 1000
    for r in range(args.rounds):
        for side in ("ours", "torch", "torch", "ours"):
            if side == "ours":
                ours.append(run_ours(args)["samples_per_s"])
            else:
                port += 1
                res = run_torch(args, spec, plan, port)
                theirs.append(res["samples_per_s"])
    ratios = [o / t for o, t in zip(ours, theirs)]
    print(json.dumps({"suite": "torch-pipeline-peer", "model": args.model, "plan": plan.get("config"),
                      "batch": args.batch, "microbatches": args.microbatches, "ours_schedule": args.ours,
                      "torch_schedule": args.torch, "ours_samples_per_s": ours, "torch_samples_per_s": theirs,
                      "ratio_median": statistics.median(ratios), "ratios": ratios,
                      "torch_parameters": res["parameters"], "torch": res["torch"]}))


if __name__ == "__main__":
    main()
