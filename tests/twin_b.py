"""Another package's AdamW8bit, same class name as twin_a's: this one never moves the params."""

import torch

from planted import PlainSGD


class AdamW8bit(PlainSGD):
    @torch.no_grad()
    def step(self, closure=None):
        return None
