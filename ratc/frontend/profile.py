"""The model profile: what the frontend learns from a traced model, per op and per layer.

The planner, the lifecycle passes and the VMs read only this (or the graph IR it prints
as), never the torch module. Everything is per *sequence* (micro-batch size 1) at the
traced sequence length: every op in a dense decoder is linear in the batch dimension, so
a micro-batch of b sequences costs exactly b times these numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class OpProfile:
    """One traced op of a layer with its costs for one sequence."""

    name: str                       # qualified name inside the layer, e.g. "self_attn.q_proj"
    kind: str                       # matmul | attention | norm | elementwise | rope | embedding | softmax | loss | other
    out_shape: tuple[int, ...]
    dtype: str                      # "f16", "f32", ...
    fwd_flops: int                  # forward FLOPs (2 per MAC)
    bwd_input_flops: int            # backward FLOPs producing input gradients
    bwd_weight_flops: int           # backward FLOPs producing weight gradients
    bytes_read: int                 # forward bytes read (inputs and weights)
    bytes_written: int              # forward bytes written (outputs)
    saved_bytes: int                # bytes this op keeps for backward under full-save
    gemm: tuple[int, int, int] | None = None   # (M, N, K) of the forward GEMM, if a matmul
    attention: tuple[int, int, int, int] | None = None  # (heads, kv_heads, seq, head_dim)
    # operands: an op of the same layer by name, a layer parameter by name, or "$i" for args[i]
    inputs: tuple[str, ...] = ()
    grad: bool = True               # its output needs a gradient, so it has a backward (autograd's requires_grad)


@dataclass(frozen=True)
class LayerProfile:
    """A layer template (decoder layer, embedding or head) and how often it repeats."""

    name: str
    repeat: int
    ops: tuple[OpProfile, ...]
    param_count: int                # parameters of ONE instance
    param_bytes: int                # their bytes in the training dtype
    input_bytes: int                # bytes of the layer's input (the checkpoint under FSR/ckpt)
    params: tuple[tuple[str, tuple[int, ...], str], ...] = ()   # (name in layer, shape, dtype)
    args: tuple[tuple[tuple[int, ...], str], ...] = ()          # tensors from outside: (shape, dtype)
    frozen: tuple[str, ...] = ()    # names in params with requires_grad=False: no gradient, no optimizer state
    # (name in params, tie key) of parameters shared with another layer (a tied embedding and
    # LM head): each layer holding one keeps a copy, and the copies' gradients are summed
    # before they update. The key is the parameter's name in the first layer that uses it.
    tied: tuple[tuple[str, str], ...] = ()

    @property
    def trainable_count(self) -> int:
        """Parameters of one instance that get gradients (param_count less the frozen ones)."""
        frozen = set(self.frozen)
        return self.param_count - sum(math.prod(shape) for name, shape, _ in self.params if name in frozen)

    def tied_count(self, trainable: bool = False) -> int:
        """Elements of this layer's tied parameters (only the trainable ones if asked)."""
        tied, frozen = dict(self.tied), set(self.frozen)
        return sum(math.prod(shape) for name, shape, _ in self.params
                   if name in tied and not (trainable and name in frozen))

    @property
    def fwd_flops(self) -> int:
        return sum(op.fwd_flops for op in self.ops)

    @property
    def bwd_flops(self) -> int:
        return sum(op.bwd_input_flops + op.bwd_weight_flops for op in self.ops)

    @property
    def saved_bytes(self) -> int:
        return sum(op.saved_bytes for op in self.ops)


@dataclass(frozen=True)
class ModelProfile:
    """A whole traced model: embedding (pre), decoder layer templates, head (post)."""

    name: str
    seq_len: int
    vocab: int
    hidden: int
    dtype: str
    pre: LayerProfile
    layers: tuple[LayerProfile, ...]   # templates in order; sum of repeats = decoder layers
    post: LayerProfile
    meta: dict = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return sum(t.repeat for t in self.layers)

    @property
    def param_count(self) -> int:
        """The model's parameters, a tied one counted once."""
        return (self.pre.param_count + self.post.param_count
                + sum(t.param_count * t.repeat for t in self.layers) - self._copies(False))

    @property
    def trainable_count(self) -> int:
        return (self.pre.trainable_count + self.post.trainable_count
                + sum(t.trainable_count * t.repeat for t in self.layers) - self._copies(True))

    def ties(self) -> dict[str, list[tuple[str, str]]]:
        """Tie key -> [(layer name, parameter name in it), ...] for every parameter held by
        more than one layer, in layer order."""
        groups: dict[str, list[tuple[str, str]]] = {}
        for layer in (self.pre, *self.layers, self.post):
            for name, key in layer.tied:
                groups.setdefault(key, []).append((layer.name, name))
        return groups

    def _copies(self, trainable: bool) -> int:
        """Elements held as extra copies of a tied parameter (by every holder but the first)."""
        seen: set[str] = set()
        extra = 0
        for layer in (self.pre, *self.layers, self.post):
            sizes, frozen = {n: math.prod(shape) for n, shape, _ in layer.params}, set(layer.frozen)
            for name, key in layer.tied:
                if key in seen and not (trainable and name in frozen):
                    extra += sizes[name] * layer.repeat
                seen.add(key)
        return extra

    def decoder_layers(self) -> list[LayerProfile]:
        """The decoder layers in order, one entry per instance."""
        return [t for t in self.layers for _ in range(t.repeat)]
