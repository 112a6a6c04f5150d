"""An LSTM cell written with torch.nn (gate order i, f, g, o, as
torch.nn.LSTMCell), one step on a batch.

    /usr/bin/python3 examples/torch/lstm_cell.py   # the export's report
"""
import torch
from torch import nn


class LSTMCell(nn.Module):
    def __init__(self, input_size=16, hidden_size=16):
        super().__init__()
        self.input_to_gates = nn.Linear(input_size, 4 * hidden_size)
        self.hidden_to_gates = nn.Linear(hidden_size, 4 * hidden_size)

    def forward(self, x, h, c):
        gates = self.input_to_gates(x) + self.hidden_to_gates(h)
        i, f, g, o = gates.chunk(4, 1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        return h_new, c_new


def example():
    """The module and its example inputs: batch 2."""
    torch.manual_seed(0)
    return LSTMCell().eval(), (torch.randn(2, 16), torch.randn(2, 16), torch.randn(2, 16))


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import tuned_gpu.torch
    print(tuned_gpu.torch.export(*example()).report)
