"""A module the model file next to it imports (scripts/export_torch.py puts
the model file's folder on the import path)."""
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, e):
        super().__init__()
        self.fc = nn.Linear(e, e)

    def forward(self, x):
        return x + self.fc(x).relu()
