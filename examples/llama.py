"""A LLaMA-style decoder in plain PyTorch, with presets for the paper's five models.

This file follows ratc's model-file protocol (docs/frontend.md): it defines `PRESETS`,
`build_model(**config)` and `input_spec(**config)`. The module names match Hugging Face's
Llama (`embed_tokens`, `layers.N.self_attn.q_proj`, ...) so weights map one to one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# Published sizes (DESIGN.md, "The paper's models"); `tiny` is for tests and the functional VM.
PRESETS: dict[str, dict] = {
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000),
    "llama2-13b": dict(layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13824, vocab=32000),
    "llama2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000),
    "baichuan2-13b": dict(layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13696, vocab=125696,
                          positions="alibi"),
    "qwen2.5-32b": dict(layers=64, hidden=5120, heads=40, kv_heads=8, ffn=27648, vocab=152064,
                        qkv_bias=True, rope_theta=1000000.0, norm_eps=1e-6),
    "tiny": dict(layers=4, hidden=128, heads=4, kv_heads=2, ffn=344, vocab=512, seq_len=64),
    # a model a 2-core machine trains a step of in a fraction of a second (benchmarks/measured_vs_predicted.py)
    "small": dict(layers=4, hidden=256, heads=8, kv_heads=4, ffn=688, vocab=2048, seq_len=128),
    # the LM head reads the embedding's weight (GPT-2, Gemma, Llama-3.2-1B do)
    "tiny-tied": dict(layers=4, hidden=128, heads=4, kv_heads=2, ffn=344, vocab=512, seq_len=64,
                      tie_embeddings=True),
}
DEFAULT_PRESET = "tiny"
DEFAULT_SEQ_LEN = 2048


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (Zhang & Sennrich 2019), computed in float32."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.type_as(x)


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the last dimension, the rotary pairing of GPT-NeoX/LLaMA."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def alibi_slopes(heads: int) -> torch.Tensor:
    """ALiBi head slopes (Press et al. 2022), the geometric sequence Baichuan2-13B uses."""
    closest = 2 ** math.floor(math.log2(heads))
    base = 2.0 ** (-8.0 / closest)
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest < heads:
        extra = 2.0 ** (-4.0 / closest)
        slopes += [extra ** (2 * i + 1) for i in range(heads - closest)]
    return torch.tensor(slopes)


class Attention(nn.Module):
    """Grouped-query self-attention through F.scaled_dot_product_attention."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, qkv_bias: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, bias):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if cos is not None:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        gqa = self.heads != self.kv_heads
        if bias is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU feed-forward block (Shazeer 2020)."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm decoder block: x + attn(norm(x)), then + mlp(norm(.))."""

    def __init__(self, hidden, heads, kv_heads, ffn, qkv_bias, norm_eps):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, norm_eps)
        self.self_attn = Attention(hidden, heads, kv_heads, qkv_bias)
        self.post_attention_layernorm = RMSNorm(hidden, norm_eps)
        self.mlp = MLP(hidden, ffn)

    def forward(self, x, cos, sin, bias):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, bias)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    """Embedding, decoder layers, final norm, LM head and the next-token loss."""

    def __init__(self, layers, hidden, heads, kv_heads, ffn, vocab, positions="rope", qkv_bias=False,
                 norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=False):
        super().__init__()
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"hidden={hidden} must divide by heads={heads} and heads by kv_heads={kv_heads}")
        if positions not in ("rope", "alibi"):
            raise ValueError(f"positions must be 'rope' or 'alibi', not {positions!r}")
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, kv_heads, ffn, qkv_bias, norm_eps)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden, norm_eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.positions = positions
        if positions == "rope":
            dim = hidden // heads
            inv_freq = 1.0 / rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
            self.register_buffer("inv_freq", inv_freq, persistent=False)
        else:
            self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    def forward(self, input_ids, labels):
        x = self.embed_tokens(input_ids)
        pos = torch.arange(input_ids.shape[1], device=input_ids.device, dtype=torch.float32)
        if self.positions == "rope":
            angles = (pos[:, None] * self.inv_freq.float()[None, :]).repeat(1, 2)
            cos, sin, bias = angles.cos().to(x.dtype), angles.sin().to(x.dtype), None
        else:
            causal = torch.full_like(pos[:, None] - pos[None, :], float("-inf")).triu(1)
            distance = pos[None, :] - pos[:, None]
            bias = (self.slopes.float()[:, None, None] * distance[None] + causal).to(x.dtype)
            cos = sin = None
        for layer in self.layers:
            x = layer(x, cos, sin, bias)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                               labels[:, 1:].reshape(-1))


def build_model(**config) -> nn.Module:
    """The ratc model-file entry point: a decoder for one preset's config."""
    config.pop("seq_len", None)  # positions are computed per call, so any length works
    return LlamaForCausalLM(**config)


def input_spec(**config) -> dict:
    """Input shapes for the model-file protocol: one batch of token ids and labels."""
    return dict(batch=1, seq_len=config.get("seq_len", DEFAULT_SEQ_LEN), vocab=config["vocab"])
