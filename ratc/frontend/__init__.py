"""The frontend: PyTorch / Hugging Face models to per-layer cost profiles and graph IR."""

from ratc.frontend.hf import trace_hf_config
from ratc.frontend.modelfile import ModelSpec, load_model_file, trace_model_file
from ratc.frontend.presets import preset_names, trace_preset
from ratc.frontend.profile import LayerProfile, ModelProfile, OpProfile
from ratc.frontend.trace import trace_model

__all__ = ["LayerProfile", "ModelProfile", "ModelSpec", "OpProfile", "load_model_file", "preset_names",
           "trace_hf_config", "trace_model", "trace_model_file", "trace_preset"]
