"""What torch's autograd really saves while a model runs: the oracle of ratc's saved-activation costs."""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def saved_by_scope(model: torch.nn.Module, ids: torch.Tensor, *, grad_only: bool = False,
                   in_bytes: bool = True, math_sdpa: bool = True) -> dict[str, int]:
    """Bytes (or elements) of the distinct non-parameter tensor storages autograd saves while
    `model(ids, ids)` runs, by the module (dotted path) that saved each first.

    grad_only skips tensors outside the autograd graph (rotary tables, norm statistics);
    math_sdpa runs attention in PyTorch's math backend, which saves what it computes.
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    stack, first = [""], {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        in_graph = t.requires_grad or t.grad_fn is not None
        if (in_graph or not grad_only) and ptr not in params and ptr not in first:
            first[ptr] = (stack[-1], t.untyped_storage().nbytes() // (1 if in_bytes else t.element_size()))
        return t

    hooks = []
    for name, mod in model.named_modules():
        hooks.append(mod.register_forward_pre_hook(lambda m, a, _n=name: stack.append(_n)))
        hooks.append(mod.register_forward_hook(lambda m, a, o: stack.pop() and None))
    backend = sdpa_kernel(SDPBackend.MATH) if math_sdpa else contextlib.nullcontext()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), backend:
            model(ids, ids)
    finally:
        for h in hooks:
            h.remove()
    by_scope: dict[str, int] = {}
    for scope, n in first.values():
        by_scope[scope] = by_scope.get(scope, 0) + n
    return by_scope
