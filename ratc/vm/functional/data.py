"""Synthetic training data: a fixed pool of random token sequences drawn in a fixed order."""

from __future__ import annotations

import torch


class SyntheticData:
    """`pool` random sequences from a seeded torch.Generator, served `global_batch` at a time.

    Labels equal the input ids: the model file's loss shifts them (next-token targets).
    Cycling through a finite pool lets the model memorize, so the loss visibly falls.
    """

    def __init__(self, vocab: int, seq_len: int, global_batch: int, seed: int, pool: int = 32):
        gen = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab, (max(pool, global_batch), seq_len), generator=gen)
        self.global_batch = global_batch
        self.seq_len = seq_len

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """The global batch of one step (the same for ratc and the reference)."""
        n = self.tokens.shape[0]
        idx = (torch.arange(self.global_batch) + step * self.global_batch) % n
        ids = self.tokens[idx]
        return {"input_ids": ids, "labels": ids}
