#!/usr/bin/python3
"""PyTorch's side of OnnxInit.TorchStateDictInitialisesTheImportedModel
(torch_init_test.cpp): a torchvision resnet18 state_dict, saved as
safetensors, initialises the imported resnet18.onnx.

  torch_init.py export DIR
      writes DIR/resnet18.onnx: torchvision resnet18 (10 classes, seed 0)
      exported with scripts/export_torch.py's settings, input 3x32x32
  torch_init.py loss DIR
      reads DIR/batch.safetensors ("input" [n, 3, 32, 32] F32, "labels" [n]
      I32), builds another resnet18 (seed 1) whose BatchNorm running
      statistics and affine parameters are drawn at random (so eval mode
      differs from training mode and from the ONNX file's weights), writes
      its whole state_dict to DIR/state_dict.safetensors (num_batches_tracked
      as I64, as safetensors.torch.save_file writes it) and its eval-mode
      mean cross-entropy and accuracy on the batch to DIR/torch.json.
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_reference  # noqa: E402  (export settings, safetensors reader and writer)
import safetensors_file  # noqa: E402


def resnet18(seed):
    import torch
    import torchvision
    torch.manual_seed(seed)
    return torchvision.models.resnet18(num_classes=10)


def export(d):
    import torch
    model = resnet18(0)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    torch_reference.export_torch.export(model, x, os.path.join(d, "resnet18.onnx"), 17)


def loss(d):
    import torch
    import torch.nn.functional as F
    model = resnet18(1)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(0.2 * torch.randn(n, generator=g))
                m.running_var.copy_(0.5 + torch.rand(n, generator=g))
                m.weight.copy_(0.5 + torch.rand(n, generator=g))
                m.bias.copy_(0.1 * torch.randn(n, generator=g))
                m.num_batches_tracked.fill_(7)
    safetensors_file.write_safetensors(os.path.join(d, "state_dict.safetensors"),
                                       {k: v.detach().contiguous().numpy() for k, v in model.state_dict().items()})
    batch = safetensors_file.read_safetensors(os.path.join(d, "batch.safetensors"))
    x = torch.from_numpy(np.array(batch["input"], dtype=np.float32))
    y = torch.from_numpy(np.array(batch["labels"], dtype=np.int64))
    model.eval()
    with torch.no_grad():
        logits = model(x)
        result = {"loss": float(F.cross_entropy(logits, y)),
                  "accuracy": float((logits.argmax(1) == y).float().mean()),
                  "train_mode_loss": float(F.cross_entropy(model.train()(x), y))}
    with open(os.path.join(d, "torch.json"), "w") as f:
        json.dump(result, f)
    print(f"torch_init.py: eval-mode loss {result['loss']:.7f}, accuracy {result['accuracy']:.4f} "
          f"(training mode: loss {result['train_mode_loss']:.7f}) on {len(y)} samples")


def main():
    what, d = sys.argv[1], sys.argv[2]
    import torch
    torch.set_num_threads(1)
    os.makedirs(d, exist_ok=True)
    {"export": export, "loss": loss}[what](d)


if __name__ == "__main__":
    sys.exit(main())
