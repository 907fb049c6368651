"""Hugging Face configs (config.json) to ModelProfiles, with no weights and no network."""

from __future__ import annotations

from pathlib import Path

from ratc.errors import RatcError
from ratc.frontend.profile import ModelProfile
from ratc.input_files import json_value

# torch dtype names as config.json spells them; ratc trains in fp16 unless told otherwise.
TRAIN_DTYPE = "float16"


def load_hf_config(path_or_dict, display: str | None = None) -> dict:
    """Read and check a config.json (or a dict already parsed from one)."""
    if isinstance(path_or_dict, dict):
        return dict(path_or_dict)
    path = Path(path_or_dict)
    display = display or str(path)
    try:
        data = json_value(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RatcError(f"{display}: no such file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RatcError(f"{display}: malformed config.json: {exc}") from None
    if not isinstance(data, dict):
        raise RatcError(f"{display}: malformed config.json: expected a JSON object, got {type(data).__name__}")
    return data


SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
# Sizes a model type may read with a default of its own (Llama's intermediate_size 11008,
# Qwen2's 22016 and num_key_value_heads 32): required whenever the config class takes the
# key with a non-None default. A None default is HF's "derive it": an absent
# num_key_value_heads in Llama means as many KV heads as heads (multi-head attention), which
# is what a config without it means, so there it may be left out. A class that does not take
# the key at all does not read it (GPT-2's FFN is n_inner, None = 4 x hidden).
DEFAULTED_SIZE_KEYS = ("intermediate_size", "num_key_value_heads")
MAX_LAYERS = 4096      # building the module on the meta device still costs time per layer


def _cause(exc: BaseException) -> str:
    """The innermost cause's message: transformers wraps validation errors."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}".strip()


def required_size_keys(config_class) -> tuple[str, ...]:
    """The size keys a config of this transformers class must spell out (see DEFAULTED_SIZE_KEYS)."""
    import inspect

    try:
        params = inspect.signature(config_class.__init__).parameters
    except (TypeError, ValueError):
        params = {}
    defaulted = tuple(k for k in DEFAULTED_SIZE_KEYS
                      if k in params and params[k].default is not None)
    return SIZE_KEYS + defaulted


def _check_layer_count(transformers, config: dict, display: str) -> None:
    """Refuse a layer count past MAX_LAYERS before transformers sees it: config classes build
    per-layer lists (Qwen2's layer_types) as they are constructed, so 2**64 layers never returns."""
    config_class = transformers.CONFIG_MAPPING.get(config["model_type"]) \
        if config["model_type"] in transformers.CONFIG_MAPPING else None
    aliases = getattr(config_class, "attribute_map", {}) or {}
    for key in {"num_hidden_layers"} | {k for k, v in aliases.items() if v == "num_hidden_layers"}:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= MAX_LAYERS:
            raise RatcError(f"{display}: {key} must be 1..{MAX_LAYERS}, got {value!r}")


def check_hf_config(config: dict, display: str = "<config>"):
    """The transformers config for a config.json's contents, refused unless it names its model
    type and every size (RatcError naming `display`); builds no model."""
    try:
        import transformers
    except ImportError:
        raise RatcError("--hf-config needs the optional 'transformers' package: pip install 'ratc[hf]'") from None
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise RatcError(f"{display}: malformed config.json: missing string field 'model_type'")
    _check_layer_count(transformers, config, display)
    try:
        cfg = transformers.AutoConfig.for_model(**{**config, "use_cache": False})
    except Exception as exc:  # noqa: BLE001 - transformers validates with its own exception types
        raise RatcError(f"{display}: cannot read config: {_cause(exc)}") from None
    # transformers fills what a config leaves out with its model type's defaults (a 7B-sized
    # model for llama): the model's size must come from the file
    for attr in required_size_keys(type(cfg)):
        names = {attr} | {alias for alias, target in getattr(type(cfg), "attribute_map", {}).items() if target == attr}
        if not names & config.keys():
            raise RatcError(f"{display}: malformed config.json: no '{attr}' (transformers would assume "
                            f"{getattr(cfg, attr, '?')}); every size the model's shape depends on must be "
                            "in the file")
        value = getattr(cfg, attr, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RatcError(f"{display}: malformed config.json: '{attr}' must be a positive integer, "
                            f"got {value!r}")
    layers = cfg.num_hidden_layers
    if not layers <= MAX_LAYERS:
        raise RatcError(f"{display}: num_hidden_layers must be 1..{MAX_LAYERS}, got {layers!r}")
    return cfg


def build_hf_model(config: dict, display: str = "<config>"):
    """The causal-LM module for a config, built on the meta device in the training dtype."""
    cfg = check_hf_config(config, display)
    import torch
    import transformers

    model_type = config["model_type"]
    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, TRAIN_DTYPE))
    except Exception as exc:  # noqa: BLE001 - transformers raises many types for bad configs
        raise RatcError(f"{display}: cannot build a causal LM for model_type '{model_type}': "
                        f"{_cause(exc)}") from None
    return model.eval()


def trace_hf_config(path_or_dict, seq_len: int, *, name: str | None = None) -> ModelProfile:
    """Trace a Hugging Face causal LM described by a config.json via torch.export (or take
    it from the trace cache, ratc.frontend.trace_cache)."""
    from ratc.frontend import trace_cache

    display = "<config>" if isinstance(path_or_dict, dict) else str(path_or_dict)
    config = load_hf_config(path_or_dict, display)
    key = trace_cache.hf_config_key(config, seq_len, name)
    profile = trace_cache.load(key, display)
    if profile is None:
        profile = _trace(config, seq_len, name, display)
        trace_cache.store(key, profile, [])
    return profile


def _trace(config: dict, seq_len: int, name: str | None, display: str) -> ModelProfile:
    from ratc.frontend.trace import trace_model

    from ratc.frontend.user_code import user_code

    model = build_hf_model(config, display)
    try:
        with user_code():       # what the model's code prints stays off ratc's stdout
            profile = trace_model(model, seq_len, name=name or config.get("model_type", "hf"), method="export")
    except RatcError as exc:
        raise RatcError(f"{display}: {exc}") from None
    profile.meta["source"] = display
    return profile
