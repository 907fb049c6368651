"""Hugging Face configs through torch.export: parameter counts and equality with the hand-written model."""

import json
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

import torch  # noqa: E402

from ratc.frontend import trace_hf_config, trace_model  # noqa: E402
from ratc.frontend.hf import build_hf_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "examples" / "hf"
sys.path.insert(0, str(ROOT / "examples"))
import llama  # noqa: E402

CONFIGS = ["llama", "qwen2", "mistral"]


def hand_written_config(cfg: dict) -> dict:
    """The examples/llama.py arguments describing the same model as an HF config."""
    return dict(layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"], heads=cfg["num_attention_heads"],
                kv_heads=cfg["num_key_value_heads"], ffn=cfg["intermediate_size"], vocab=cfg["vocab_size"],
                qkv_bias=cfg["model_type"] == "qwen2", tie_embeddings=cfg.get("tie_word_embeddings", False),
                norm_eps=cfg["rms_norm_eps"], rope_theta=cfg["rope_theta"])


@pytest.mark.parametrize("name", CONFIGS)
def test_param_counts_equal_module(name):
    path = HF / f"{name}.json"
    profile = trace_hf_config(path, 128)
    model = build_hf_model(json.loads(path.read_text()))
    assert profile.meta["tracer"] == "export"
    assert profile.num_layers == len(model.model.layers)
    for layer in model.model.layers:
        assert sum(p.numel() for p in layer.parameters()) == profile.layers[0].param_count
    assert profile.param_count == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", CONFIGS)
def test_same_costs_as_hand_written(name):
    cfg = json.loads((HF / f"{name}.json").read_text())
    hf = trace_hf_config(cfg, 96).layers[0]
    with torch.device("meta"):
        model = llama.build_model(**hand_written_config(cfg)).half()
    mine = trace_model(model, 96).layers[0]
    assert [(op.name, op.gemm) for op in hf.ops if op.gemm] == [(op.name, op.gemm) for op in mine.ops if op.gemm]
    assert [op.kind for op in hf.ops] == [op.kind for op in mine.ops]
    assert [op.attention for op in hf.ops if op.attention] == [op.attention for op in mine.ops if op.attention]
    for key in ("fwd_flops", "bwd_input_flops", "bwd_weight_flops"):
        assert [getattr(op, key) for op in hf.ops if op.gemm] == [getattr(op, key) for op in mine.ops if op.gemm]
    assert (hf.fwd_flops, hf.bwd_flops, hf.saved_bytes, hf.param_count, hf.input_bytes) == \
           (mine.fwd_flops, mine.bwd_flops, mine.saved_bytes, mine.param_count, mine.input_bytes)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_hand_written_model_computes_the_hf_loss(name):
    """examples/llama.py is numerically the HF model: same weights give the same loss."""
    cfg = {**json.loads((HF / f"{name}.json").read_text()), "num_hidden_layers": 2}
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**{**cfg, "torch_dtype": "float32"}), attn_implementation="eager").eval()
    mine = llama.build_model(**hand_written_config(cfg)).eval()
    state = {k.removeprefix("model."): v for k, v in hf.state_dict().items()}
    mine.load_state_dict(state, strict=True)
    ids = torch.randint(0, cfg["vocab_size"], (2, 40))
    with torch.no_grad():
        want = hf(input_ids=ids, labels=ids).loss
        got = mine(ids, ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_llama2_70b_config_matches_preset():
    cfg = dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
               num_key_value_heads=8, num_hidden_layers=80, vocab_size=32000, max_position_embeddings=4096)
    from ratc.frontend import trace_preset

    hf, mine = trace_hf_config(cfg, 2048), trace_preset("llama2-70b", 2048)
    assert hf.param_count == mine.param_count == 68_976_648_192
    assert hf.layers[0].fwd_flops == mine.layers[0].fwd_flops
