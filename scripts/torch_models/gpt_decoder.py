"""A small GPT-style decoder for the ONNX import tests and examples:
token + position embeddings (Gather), pre-LN blocks of causal multi-head
self-attention (MatMul, Split, Reshape, Transpose, Softmax, a causal mask
applied with Where) and a GELU MLP (Erf), Dropout, a final LayerNorm and
a linear head to vocabulary logits [batch, T, vocab]."""
import math

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim, heads, context, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        a = self.drop(torch.softmax(scores, dim=-1))
        y = (a @ v).transpose(1, 2).reshape(b, t, d)
        return self.drop(self.proj(y))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        h = nn.functional.gelu(self.fc(self.ln2(x)))  # exact (Erf) GELU
        return x + self.drop(self.out(h))


class GPTDecoder(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, layers=2, context=16, dropout=0.1):
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(dim, heads, context, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))
