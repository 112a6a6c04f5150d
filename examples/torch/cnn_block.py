"""A small CNN block written with torch.nn: a ResNet basic block (3x3
convolutions with batch norm and ReLU, a residual), a grouped 3x3
convolution with GroupNorm and SiLU, then global average pooling by a
mean and a linear classifier.

    /usr/bin/python3 examples/torch/cnn_block.py   # the export's report
"""
import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class SmallCNN(nn.Module):
    def __init__(self, channels=4, classes=5):
        super().__init__()
        self.block = BasicBlock(channels)
        self.down = nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1, groups=2)
        self.norm = nn.GroupNorm(2, 2 * channels)
        self.act = nn.SiLU()
        self.classifier = nn.Linear(2 * channels, classes)

    def forward(self, x):
        x = self.act(self.norm(self.down(self.block(x))))
        return self.classifier(x.mean(dim=(2, 3)))


def example():
    """The module in eval mode (batch norm on its running statistics,
    made non-trivial) and its example inputs: batch 2, 4 channels, 6x6."""
    torch.manual_seed(0)
    model = SmallCNN().eval()
    with torch.no_grad():
        for bn in (model.block.bn1, model.block.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return model, (torch.randn(2, 4, 6, 6),)


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import tuned_gpu.torch
    print(tuned_gpu.torch.export(*example()).report)
