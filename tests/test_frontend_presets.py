"""Presets of examples/llama.py: parameter counts and FLOPs against published numbers and closed forms."""

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from ratc.frontend import load_model_file, trace_model, trace_preset

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "llama.py")
sys.path.insert(0, str(Path(EXAMPLE).parent))
import llama  # noqa: E402

PAPER_MODELS = ["llama2-7b", "llama2-13b", "llama2-70b", "baichuan2-13b", "qwen2.5-32b"]
# Parameter counts from the models' Hugging Face safetensors index / model cards.
PUBLISHED_PARAMS = {"llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192}


def narayanan_layer_fwd(cfg: dict, s: int) -> int:
    """Narayanan et al. 2021 per-layer forward FLOPs (24 s h^2 + 4 s^2 h), adapted.

    Q/O projections 2*2sh^2, K/V with GQA 2*2sh*h_kv, SwiGLU's three h x f GEMMs 3*2shf,
    attention scores and values 2*2s^2h, plus the qkv bias adds s*(h + 2h_kv).
    """
    h, f = cfg["hidden"], cfg["ffn"]
    h_kv = h // cfg["heads"] * cfg["kv_heads"]
    bias = s * (h + 2 * h_kv) if cfg.get("qkv_bias") else 0
    return 2 * s * h * (h + 2 * h_kv) + 2 * s * h * h + 6 * s * h * f + 4 * s * s * h + bias


@pytest.mark.parametrize("name", PAPER_MODELS + ["tiny"])
def test_param_counts_equal_module(name):
    spec = load_model_file(EXAMPLE, name)
    profile = trace_preset(name)
    layers = spec.module.layers
    assert profile.num_layers == len(layers) == spec.config["layers"]
    for layer in layers:
        assert sum(p.numel() for p in layer.parameters()) == profile.layers[0].param_count
    assert profile.param_count == sum(p.numel() for p in spec.module.parameters())
    assert profile.pre.param_count == spec.module.embed_tokens.weight.numel()
    assert profile.layers[0].param_bytes == 2 * profile.layers[0].param_count


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_param_counts_match_published(name):
    assert trace_preset(name).param_count == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", PAPER_MODELS)
@pytest.mark.parametrize("seq", [512, 2048, 4096])
def test_layer_flops_match_narayanan(name, seq):
    cfg = llama.PRESETS[name]
    layer = trace_preset(name, seq).layers[0]
    closed = narayanan_layer_fwd(cfg, seq)
    assert abs(layer.fwd_flops / closed - 1) < 0.01
    # backward = 2x forward for every GEMM: input grad + weight grad (attention: 4 GEMMs)
    assert abs(layer.bwd_flops / (2 * closed) - 1) < 0.01


@settings(max_examples=15, deadline=None)
@given(heads=st.sampled_from([2, 4, 8]), group=st.sampled_from([1, 2]), head_dim=st.sampled_from([8, 16]),
       ffn=st.integers(16, 200), seq=st.integers(4, 96), bias=st.booleans())
def test_gemm_flops_exact_for_random_configs(heads, group, head_dim, ffn, seq, bias):
    import torch

    cfg = dict(layers=2, hidden=heads * head_dim, heads=heads, kv_heads=heads // group, ffn=ffn, vocab=64,
               qkv_bias=bias)
    with torch.device("meta"):
        model = llama.build_model(**cfg).half()
    layer = trace_model(model, seq).layers[0]
    gemm = sum(op.fwd_flops for op in layer.ops if op.kind == "matmul")
    assert gemm == narayanan_layer_fwd(cfg, seq) - 4 * seq * seq * cfg["hidden"]
    (att,) = [op for op in layer.ops if op.kind == "attention"]
    assert att.attention == (heads, heads // group, seq, head_dim)
    for op in layer.ops:
        if op.gemm:
            m, n, k = op.gemm
            bias_grad = m * n if op.fwd_flops > 2 * m * n * k else 0
            assert op.bwd_input_flops == op.bwd_weight_flops - bias_grad == 2 * m * n * k


def test_matmul_shapes_of_70b():
    layer = trace_preset("llama2-70b").layers[0]
    gemms = {op.name: op.gemm for op in layer.ops if op.kind == "matmul"}
    assert gemms == {
        "self_attn.q_proj": (2048, 8192, 8192), "self_attn.k_proj": (2048, 1024, 8192),
        "self_attn.v_proj": (2048, 1024, 8192), "self_attn.o_proj": (2048, 8192, 8192),
        "mlp.gate_proj": (2048, 28672, 8192), "mlp.up_proj": (2048, 28672, 8192),
        "mlp.down_proj": (2048, 8192, 28672)}


def test_rotary_ops_are_found():
    kinds = [op.kind for op in trace_preset("tiny", 64).layers[0].ops]
    # q and k each: x*cos, neg and cat of rotate_half, rot*sin, sum
    assert kinds.count("rope") == 10
    assert "rope" not in [op.kind for op in trace_preset("baichuan2-13b", 64).layers[0].ops]


def test_baichuan_attention_reads_alibi_bias():
    base = trace_preset("llama2-13b").layers[0]
    alibi = trace_preset("baichuan2-13b").layers[0]
    att = {lay: next(op for op in lay.ops if op.kind == "attention") for lay in (base, alibi)}
    # the (heads, s, s) fp16 bias is read once more than under is_causal
    assert att[alibi].bytes_read - att[base].bytes_read == 40 * 2048 * 2048 * 2


def test_layers_traced_once_and_replicated():
    profile = trace_preset("llama2-7b")
    assert profile.meta["traced_layers"] == 1
    assert [(t.name, t.repeat) for t in profile.layers] == [("layers[0:32]", 32)]
    assert trace_preset("llama2-7b") is profile      # cached per (preset, seq_len)


def test_full_trace_equals_replicated_trace():
    import torch

    with torch.device("meta"):
        model = llama.build_model(**llama.PRESETS["tiny"]).half()
    once = trace_model(model, 64)
    full = trace_model(model, 64, replicate=False)
    assert full.meta["traced_layers"] == 4
    assert full.layers == once.layers and full.pre == once.pre and full.post == once.post


def test_unequal_layers_become_separate_templates():
    import torch

    with torch.device("meta"):
        model = llama.build_model(**llama.PRESETS["tiny"]).half()
        model.layers[3].mlp = llama.MLP(128, 256).half()
    profile = trace_model(model, 32)
    assert [(t.name, t.repeat) for t in profile.layers] == [("layers[0:3]", 3), ("layers[3:4]", 1)]
    assert profile.param_count == sum(p.numel() for p in model.parameters())
