"""Language models built the ways people write them, for the ONNX import's
zoo (onnx/README.md) and examples; each maps token ids [batch, T] to
vocabulary logits [batch, T, vocab] and has a `vocab` attribute.

  EncoderLM   nn.TransformerEncoder (batch_first, pre-LN) under a causal mask
  GPT2        GPT-2's blocks from nn.MultiheadAttention (a causal attn_mask
              buffer), exact GELU MLPs, learned positions; tie=True shares
              the token embedding with the output head as GPT-2 does
  Llama       LLaMA's blocks in plain PyTorch: RMSNorm (pow, mean, rsqrt),
              rotary position embeddings (sin/cos tables, rotate_half),
              causal attention (F.scaled_dot_product_attention where the
              PyTorch has it), a SwiGLU MLP, no biases

  scripts/export_torch.py scripts/torch_models/transformer_lm.py:GPT2 -o gpt2.onnx --tokens 32
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


class EncoderLM(nn.Module):
    def __init__(self, vocab=256, dim=64, heads=4, layers=4, context=32, dropout=0.1):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(context, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("mask", causal_mask(context), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        h = self.encoder(self.tok(ids) + self.pos[:t], self.mask[:t, :t])
        return self.head(self.norm(h))


class GPT2Block(nn.Module):
    def __init__(self, dim, heads, context, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))
        self.register_buffer("mask", causal_mask(context), persistent=False)

    def forward(self, x):
        t = x.shape[1]
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask[:t, :t], need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    def __init__(self, vocab=256, dim=64, heads=4, layers=4, context=32, dropout=0.1, tie=False):
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[GPT2Block(dim, heads, context, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        if tie:
            self.head.weight = self.wte.weight

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        h = self.drop(self.wte(ids) + self.wpe(pos))
        return self.head(self.ln_f(self.blocks(h)))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class LlamaBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin):
        n, t, d = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(n, t, self.heads, d // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + self.wo(attention(q, k, v).transpose(1, 2).reshape(n, t, d))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab=256, dim=64, heads=4, layers=4, hidden=172, base=10000.0):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([LlamaBlock(dim, heads, hidden) for _ in range(layers)])
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, hd, 2).float() / hd)), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        f = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((f, f), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        h = self.tok(ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.head(self.norm(h))
