"""A model file that imports its sibling module blocks.py, for
tests/onnx/transformer_import_test.cpp."""
import torch.nn as nn
from blocks import Block


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.block(x))
