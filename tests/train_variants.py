"""A small model file with the PyTorch idioms `ratc train` must reproduce or refuse by name.

Each preset switches one idiom on in an otherwise plain residual-MLP language model (tests:
tests/test_functional.py, against PyTorch training the same model).
"""

import torch.nn.functional as F
from torch import nn

BASE = dict(layers=3, hidden=32, ffn=64, vocab=64, seq_len=16)
PRESETS = {name: dict(BASE, variant=name) for name in (
    "plain", "inplace_input", "unused_branch", "shape_scale", "mask_arg",
    "max_norm", "sparse", "dropout", "weight_norm", "batch_norm", "shape_tie", "sum_loss")}
DEFAULT_PRESET = "plain"


class Block(nn.Module):
    def __init__(self, hidden: int, ffn: int, variant: str):
        super().__init__()
        self.variant = variant
        self.norm = nn.LayerNorm(hidden)
        self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        if variant == "unused_branch":
            self.probe = nn.Linear(hidden, 4)       # computed every step, never in the loss
        if variant == "dropout":
            self.drop = nn.Dropout(0.1)
        if variant == "weight_norm":
            self.up = nn.utils.parametrizations.weight_norm(self.up)
        if variant == "batch_norm":
            self.bn = nn.BatchNorm1d(hidden)

    def forward(self, x, scale=None):
        y = self.down(F.gelu(self.up(self.norm(x.clone()))))
        if self.variant == "dropout":
            y = self.drop(y)
        if self.variant == "batch_norm":
            y = self.bn(y.transpose(1, 2)).transpose(1, 2)
        if self.variant == "unused_branch":
            _ = self.probe(x.detach()).softmax(-1)
        if scale is not None:                        # a Python float from the first unit
            y = y * scale
        if self.variant == "inplace_input":
            x.add_(y)                                # valid PyTorch: x is not saved for backward
            return x
        return x + y


class Model(nn.Module):
    def __init__(self, layers: int, hidden: int, ffn: int, vocab: int, seq_len: int, variant: str):
        super().__init__()
        self.variant = variant
        self.embed_tokens = nn.Embedding(vocab, hidden, max_norm=1.0 if variant == "max_norm" else None,
                                         sparse=variant == "sparse")
        if variant == "inplace_input":
            self.embed_tokens.weight.requires_grad_(False)   # its output then needs no gradient
        self.layers = nn.ModuleList(Block(hidden, ffn, variant) for _ in range(layers))
        self.lm_head = nn.Linear(hidden, vocab)

    def forward(self, input_ids, labels, attention_mask=None):
        x = self.embed_tokens(input_ids)
        if attention_mask is not None:               # (mask_arg: the batch gives none, as in PyTorch)
            x = x * attention_mask[..., None]
        scale = input_ids.shape[1] ** -0.05 if self.variant == "shape_scale" else None
        for layer in self.layers:
            x = layer(x, scale)
        logits = self.lm_head(x)
        vocab = self.embed_tokens.weight.shape[0] if self.variant == "shape_tie" else logits.shape[-1]
        return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1),
                               reduction="sum" if self.variant == "sum_loss" else "mean")


def build_model(**config) -> nn.Module:
    return Model(**config)


def input_spec(**config) -> dict:
    return dict(batch=1, seq_len=config["seq_len"], vocab=config["vocab"])
