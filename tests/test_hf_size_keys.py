"""HF configs must spell out every size the model's shape depends on (no transformers defaults)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from ratc.errors import RatcError  # noqa: E402
from ratc.frontend.hf import build_hf_model, load_hf_config, required_size_keys  # noqa: E402

HF = Path(__file__).resolve().parents[1] / "examples" / "hf"
CASES = [(name, key) for name in ("llama", "qwen2", "mistral")
         for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")]


def _without(tmp_path, name: str, key: str) -> Path:
    config = json.loads((HF / f"{name}.json").read_text())
    del config[key]
    path = tmp_path / f"{name}-no-{key}.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("name, key", CASES)
def test_hf_config_missing_a_size_key_is_an_error_naming_the_key_and_file(tmp_path, name, key):
    path = _without(tmp_path, name, key)
    with pytest.raises(RatcError) as err:
        build_hf_model(load_hf_config(path), str(path))
    assert f"no '{key}'" in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize("name", ["qwen2", "mistral"])
def test_hf_config_without_kv_heads_is_refused_where_the_class_defaults_it_to_a_number(tmp_path, name):
    # Qwen2Config and MistralConfig default num_key_value_heads to 32 and 8, not to the heads
    path = _without(tmp_path, name, "num_key_value_heads")
    with pytest.raises(RatcError, match="no 'num_key_value_heads'"):
        build_hf_model(load_hf_config(path), str(path))


def test_llama_config_without_kv_heads_means_one_kv_head_per_head(tmp_path):
    # LlamaConfig's default is None, HF's "as many KV heads as heads" (multi-head attention)
    path = _without(tmp_path, "llama", "num_key_value_heads")
    model = build_hf_model(load_hf_config(path), str(path))
    assert model.config.num_key_value_heads == model.config.num_attention_heads == 8


def test_required_size_keys_follow_the_config_class_defaults():
    import transformers

    assert "intermediate_size" in required_size_keys(transformers.LlamaConfig)
    assert "num_key_value_heads" not in required_size_keys(transformers.LlamaConfig)
    assert "num_key_value_heads" in required_size_keys(transformers.Qwen2Config)
    # GPT-2 takes neither name (its FFN is n_inner, None = 4 x hidden)
    assert "intermediate_size" not in required_size_keys(transformers.GPT2Config)
