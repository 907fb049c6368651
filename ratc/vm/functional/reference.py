"""The reference: the same model, weights, data and AdamW trained by plain PyTorch."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ratc.vm.functional.shards import AdamW


class Reference:
    """Plain data-parallel-free training: one forward and one backward over the global batch.

    The model file's loss is the mean over all tokens of its input, so one call on the whole
    global batch is the loss ratc's micro-batches x accumulation x replicas must reproduce.
    """

    def __init__(self, model: nn.Module, opt: AdamW):
        self.model = copy.deepcopy(model)
        self.optimizer = opt.make(self.model.parameters())

    def step(self, batch: dict[str, torch.Tensor]) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.model(**batch)
        if not loss.requires_grad:
            from ratc.errors import RatcError
            raise RatcError("the model's loss does not depend on any trainable parameter (detached?); "
                            "there is nothing to train")
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())
