#!/usr/bin/env python3
"""NeuMF (He et al., WWW'17: generalised matrix factorisation + an MLP over user and item
embeddings) on random implicit feedback: IADeep's "neumf" class. See common.py for options."""
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the examples

import torch  # noqa: E402
from torch import nn  # noqa: E402

import common  # noqa: E402

USERS, ITEMS, FACTORS = 6000, 4000, 32


class NeuMF(nn.Module):
    def __init__(self):
        super().__init__()
        self.gmf_user, self.gmf_item = nn.Embedding(USERS, FACTORS), nn.Embedding(ITEMS, FACTORS)
        self.mlp_user, self.mlp_item = nn.Embedding(USERS, 2 * FACTORS), nn.Embedding(ITEMS, 2 * FACTORS)
        self.mlp = nn.Sequential(nn.Linear(4 * FACTORS, 2 * FACTORS), nn.ReLU(),
                                 nn.Linear(2 * FACTORS, FACTORS), nn.ReLU())
        self.out = nn.Linear(2 * FACTORS, 1)

    def forward(self, users, items):
        gmf = self.gmf_user(users) * self.gmf_item(items)
        mlp = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=1))
        return self.out(torch.cat([gmf, mlp], dim=1)).squeeze(1)


def build(batch, device):
    model = NeuMF().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def make_batch(b):
        users = torch.randint(0, USERS, (b,))
        items = torch.randint(0, ITEMS, (b,))
        return [users, items], torch.randint(0, 2, (b,)).float()

    return model, optimizer, make_batch, nn.functional.binary_cross_entropy_with_logits


if __name__ == "__main__":
    common.run(common.parse(__doc__, "neumf", 256), build)
