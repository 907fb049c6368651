"""trace_preset: the paper's models from examples/llama.py, cached per (preset, seq_len)."""

from __future__ import annotations

import functools
from pathlib import Path

from ratc.errors import RatcError
from ratc.frontend.profile import ModelProfile

# The hand-written decoder ships next to the package in the source tree.
EXAMPLE_MODEL = Path(__file__).resolve().parents[2] / "examples" / "llama.py"


@functools.lru_cache(maxsize=None)
def _preset_names() -> tuple[str, ...]:
    from ratc.frontend.modelfile import import_model_file
    return tuple(import_model_file(str(EXAMPLE_MODEL)).PRESETS)


def example_model() -> Path:
    """examples/llama.py, or an error saying it is missing."""
    if not EXAMPLE_MODEL.is_file():
        raise RatcError(f"{EXAMPLE_MODEL}: the example model is missing (ratc runs from its source tree)")
    return EXAMPLE_MODEL


def preset_names() -> list[str]:
    """The presets of examples/llama.py (the paper's five models and `tiny`)."""
    example_model()
    return list(_preset_names())


@functools.lru_cache(maxsize=None)
def _trace(name: str, seq_len: int) -> ModelProfile:
    from ratc.frontend.modelfile import trace_model_file
    return trace_model_file(str(EXAMPLE_MODEL), name, seq_len)


def trace_preset(name: str, seq_len: int = 2048) -> ModelProfile:
    """The ModelProfile of a preset (llama2-7b, llama2-13b, llama2-70b, baichuan2-13b, qwen2.5-32b, tiny)."""
    if name not in preset_names():
        raise RatcError(f"unknown preset '{name}' (available: {', '.join(preset_names())})")
    return _trace(name, int(seq_len))
