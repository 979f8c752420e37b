#!/usr/bin/python3
"""Exports a PyTorch model to ONNX with the settings `pipedream` needs to
train it: the weights stay initializers (no constant folding), the graph is
traced in training mode (BatchNormalization with batch statistics, Dropout
active) and every size is fixed (batch and input; no dynamic axes).

  scripts/export_torch.py resnet18 -o resnet18.onnx --input 3,32,32 --classes 10
  scripts/export_torch.py scripts/torch_models/gpt_decoder.py:GPTDecoder -o gpt.onnx --tokens 32

The model is a torchvision name (resnet18, vgg11, densenet121, ...) or a
module given as file.py:Class (constructed without arguments, or with
--kwargs JSON). Adaptive average pools whose output size does not divide
the traced input's (VGG's 7x7 pool at inputs below 224x224) are exported as
slices, means and concats, which torch.onnx can write. `pipedream` applies the softmax cross-entropy loss itself:
the model must output logits, [batch, classes] or [batch, T, vocab].
"""
import argparse
import importlib.util
import json
import os
import re
import sys


def load_module(spec, kwargs):
    import torch  # noqa: F401
    if ":" in spec:
        path, cls = spec.rsplit(":", 1)
        if not os.path.isfile(path):
            sys.exit(f"export_torch.py: {path}: no such file")
        # As `python3 file.py` would: the file's own folder first on the
        # import path, so it can import its sibling modules.
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        s = importlib.util.spec_from_file_location("user_model", path)
        if s is None:
            sys.exit(f"export_torch.py: cannot load {path}")
        mod = importlib.util.module_from_spec(s)
        s.loader.exec_module(mod)
        if not hasattr(mod, cls):
            sys.exit(f"export_torch.py: {path} has no class {cls}")
        return construct(getattr(mod, cls), kwargs, f"{path}:{cls}")
    import torchvision
    if not hasattr(torchvision.models, spec):
        sys.exit(f"export_torch.py: torchvision has no model '{spec}' (or give file.py:Class)")
    if spec.startswith("inception"):
        kwargs.setdefault("aux_logits", False)
        kwargs.setdefault("init_weights", True)
    return construct(getattr(torchvision.models, spec), kwargs, spec)


def construct(cls, kwargs, name):
    """cls(**kwargs); a constructor that does not take them (--classes gives
    num_classes, --kwargs the rest) exits 2 naming the arguments."""
    import inspect
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        unknown = [k for k in kwargs if k not in params]
        if unknown:
            flag = "--classes" if unknown == ["num_classes"] else "--kwargs"
            print(f"export_torch.py: {name}() takes no argument {', '.join(unknown)} (from {flag}); its arguments: "
                  f"{', '.join(params) or 'none'}", file=sys.stderr)
            sys.exit(2)
    return cls(**kwargs)


def example_input(args, model):
    import torch
    g = torch.Generator().manual_seed(args.seed)
    if args.tokens:
        vocab = getattr(model, "vocab", 256)
        return torch.randint(0, vocab, (args.batch, args.tokens), generator=g)
    shape = [int(v) for v in args.input.split(",")]
    return torch.randn([args.batch] + shape, generator=g)


def fixed_adaptive_pool(in_hw, out_hw):
    """torch.nn.AdaptiveAvgPool2d for one input size, as slices, means and
    concatenations. torch.onnx exports an adaptive pool only where the output
    size divides the input's (VGG's 7x7 pooling: inputs of 224x224 and its
    multiples), and ONNX has no adaptive pool of its own. The bins are
    PyTorch's: output i of n averages input rows floor(i*N/n) to
    ceil((i+1)*N/n) (overlapping where n does not divide N, repeated where
    n > N); pooling the rows then the columns gives the same means."""
    import torch

    class FixedAdaptiveAvgPool2d(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bins = [[(i * n_in // n_out, -(-(i + 1) * n_in // n_out)) for i in range(n_out)]
                         for n_in, n_out in zip(in_hw, out_hw)]

        def forward(self, x):
            for axis, bins in zip((2, 3), self.bins):
                x = torch.cat([x.narrow(axis, a, b - a).mean(axis, keepdim=True) for a, b in bins], axis)
            return x

    return FixedAdaptiveAvgPool2d()


def make_pools_exportable(model, x):
    """Replaces (in place) each AdaptiveAvgPool2d that torch.onnx cannot
    export at this input size by fixed_adaptive_pool; returns how many."""
    import torch
    sizes = {}

    def record(module, inputs, output):  # returns None: keeps the output
        sizes[module] = (tuple(inputs[0].shape[2:]), tuple(output.shape[2:]))

    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, torch.nn.AdaptiveAvgPool2d)]
    with torch.no_grad():
        model.eval()  # one forward to learn the sizes; eval keeps BatchNorm's running statistics as they are
        model(x)
    for h in hooks:
        h.remove()
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if child not in sizes:
                continue
            in_hw, out_hw = sizes[child]
            if out_hw != (1, 1) and any(n % m for n, m in zip(in_hw, out_hw)):
                setattr(parent, name, fixed_adaptive_pool(in_hw, out_hw))
                replaced += 1
    return replaced


def set_dropout(model, p):
    """Sets every Dropout's p, nn.MultiheadAttention's dropout, and torchvision's StochasticDepth's (which
    drops whole residual branches with Bernoulli draws that PyTorch 1.13
    cannot export in training mode; p = 0 exports it as the identity)."""
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = p
        if isinstance(m, torch.nn.MultiheadAttention):  # its attention dropout is a float, not a module
            m.dropout = p


def blocking_op(model, x, error):
    """Where the op that PyTorch's exporter refused (`error` names it, e.g.
    aten::i0) is called in the model: its line of source and module, found
    in a trace of the model; None when the message names no operator."""
    import torch
    m = re.search(r"operator '?([A-Za-z_][\w:.]*)'?", str(error))
    if not m:
        return None
    op = m.group(1)
    where = ""
    try:
        graph = torch.jit.trace(model, (x,), check_trace=False).inlined_graph
        for node in graph.nodes():
            if node.kind() == op:
                src = node.sourceRange().strip().splitlines()
                scope = node.scopeName()
                where = (f" in module {scope}" if scope else "") + (f" at {src[0]}" if src else "")
                break
    except Exception:  # the trace is a best effort: the op's name is the message
        pass
    return f"{op}{where}"


class ExportError(Exception):
    pass


def export(model, x, path, opset):
    """Exports `model` traced on `x`. Adaptive pools that torch.onnx cannot
    export at this size are replaced in `model` first (make_pools_exportable)."""
    import warnings
    import torch
    make_pools_exportable(model, x)
    model.train()
    # The trace's notes on removed in-place BatchNorm counters and Python
    # constants are expected with fixed sizes; keep the output readable.
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    try:
        torch.onnx.export(model, (x,), path, opset_version=opset, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING, input_names=["input"],
                          output_names=["logits"], export_params=True, keep_initializers_as_inputs=False)
    except Exception as e:  # torch.onnx raises several types (UnsupportedOperatorError, RuntimeError, SymbolicValueError)
        op = blocking_op(model, x, e)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "Bernoulli" in str(e) and any(type(m).__name__ == "StochasticDepth" and m.p > 0 for m in model.modules()):
            raise ExportError(f"PyTorch {torch.__version__} cannot export StochasticDepth's Bernoulli draws in "
                              f"training mode; export with --dropout 0 (stochastic depth off)") from e
        if op:
            raise ExportError(f"PyTorch {torch.__version__} cannot export {op} to ONNX opset {opset} "
                              f"({first}); rewrite that call with supported ops, or export with a newer PyTorch") from e
        raise ExportError(f"PyTorch {torch.__version__}'s exporter failed: {first}") from e


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="torchvision model name, or file.py:Class")
    ap.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    ap.add_argument("--batch", type=int, default=4, help="batch size traced into the graph (pipedream runs any batch)")
    ap.add_argument("--input", default="3,32,32", help="per-sample input shape, e.g. 3,64,64")
    ap.add_argument("--tokens", type=int, default=0, help="token input of this length (language models)")
    ap.add_argument("--classes", type=int, default=0, help="num_classes for a torchvision model")
    ap.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the model's constructor")
    ap.add_argument("--opset", type=int, default=17, choices=range(13, 18),
                    help="ONNX opset 13-17 (BatchNormalization in training mode needs 14; 17 keeps LayerNormalization one op)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    ap.add_argument("--dropout", type=float, default=None,
                    help="set every Dropout's, MultiheadAttention's and StochasticDepth's p (0 for exact comparisons)")
    ap.add_argument("--external-data", action="store_true",
                    help="keep the weights in OUTPUT.data beside the .onnx file (ONNX external data), as PyTorch "
                         "does by itself for models over 2 GB; pipedream reads them by byte range")
    args = ap.parse_args()

    import torch
    torch.manual_seed(args.seed)
    kwargs = json.loads(args.kwargs)
    if args.classes:
        kwargs["num_classes"] = args.classes
    model = load_module(args.model, kwargs)
    if args.dropout is not None:
        set_dropout(model, args.dropout)
    x = example_input(args, model)
    try:
        export(model, x, args.output, args.opset)
    except ExportError as e:
        print(f"export_torch.py: {e}", file=sys.stderr)
        sys.exit(2)
    if args.external_data:
        to_external_data(args.output)
    n = sum(p.numel() for p in model.parameters())
    print(f"export_torch.py: wrote {args.output} ({n} parameters, input {list(x.shape)}, opset {args.opset})")


def to_external_data(path):
    """Moves every initializer of 1 KiB or more into PATH.data (one file).

    A model PyTorch already wrote with external data (over 2 GB) is loaded
    with its data and written back into one file the same way."""
    import os
    import onnx
    model = onnx.load(path, load_external_data=True)
    location = os.path.basename(path) + ".data"
    for stale in [os.path.join(os.path.dirname(path) or ".", location)]:
        if os.path.exists(stale):
            os.remove(stale)
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=1024)


if __name__ == "__main__":
    main()
