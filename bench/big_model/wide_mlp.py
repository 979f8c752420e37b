"""A wide MLP for bench/big_model.sh: depth Linear(width, width) + ReLU
layers and a classifier, on flat inputs. At width 8192, depth 8 and
inputs 8192 its weights are 2.15 GB, over protobuf's 2 GB: PyTorch's
exporter writes them as ONNX external data by itself."""
import torch.nn as nn


class WideMLP(nn.Module):
    def __init__(self, width=1024, depth=8, inputs=1024, num_classes=10):
        super().__init__()
        layers, d = [], inputs
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        layers.append(nn.Linear(d, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x.flatten(1))
