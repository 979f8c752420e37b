"""Small PyTorch modules with the export patterns of real transformers and
1-d models, for tests/onnx/torch_ops_test.cpp (exported with
scripts/export_torch.py's settings through tests/onnx/torch_op_reference.py).
Every module takes a float input [batch, T, E] (or [batch, C] / [batch, C, L]
for BatchNorm1d) and returns logits; dropout is 0 so PyTorch is exact.

  MHA           nn.MultiheadAttention, batch_first True or False, with an
                attn_mask (a causal mask buffer, or one built with torch.triu
                in forward), a key_padding_mask, or is_causal
  EncoderLayer  nn.TransformerEncoderLayer, norm_first either way, causal or not
  DecoderLayer  nn.TransformerDecoderLayer (memory: the input itself)
  SDPA          F.scaled_dot_product_attention where the PyTorch has it,
                else the 1.13 decomposition (Softmax(QK^T/sqrt(d) + mask) V)
  BatchNorm1d   on [batch, C] and [batch, C, L]
  LlamaBlock    RMSNorm as written (pow, mean, rsqrt), SiLU, SwiGLU, rotary
                embeddings (sin/cos tables, slices, concat, neg), causal SDPA
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


class MHA(nn.Module):
    def __init__(self, e=16, heads=4, t=6, batch_first=True, mask="none"):
        super().__init__()
        self.attn = nn.MultiheadAttention(e, heads, dropout=0.0, batch_first=batch_first)
        self.batch_first, self.mask, self.t = batch_first, mask, t
        self.register_buffer("causal", causal_mask(t), persistent=False)
        self.head = nn.Linear(e, 5)

    def forward(self, x):
        h = x if self.batch_first else x.transpose(0, 1)
        kw = {}
        if self.mask == "buffer":
            kw["attn_mask"] = self.causal
        elif self.mask == "triu":
            t = x.shape[1]
            kw["attn_mask"] = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        elif self.mask == "padding":
            # the last two keys are padding in every sample
            kw["key_padding_mask"] = (torch.arange(self.t) >= self.t - 2).unsqueeze(0).expand(x.shape[0], self.t)
        elif self.mask == "is_causal":
            kw["attn_mask"] = self.causal
            if "is_causal" in nn.MultiheadAttention.forward.__code__.co_varnames:
                kw["is_causal"] = True
        y, _ = self.attn(h, h, h, need_weights=False, **kw)
        if not self.batch_first:
            y = y.transpose(0, 1)
        return self.head(y + x).mean(1)


class EncoderLayer(nn.Module):
    def __init__(self, e=16, heads=4, t=6, norm_first=False, batch_first=True, causal=False, layers=1):
        super().__init__()
        layer = nn.TransformerEncoderLayer(e, heads, dim_feedforward=32, dropout=0.0, batch_first=batch_first,
                                           norm_first=norm_first)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if layers > 1 else layer
        self.batch_first, self.causal = batch_first, causal
        self.register_buffer("mask", causal_mask(t), persistent=False)
        self.head = nn.Linear(e, 5)

    def forward(self, x):
        h = x if self.batch_first else x.transpose(0, 1)
        h = self.enc(h, self.mask) if self.causal else self.enc(h)
        if not self.batch_first:
            h = h.transpose(0, 1)
        return self.head(h).mean(1)


class DecoderLayer(nn.Module):
    def __init__(self, e=16, heads=4, t=6, norm_first=False, batch_first=True):
        super().__init__()
        self.dec = nn.TransformerDecoderLayer(e, heads, dim_feedforward=32, dropout=0.0, batch_first=batch_first,
                                              norm_first=norm_first)
        self.batch_first = batch_first
        self.register_buffer("mask", causal_mask(t), persistent=False)
        self.mem = nn.Linear(e, e)
        self.head = nn.Linear(e, 5)

    def forward(self, x):
        h = x if self.batch_first else x.transpose(0, 1)
        h = self.dec(h, self.mem(h), tgt_mask=self.mask)
        if not self.batch_first:
            h = h.transpose(0, 1)
        return self.head(h).mean(1)


def sdpa(q, k, v, causal):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    # PyTorch 1.13 has no fused attention: what its users write.
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def sdpa_as_torch2_exports(q, k, v, causal):
    """The ops PyTorch 2.x's exporter writes for F.scaled_dot_product_attention
    (torch/onnx/symbolic_opset14.py), written out for 1.13: q and k^T each
    scaled by sqrt(scale), the causal mask as Expand of ones, Trilu (lower)
    and Where(mask == 0, -inf, 0) added to the scores."""
    scale = 1.0 / torch.sqrt(torch.tensor(q.shape[-1], dtype=torch.float32))
    s = (q * torch.sqrt(scale)) @ (k.transpose(-2, -1) * torch.sqrt(scale))
    if causal:
        t, u = q.shape[-2], k.shape[-2]
        ones = torch.ones(1).expand(t, u)
        mask = torch.tril(ones)
        s = s + torch.where(mask == 0, torch.tensor(float("-inf")), torch.tensor(0.0))
    return torch.softmax(s, dim=-1) @ v


class SDPA(nn.Module):
    """Multi-head attention through sdpa() (torch2_pattern: through
    sdpa_as_torch2_exports)."""

    def __init__(self, e=16, heads=4, causal=True, torch2_pattern=False):
        super().__init__()
        self.qkv = nn.Linear(e, 3 * e)
        self.proj = nn.Linear(e, e)
        self.heads, self.causal = heads, causal
        self.attend = sdpa_as_torch2_exports if torch2_pattern else sdpa

    def forward(self, x):
        n, t, e = x.shape
        q, k, v = self.qkv(x).split(e, dim=2)
        q, k, v = (z.view(n, t, self.heads, e // self.heads).transpose(1, 2) for z in (q, k, v))
        y = self.attend(q, k, v, self.causal).transpose(1, 2).reshape(n, t, e)
        return self.proj(y).mean(1)


class BatchNorm1d(nn.Module):
    def __init__(self, c=8, rank=2):
        super().__init__()
        self.bn = nn.BatchNorm1d(c)
        self.fc = nn.Linear(c, 5)
        self.rank = rank

    def forward(self, x):
        h = self.bn(x)
        if self.rank == 3:
            h = h.mean(2)
        return self.fc(torch.relu(h))


class RMSNorm(nn.Module):
    def __init__(self, e, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(e) + 0.1 * torch.randn(e))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Rotary(nn.Module):
    def __init__(self, d, t, base=10000.0):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.t = t

    def forward(self, q, k):
        t = q.shape[-2]
        f = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((f, f), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class LlamaBlock(nn.Module):
    def __init__(self, e=16, heads=4, t=6, hidden=24):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(e), RMSNorm(e)
        self.q, self.k, self.v, self.o = (nn.Linear(e, e, bias=False) for _ in range(4))
        self.rot = Rotary(e // heads, t)
        self.gate, self.up = nn.Linear(e, hidden, bias=False), nn.Linear(e, hidden, bias=False)
        self.down = nn.Linear(hidden, e, bias=False)
        self.head = nn.Linear(e, 5)

    def forward(self, x):
        n, t, e = x.shape
        h = self.norm1(x)
        q, k, v = (p(h).view(n, t, self.heads, e // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        q, k = self.rot(q, k)
        x = x + self.o(sdpa(q, k, v, True).transpose(1, 2).reshape(n, t, e))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return self.head(x).mean(1)


class Unexportable(nn.Module):
    """torch.special.i0, which PyTorch 1.13's ONNX exporter cannot write."""

    def __init__(self, e=16):
        super().__init__()
        self.fc = nn.Linear(e, 5)

    def forward(self, x):
        return self.fc(torch.special.i0(x)).mean(1)


class SplitsBatch(nn.Module):
    """Views [N, T, E] as [2, N*T/2, E]: the samples' rows mixed, refused."""

    def __init__(self, e=16):
        super().__init__()
        self.fc = nn.Linear(e, 5)

    def forward(self, x):
        n = x.shape[0]
        return self.fc(x.reshape(2, -1, x.shape[-1])).reshape(n, -1)


class BatchNormAfterTranspose(nn.Module):
    """BatchNorm1d on [T, N, E] (the batch moved to dimension 1): refused."""

    def __init__(self, t=6, e=16):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.fc = nn.Linear(e, 5)

    def forward(self, x):
        return self.fc(self.bn(x.transpose(0, 1)).transpose(0, 1)).mean(1)


class TiedLM(nn.Module):
    """A token embedding and an output head sharing one weight (GPT-2's
    tied embeddings): its gradient is the sum of both uses. Between them a
    causal encoder layer, or the LLaMA block's pieces (llama=True)."""

    def __init__(self, vocab=32, e=16, heads=4, t=6, llama=False):
        super().__init__()
        self.vocab = vocab
        self.emb = nn.Embedding(vocab, e)
        self.block = LlamaBlock(e, heads, t) if llama else EncoderLayer(e, heads, t, causal=True)
        self.block.head = nn.Identity()
        self.llama = llama
        self.out = nn.Linear(e, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        h = self.emb(ids)
        h = self.block.enc(h, self.block.mask) if not self.llama else self._llama(h)
        return self.out(h)

    def _llama(self, x):
        b = self.block
        n, t, e = x.shape
        h = b.norm1(x)
        q, k, v = (p(h).view(n, t, b.heads, e // b.heads).transpose(1, 2) for p in (b.q, b.k, b.v))
        q, k = b.rot(q, k)
        x = x + b.o(sdpa(q, k, v, True).transpose(1, 2).reshape(n, t, e))
        h = b.norm2(x)
        return x + b.down(F.silu(b.gate(h)) * b.up(h))


class ClassToken(nn.Module):
    """ViT's class token: a parameter expanded to the batch and concatenated
    before the tokens (an Expand whose batch is read at run time)."""

    def __init__(self, e=16):
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, e))
        self.fc = nn.Linear(e, 5)

    def forward(self, x):
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        return self.fc(torch.tanh(h)).mean(1)
