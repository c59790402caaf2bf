#!/usr/bin/env python3
"""An LSTM language model (2 layers) on random token sequences: IADeep's "lstm" class, small
enough to run on a CPU. See common.py for options."""
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the examples

import torch  # noqa: E402
from torch import nn  # noqa: E402

import common  # noqa: E402

VOCAB, EMBED, HIDDEN, SEQ = 1000, 32, 64, 20


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN, num_layers=2, batch_first=True)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        y, _ = self.lstm(self.embed(tokens))
        return self.out(y).reshape(-1, VOCAB)


def build(batch, device):
    model = LanguageModel().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def make_batch(b):
        tokens = torch.randint(0, VOCAB, (b, SEQ + 1))
        return [tokens[:, :-1]], tokens[:, 1:].reshape(-1)

    return model, optimizer, make_batch, nn.functional.cross_entropy


if __name__ == "__main__":
    common.run(common.parse(__doc__, "lstm", 16), build)
