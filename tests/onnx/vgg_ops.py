"""A tiny PyTorch module with VGG's 7x7 adaptive average pooling, for
tests/onnx/torch_ops_test.cpp (exported by scripts/export_torch.py's
settings through tests/onnx/torch_op_reference.py).

  AdaptivePool  3x3 convolution, ReLU, AdaptiveAvgPool2d(7x7), Linear - VGG's
                features -> avgpool -> classifier at a small input: from a
                1x1 map (VGG at 32x32) each bin repeats one value; from 2x2
                or 9x9 the bins overlap. torch.onnx cannot export these
                (the output size does not divide the input's), so
                export_torch.py writes them as slices, means and concats;
                from 14x14 it exports an AveragePool of its own.
"""
import torch.nn as nn


class AdaptivePool(nn.Module):
    def __init__(self, channels=8, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((7, 7))
        self.fc = nn.Linear(channels * 49, classes)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x).relu()).flatten(1))
