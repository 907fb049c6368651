"""The frontend: PyTorch / Hugging Face models to per-layer cost profiles and graph IR.

Names are imported on first use (PEP 562): the IR dialects need only the profile
dataclasses, and `ratc run`, `ratc opt` or `ratc report` should not pay for importing
torch (about 1.2 s) unless they trace a model.
"""

from importlib import import_module

_EXPORTS = {
    "trace_hf_config": "ratc.frontend.hf",
    "ModelSpec": "ratc.frontend.modelfile", "load_model_file": "ratc.frontend.modelfile",
    "trace_model_file": "ratc.frontend.modelfile",
    "preset_names": "ratc.frontend.presets", "trace_preset": "ratc.frontend.presets",
    "LayerProfile": "ratc.frontend.profile", "ModelProfile": "ratc.frontend.profile",
    "OpProfile": "ratc.frontend.profile",
    "trace_model": "ratc.frontend.trace",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ratc.frontend' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
