"""Find the decoder-layer list of a model and decide whether its layers are identical."""

from __future__ import annotations

import contextlib

from torch import nn

from ratc.errors import RatcError

# Attributes that differ between otherwise identical layers without changing their cost.
INDEX_ATTRIBUTES = frozenset({"layer_idx", "layer_id", "layer_index", "layer_number", "idx"})
_SIMPLE = (bool, int, float, str, type(None))


def find_layer_container(module: nn.Module) -> tuple[str, list[str]]:
    """The path of the ModuleList holding the decoder layers, and each layer's path.

    It is the ModuleList (or Sequential) of same-class children holding the most parameters.
    """
    best = None
    for path, mod in module.named_modules():
        if not isinstance(mod, (nn.ModuleList, nn.Sequential)) or len(mod) == 0:
            continue
        if len({type(c) for c in mod}) != 1:
            continue
        size = sum(p.numel() for p in mod.parameters())
        if size and (best is None or size > best[0]):
            best = (size, path, [f"{path}.{name}" if path else name for name in mod._modules])
    if best is None:
        raise RatcError("no decoder layers found: expected an nn.ModuleList of identical blocks")
    return best[1], best[2]


def _plain(value) -> bool:
    return isinstance(value, _SIMPLE) or (isinstance(value, tuple) and all(isinstance(x, _SIMPLE) for x in value))


def signature(layer: nn.Module) -> tuple:
    """Everything about a layer that determines its traced costs, minus its index."""
    sig = []
    for path, mod in layer.named_modules():
        params = tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in mod.named_parameters(recurse=False))
        buffers = tuple((n, tuple(b.shape), b.dtype) for n, b in mod.named_buffers(recurse=False))
        attrs = tuple(sorted((k, v) for k, v in vars(mod).items()
                             if not k.startswith("_") and k not in INDEX_ATTRIBUTES and _plain(v)))
        sig.append((path, type(mod).__qualname__, params, buffers, attrs))
    return tuple(sig)


@contextlib.contextmanager
def only_first_layers(module: nn.Module, container_path: str, n: int = 1):
    """Temporarily shorten the layer list to its first n layers (to trace them, then replicate)."""
    container = module.get_submodule(container_path) if container_path else module
    saved = container._modules
    container._modules = type(saved)(list(saved.items())[:n])
    try:
        yield
    finally:
        container._modules = saved
