"""Tiny PyTorch modules made of the ops inception_v3 runs, for
tests/onnx/torch_ops_test.cpp (exported by scripts/export_torch.py's
settings through tests/onnx/torch_op_reference.py).

  Conv7x1   a 7x1 then a 1x7 convolution with inception's pads (3,0) and
            (0,3), stride 1, each followed by BatchNorm (training mode) and
            ReLU - Mixed_6*'s branch7x7_2/_3 (bias=False as torchvision's
            BasicConv2d; bias=True too, and bias without BatchNorm, whose
            batch mean cancels the bias: its gradient is zero there)
  AvgPool   3x3, stride 1, pad 1, count_include_pad (Mixed_5*/6*/7*'s
            branch_pool), then a 1x1 conv, BatchNorm and ReLU
  MaxPool   3x3, stride 2 (the stem and Mixed_6a/7a), then a 1x1 conv,
            BatchNorm and ReLU
  MixedC    torchvision's InceptionC (Mixed_6e's block) as it is

The output is flattened to [batch, features] (the import wants logits).
"""
import torch.nn as nn
import torch.nn.functional as F


class _Basic(nn.Module):
    def __init__(self, cin, cout, bias=False, bn=True, **kw):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=bias, **kw)
        self.bn = nn.BatchNorm2d(cout, eps=0.001) if bn else nn.Identity()

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Conv7x1(nn.Module):
    def __init__(self, channels=8, bias=False, bn=True):
        super().__init__()
        self.a = _Basic(channels, channels, bias=bias, bn=bn, kernel_size=(7, 1), padding=(3, 0))
        self.b = _Basic(channels, channels, bias=bias, bn=bn, kernel_size=(1, 7), padding=(0, 3))

    def forward(self, x):
        return self.b(self.a(x)).flatten(1)


class AvgPool(nn.Module):
    def __init__(self, channels=8):
        super().__init__()
        self.c = _Basic(channels, channels, kernel_size=1)

    def forward(self, x):
        return self.c(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)).flatten(1)


class MaxPool(nn.Module):
    def __init__(self, channels=8):
        super().__init__()
        self.c = _Basic(channels, channels, kernel_size=1)

    def forward(self, x):
        return self.c(F.max_pool2d(x, kernel_size=3, stride=2)).flatten(1)


class MixedC(nn.Module):
    def __init__(self, channels=768, c7=160):
        super().__init__()
        from torchvision.models.inception import InceptionC
        self.block = InceptionC(channels, c7)
        for m in self.modules():  # inception_v3's init_weights
            if isinstance(m, nn.Conv2d):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.1, a=-2, b=2)

    def forward(self, x):
        return self.block(x).flatten(1)
