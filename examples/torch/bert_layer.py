"""A BERT-style encoder layer written with torch.nn, as a model would be:
self-attention (query, key and value projections, scaled dot product,
softmax), output projection with residual and LayerNorm, then a GELU
MLP with residual and LayerNorm (post-norm, as BERT).

    /usr/bin/python3 examples/torch/bert_layer.py   # the export's report
"""
import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def split_heads(self, x):
        batch, seq, _ = x.size()
        return x.view(batch, seq, self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x):
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size(0), context.size(1), -1)


class EncoderLayer(nn.Module):
    def __init__(self, hidden=32, heads=2, intermediate=64):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_out = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.activation = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        attended = self.dropout(self.attention_out(self.attention(x)))
        x = self.attention_norm(x + attended)
        h = self.output(self.activation(self.intermediate(x)))
        return self.output_norm(x + self.dropout(h))


def example():
    """The module in eval mode and its example inputs: batch 2, 8 tokens."""
    torch.manual_seed(0)
    return EncoderLayer().eval(), (torch.randn(2, 8, 32),)


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import tuned_gpu.torch
    print(tuned_gpu.torch.export(*example()).report)
