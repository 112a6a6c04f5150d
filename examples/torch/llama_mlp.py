"""A LLaMA-style gated MLP with its RMSNorm, written with torch.nn:
y = x + down(silu(gate(n)) * up(n)), n = RMSNorm(x).

    /usr/bin/python3 examples/torch/llama_mlp.py   # the export's report
"""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class MLP(nn.Module):
    def __init__(self, hidden=32, intermediate=48):
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act = nn.SiLU()

    def forward(self, x):
        n = self.norm(x)
        return x + self.down_proj(self.act(self.gate_proj(n)) * self.up_proj(n))


def example():
    """The module and its example inputs: batch 2, 8 tokens."""
    torch.manual_seed(0)
    model = MLP().eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
    return model, (torch.randn(2, 8, 32),)


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import tuned_gpu.torch
    print(tuned_gpu.torch.export(*example()).report)
