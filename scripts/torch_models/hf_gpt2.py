"""GPT-2 in Hugging Face's layout, for the ONNX import tests: its Conv1D
layers (`x @ W + b`, W of shape [in, out], written with torch.addmm as
transformers' pytorch_utils.Conv1D is) export as Gemm with transB=0; the
attention masks with torch.where; the MLP's activation is gelu_new (the
tanh approximation). GemmForms covers the rest of Gemm: transA=1, transB=1,
alpha, beta and a scalar C."""
import math

import torch
import torch.nn as nn


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer with its weight transposed."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(3 * dim, dim)
        self.c_proj = Conv1D(dim, dim)
        self.register_buffer("bias", torch.tril(torch.ones(context, context, dtype=torch.bool)).view(1, 1, context, context))

    def split_heads(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).permute(0, 2, 1, 3)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype)
        w = torch.where(self.bias[:, :, :t, :t], w, mask_value)
        w = nn.functional.softmax(w, dim=-1)
        y = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous().view(b, t, d)
        return self.c_proj(y)


class GPT2Block(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = GPT2Attention(dim, heads, context)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = Conv1D(4 * dim, dim)
        self.c_proj = Conv1D(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(gelu_new(self.c_fc(self.ln_2(x))))


class GPT2Conv1D(nn.Module):
    """A small GPT2LMHeadModel, its head untied from the token embedding."""

    def __init__(self, vocab=64, dim=32, heads=4, layers=2, context=16):
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.h = nn.ModuleList([GPT2Block(dim, heads, context) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


class GemmForms(nn.Module):
    """Input [batch, 16], logits [batch, 10], through every Gemm attribute:
    transB=0 with a bias (Conv1D), transA=1 (the activation transposed)
    with alpha, beta and a scalar C, and transB=1 with a C broadcast as
    [1, N]. (A scalar C at the logits would get a gradient that is zero in
    exact arithmetic: softmax cross-entropy's gradient sums to zero.)"""

    def __init__(self, features=16, hidden=24, classes=10):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(features, hidden) / math.sqrt(features))
        self.b1 = nn.Parameter(torch.randn(hidden) * 0.1)
        self.w2 = nn.Parameter(torch.randn(hidden, hidden) / math.sqrt(hidden))
        self.c2 = nn.Parameter(torch.randn(1) * 0.1)
        self.w3 = nn.Parameter(torch.randn(classes, hidden) / math.sqrt(hidden))
        self.b3 = nn.Parameter(torch.randn(1, classes) * 0.1)

    def forward(self, x):
        h = torch.tanh(torch.addmm(self.b1, x, self.w1))                                 # transB=0
        z = torch.tanh(h.t())                                                             # [hidden, batch]
        h = torch.tanh(torch.addmm(self.c2, z.t(), self.w2, beta=0.5, alpha=2.0))        # transA=1, scalar C
        return torch.addmm(self.b3, h, self.w3.t())                                      # transB=1, C [1, N]
