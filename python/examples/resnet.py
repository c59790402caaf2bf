#!/usr/bin/env python3
"""A small ResNet (basic blocks, 3 stages) on random 3x32x32 images and 10 classes: the CNN of
IADeep's workload classes ("resnet"), small enough to run on a CPU. See common.py for options."""
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the examples

import torch  # noqa: E402
from torch import nn  # noqa: E402

import common  # noqa: E402


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.skip(x))


class ResNet(nn.Module):
    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stages = nn.Sequential(Block(width, width, 1), Block(width, 2 * width, 2),
                                    Block(2 * width, 4 * width, 2))
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x):
        y = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def build(batch, device):
    model = ResNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def make_batch(b):
        return [torch.randn(b, 3, 32, 32)], torch.randint(0, 10, (b,))

    return model, optimizer, make_batch, nn.functional.cross_entropy


if __name__ == "__main__":
    common.run(common.parse(__doc__, "resnet", 32), build)
