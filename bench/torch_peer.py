#!/usr/bin/python3
"""PyTorch peer of `pipedream-bench core`: the same workloads in eager PyTorch.

Same architectures (parameter counts are printed and must equal the C++
ones), same batch sizes, same step (zero grads, forward, cross-entropy,
backward, SGD lr 0.01 momentum 0.9) on synthetic data of the same shapes,
same statistic (median of the timed steps after warm-up). Prints the same
JSON lines with "suite": "torch-peer". A benchmark peer, not a dependency:
run it with Debian's python3-torch (/usr/bin/python3).

--device cuda runs the same step on the GPU (a PyTorch built with CUDA)
and synchronises before each clock read, as `pipedream-bench core --device
cuda` does; TF32 is off for both matmuls and cuDNN convolutions, matching
pipedream's FP32 default. --batch overrides every workload's batch size;
a workload written NAME:B (gpt-mini:64) runs at batch B.

--amp times what a PyTorch user runs for speed instead (the "amp" recipe;
the default is "fp32", the same maths as pipedream's FP32): bf16 autocast
around forward and loss, F.scaled_dot_product_attention(is_causal=True)
for the GPT attention instead of the written-out softmax(QK^T)V, and, for
convolutions, channels_last tensors, TF32 and cuDNN's autotuner
(cudnn.benchmark). It needs PyTorch >= 2.0 (SDPA). Every line says which
recipe ran ("recipe", with "allow_tf32", "channels_last", "sdpa").
--allow-tf32 (GPU, without --amp) is the "tf32" recipe: the fp32 maths
with TF32 matmuls and cuDNN convolutions, the peer of pipedream's
--allow-tf32.

The zoo's "gpt" (GPT-2 size: vocab 50304, 1024 tokens, width 768, 12
blocks of 12 heads, 163M parameters) is a workload too, at batch 8.

--torchvision NAME --input C,H,W --classes N --batch B times the same step
on a torchvision model (num_classes=N) instead of the workloads: the peer
of `pipedream-bench core --model` on that model exported to ONNX
(scripts/export_torch.py) or on the zoo's equivalent (bench/onnx_speed.sh).

--op-times then runs --steps more steps under torch.profiler and prints,
after each workload's line, one "suite": "torch_peer_ops" line per
operator (aten::mm, aten::_flash_attention_backward, ...) with its calls
and its own device time per step (CUDA kernel time on a GPU, CPU time on
the CPU; a kernel counts in the operator that launched it): the peer of
`pipedream-bench core --op-times`.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

WORKLOADS = {"mlp": 128, "cnn": 64, "vgg-mini": 32, "gpt-mini": 8, "resnet50": 64, "gpt": 8}
# The zoo's GPTs (models/zoo.cpp gpt_spec): vocab, context, width, depth, heads.
GPT_DIMS = {"gpt-mini": (256, 128, 256, 4, 4), "gpt": (50304, 1024, 768, 12, 12)}
CONV_WORKLOADS = {"cnn", "vgg-mini", "resnet50"}


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


class Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 bottleneck (stride on the 3x3 conv), as pipedream's resnet_bottleneck_block."""

    def __init__(self, c_in, mid, stride):
        super().__init__()
        c_out = mid * 4
        self.main = nn.Sequential(nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                  nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(mid),
                                  nn.ReLU(), nn.Conv2d(mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        return F.relu(self.main(x) + self.shortcut(x))


def resnet50():
    layers = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, stride=2, padding=1)]
    c_in = 64
    for s, blocks in enumerate([3, 4, 6, 3]):
        mid = 64 << s
        for b in range(blocks):
            layers.append(Bottleneck(c_in, mid, 2 if (s > 0 and b == 0) else 1))
            c_in = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, 1000)]
    return nn.Sequential(*layers), (3, 224, 224)


class CausalSelfAttention(nn.Module):
    """sdpa: PyTorch's fused attention (flash / memory-efficient kernels);
    otherwise the written-out maths pipedream's FP32 computes."""

    def __init__(self, dim, heads, sdpa=False):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    """Pre-LN GPT block: x + attn(ln1(x)), then x + fc2(gelu_tanh(fc1(ln2(x))))."""

    def __init__(self, dim, heads, sdpa=False):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, sdpa)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab=256, context=128, dim=256, depth=4, heads=4, sdpa=False):
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, sdpa) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.token(tokens) + self.position(torch.arange(t, device=tokens.device))
        return self.head(self.ln_f(self.blocks(x)))


def build(name, sdpa=False):
    if name in GPT_DIMS:
        vocab, context, dim, depth, heads = GPT_DIMS[name]
        return Gpt(vocab, context, dim, depth, heads, sdpa), (context,)
    if name == "mlp":
        return mlp()
    if name == "cnn":
        return cnn()
    if name == "vgg-mini":
        return vgg_mini()
    return resnet50()


def median(v):
    v, n = sorted(v), len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def torchvision_model(args):
    import torchvision
    if not hasattr(torchvision.models, args.torchvision):
        raise SystemExit(f"error: torchvision has no model '{args.torchvision}'")
    kwargs = {"num_classes": args.classes}
    if args.torchvision.startswith("inception"):
        kwargs.update(aux_logits=False, init_weights=True)
    model = getattr(torchvision.models, args.torchvision)(**kwargs)
    return model, tuple(int(v) for v in args.input.split(","))


def recipe_of(name, args):
    """What the step runs with: the fp32 recipe is pipedream's maths (tf32:
    the same with TF32 matmuls and convolutions); amp is bf16 autocast, SDPA
    for attention, channels_last + TF32 for convolutions."""
    amp, gpu = args.amp, args.device.startswith("cuda")
    conv = args.torchvision != "" or name in CONV_WORKLOADS
    return {"recipe": "amp" if amp else ("tf32" if args.allow_tf32 else "fp32"),
            "autocast": "bf16" if amp else "none", "sdpa": amp and name in GPT_DIMS,
            "channels_last": amp and conv, "allow_tf32": (amp or args.allow_tf32) and gpu,
            "cudnn_benchmark": amp and conv and gpu}


def set_backend_flags(recipe):
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = recipe["allow_tf32"]
        torch.backends.cudnn.allow_tf32 = recipe["allow_tf32"]
        torch.backends.cudnn.benchmark = recipe["cudnn_benchmark"]


def run(name, batch, args):
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    recipe = recipe_of(name, args)
    set_backend_flags(recipe)
    model, sample_shape = torchvision_model(args) if args.torchvision else build(name, recipe["sdpa"])
    model = model.to(dev)
    params = sum(p.numel() for p in model.parameters())
    if args.torchvision:
        classes = args.classes
        inputs = torch.randn((batch,) + sample_shape)
        labels = torch.randint(0, classes, (batch,))
    elif name in GPT_DIMS:
        classes = GPT_DIMS[name][0]
        inputs = torch.randint(0, classes, (batch,) + sample_shape)
        labels = torch.randint(0, classes, (batch,) + sample_shape)
    else:
        classes = 1000 if name == "resnet50" else 10
        inputs = torch.randn((batch,) + sample_shape)
        labels = torch.randint(0, classes, (batch,))
    # Inputs live on the device (as in pipedream-bench core); labels come
    # from the host every step, as a data loader delivers them.
    inputs = inputs.to(dev)
    if recipe["channels_last"]:
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    times, cpu_times = [], []

    def step():
        opt.zero_grad()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.amp):
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, classes), labels.to(dev, non_blocking=False).reshape(-1))
        loss.backward()
        opt.step()
        return loss

    for s in range(args.warmup + args.steps):
        sync()
        c0, t0 = time.process_time(), time.perf_counter()
        loss = step()
        sync()
        t1, c1 = time.perf_counter(), time.process_time()
        if s >= args.warmup:
            times.append((t1 - t0) * 1000.0)
            cpu_times.append((c1 - c0) * 1000.0)
    med = median(times)
    line = {"suite": "torch-peer", "workload": name, "batch": batch, "threads": torch.get_num_threads(),
            "device": args.device, "parameters": params, "warmup": args.warmup, "steps": args.steps,
            "median_step_ms": med, "min_step_ms": min(times),
            "median_step_cpu_ms": median(cpu_times), "samples_per_s": batch * 1000.0 / med,
            "final_loss": float(loss), "torch": torch.__version__}
    if name in GPT_DIMS:
        line["tokens_per_s"] = line["samples_per_s"] * sample_shape[0]
    if dev.type == "cuda":
        line["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    line.update(recipe)
    if not args.op_times:
        return [line]
    return [line] + op_time_lines(line, step, sync, args)


def self_time_us(event, device):
    """An averaged profiler event's own time (its children's excluded) on
    the device: CUDA kernel time on a GPU (named self_device_time_total
    from PyTorch 2.4, self_cuda_time_total before), CPU time on the CPU."""
    if device != "cuda":
        return event.self_cpu_time_total
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, name):
            return getattr(event, name)
    return 0.0


def op_time_lines(line, step, sync, args):
    """--op-times: args.steps more steps under torch.profiler, one line per
    operator with its own device time per step (kernels are counted in the
    operator that launched them, so the lines add up to the device's busy
    time without counting a kernel twice), largest first, as
    `pipedream-bench core --op-times` prints per DeviceOps entry."""
    from torch.profiler import ProfilerActivity, profile
    device = "cuda" if args.device.startswith("cuda") else "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync()
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            step()
        sync()
    ops = []
    for event in prof.key_averages():
        # Kernels appear twice: as their own events (device_type CUDA) and
        # inside their operator's self device time. Keep the operators.
        if str(event.device_type).endswith("CPU"):
            us = self_time_us(event, device)
            if us > 0:
                ops.append((event.key, event.count, us))
    total_us = sum(us for _, _, us in ops) or 1.0
    out = []
    for key, count, us in sorted(ops, key=lambda o: -o[2]):
        out.append({"suite": "torch_peer_ops", "workload": line["workload"], "batch": line["batch"],
                    "device": args.device, "recipe": line["recipe"], "op": key,
                    "calls_per_step": count / args.steps, "ms_per_step": us / 1000.0 / args.steps,
                    "share_of_ops": us / total_us, "median_step_ms": line["median_step_ms"],
                    "torch": torch.__version__})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workloads", default="mlp,cnn,vgg-mini,gpt-mini",
                   help=f"comma-separated NAME or NAME:BATCH; names: {', '.join(WORKLOADS)}")
    p.add_argument("--amp", action="store_true",
                   help="PyTorch's fast recipe: bf16 autocast, SDPA attention, channels_last + TF32 convolutions")
    p.add_argument("--allow-tf32", action="store_true",
                   help="the fp32 recipe with TF32 matmuls and cuDNN convolutions (the peer of --allow-tf32)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=0, help="batch size for every workload (default: each one's own)")
    p.add_argument("--torchvision", default="", metavar="NAME",
                   help="time this torchvision model instead of the workloads (needs --batch)")
    p.add_argument("--input", default="3,224,224", help="--torchvision: per-sample input shape C,H,W")
    p.add_argument("--classes", type=int, default=1000, help="--torchvision: num_classes")
    p.add_argument("--op-times", action="store_true",
                   help="then --steps more steps under torch.profiler: one \"torch_peer_ops\" line per operator "
                        "with its own device time per step (the peer of pipedream-bench core --op-times)")
    args = p.parse_args()
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print(f"error: --device {args.device}: this PyTorch ({torch.__version__}) has no usable CUDA "
                  "(built without it, or no GPU visible)", file=sys.stderr)
            return 2
    elif args.device != "cpu":
        print(f"error: --device {args.device}: use cpu, cuda or cuda:N", file=sys.stderr)
        return 2
    if args.batch < 0:
        print("error: --batch must be positive (or 0 for each workload's own)", file=sys.stderr)
        return 2
    if args.threads < 1 or args.steps < 1 or args.warmup < 0:
        print("error: --threads and --steps must be at least 1, --warmup not negative", file=sys.stderr)
        return 2
    if args.allow_tf32 and (args.amp or not args.device.startswith("cuda")):
        print("error: --allow-tf32 applies to the fp32 recipe on --device cuda only (--amp turns TF32 on itself)",
              file=sys.stderr)
        return 2
    if args.amp and not hasattr(F, "scaled_dot_product_attention"):
        print(f"error: --amp needs torch.nn.functional.scaled_dot_product_attention (PyTorch >= 2.0); this "
              f"PyTorch is {torch.__version__}: run without --amp for the fp32 recipe", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    if args.torchvision:
        if args.batch < 1 or args.classes < 1:
            print("error: --torchvision needs --batch B and --classes N positive", file=sys.stderr)
            return 2
        lines = run(args.torchvision, args.batch, args)
        lines[0]["input"] = args.input
        lines[0]["classes"] = args.classes
        for line in lines:
            print(json.dumps(line), flush=True)
        return 0
    selected = []
    for item in (w for w in args.workloads.split(",") if w):
        name, _, batch = item.partition(":")
        if name not in WORKLOADS:
            print(f"error: unknown workload '{name}' (workloads: {', '.join(WORKLOADS)})", file=sys.stderr)
            return 2
        if batch and not (batch.isdigit() and int(batch) > 0):
            print(f"error: --workloads {item}: the batch after ':' must be a positive integer", file=sys.stderr)
            return 2
        selected.append((name, int(batch) if batch else (args.batch or WORKLOADS[name])))
    if not selected:
        print("error: --workloads is empty", file=sys.stderr)
        return 2
    for name, batch in selected:
        for line in run(name, batch, args):
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
