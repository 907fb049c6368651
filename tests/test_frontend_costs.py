"""Saved activations and bytes: against torch.autograd's saved tensors and Korthikanti et al. 2022."""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ratc.frontend import trace_model, trace_preset

from autograd_oracle import saved_by_scope

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import llama  # noqa: E402


def autograd_saved_by_scope(model: nn.Module, seq: int, grad_only: bool = True, in_bytes: bool = False) -> dict[str, int]:
    """Elements (or bytes) of what autograd saves on random token ids, by module scope."""
    return saved_by_scope(model, torch.randint(0, 64, (1, seq)), grad_only=grad_only, in_bytes=in_bytes)


def profile_saved(layer, prefix: str, itemsize: int) -> int:
    return sum(op.saved_bytes for op in layer.ops if op.name.startswith(prefix)) // itemsize


def test_attention_and_mlp_save_what_autograd_saves():
    torch.manual_seed(0)
    cfg = dict(layers=2, hidden=64, heads=4, kv_heads=4, ffn=96, vocab=64)
    model = llama.build_model(**cfg)            # float32 on the CPU: real autograd
    seq = 24
    oracle = autograd_saved_by_scope(model, seq)
    layer = trace_model(model, seq).layers[0]
    for scope in ("self_attn", "mlp"):
        got = profile_saved(layer, scope + ".", 4)
        want = sum(n for s, n in oracle.items() if s.startswith(f"layers.0.{scope}"))
        assert got == want, scope
    # the probabilities are saved (heads x s x s), as Algorithm 1's backward reloads them
    att = next(op for op in layer.ops if op.kind == "attention")
    s_h = seq * cfg["hidden"]
    assert att.saved_bytes == 4 * (3 * s_h + cfg["heads"] * seq * seq)


class LNBlock(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.norm = nn.LayerNorm(h)
        self.fc = nn.Linear(h, 2 * h)
        self.out = nn.Linear(2 * h, h)

    def forward(self, x):
        return x + self.out(F.gelu(self.fc(self.norm(x))))


class LNModel(nn.Module):
    def __init__(self, vocab=64, h=32, n=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(LNBlock(h) for _ in range(n))
        self.head = nn.Linear(h, vocab)

    def forward(self, input_ids, labels):
        x = self.emb(input_ids)
        for b in self.blocks:
            x = b(x)
        return F.cross_entropy(self.head(x).flatten(0, 1), labels.flatten())


def test_layernorm_gelu_block_saves_what_autograd_saves():
    torch.manual_seed(0)
    model = LNModel()
    oracle = autograd_saved_by_scope(model, 16, grad_only=False)
    profile = trace_model(model, 16)
    assert profile.meta["tracer"] == "fx"
    want = sum(n for s, n in oracle.items() if s.startswith("blocks.0"))
    assert profile.layers[0].saved_bytes // 4 == want
    assert [op.kind for op in profile.layers[0].ops] == ["norm", "matmul", "elementwise", "matmul", "elementwise"]


class ExtremaBlock(nn.Module):
    """Extremum reductions and a comparison: a max-shifted gate, clipped where it exceeds its mean."""

    def __init__(self, h):
        super().__init__()
        self.fc = nn.Linear(h, h)

    def forward(self, x):
        y = self.fc(x)
        z = y - y.amax(-1, keepdim=True) + y.max(dim=-1, keepdim=True).values
        return x + torch.where(z > z.mean(-1, keepdim=True), z, y.min())


class ExtremaModel(LNModel):
    def __init__(self, vocab=64, h=32, n=2):
        super().__init__(vocab, h, 0)
        self.blocks = nn.ModuleList(ExtremaBlock(h) for _ in range(n))


def test_extrema_and_comparisons_cost_what_autograd_does():
    """Oracle: the tensors autograd saves (amax/min keep input and result, max over a dim its
    indices, a comparison nothing), and autograd's graph: a comparison's boolean result
    has no gradient, so no backward arithmetic flows through it."""
    torch.manual_seed(0)
    model = ExtremaModel()
    oracle = autograd_saved_by_scope(model, 16, grad_only=False, in_bytes=True)
    layer = trace_model(model, 16).layers[0]
    assert layer.saved_bytes == sum(n for s, n in oracle.items() if s.startswith("blocks.0"))
    ops = {op.name: op for op in layer.ops}
    assert ops["gt"].bwd_input_flops == 0 and ops["gt"].saved_bytes == 0 and not ops["gt"].grad
    assert ops["amax"].bwd_input_flops == 0 and ops["amax"].saved_bytes > 0


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-70b", "baichuan2-13b", "qwen2.5-32b"])
def test_layer_saved_bytes_korthikanti_adapted(name):
    """Korthikanti et al. 2022 Eq. 2, sbh(34 + 5as/h), without dropout and adapted to RMSNorm/SwiGLU/GQA.

    fp16: two norm inputs 4sh, QKV input 2sh, Q 2sh, K and V 4s*h_kv, attention output 2sh,
    MLP input 2sh, gate/up/silu/product 8sf, probabilities 2as^2, plus one fp32 rstd per row per norm.
    """
    cfg = llama.PRESETS[name]
    s, h, f, a = 2048, cfg["hidden"], cfg["ffn"], cfg["heads"]
    h_kv = h // a * cfg["kv_heads"]
    want = 12 * s * h + 4 * s * h_kv + 8 * s * f + 2 * a * s * s + 2 * 4 * s
    assert trace_preset(name, s).layers[0].saved_bytes == want


def test_gemm_and_attention_bytes():
    s, h, heads, kv, d = 2048, 8192, 64, 8, 128
    layer = trace_preset("llama2-70b", s).layers[0]
    for op in layer.ops:
        if op.kind == "matmul":
            m, n, k = op.gemm
            assert (op.bytes_read, op.bytes_written) == (2 * (m * k + n * k), 2 * m * n)
    att = next(op for op in layer.ops if op.kind == "attention")
    scores = 2 * heads * s * s           # one fp16 s x s matrix per head, in DDR
    q = 2 * s * h
    kv_bytes = 2 * s * kv * d
    assert att.bytes_read == q + 2 * kv_bytes + 2 * scores
    assert att.bytes_written == 2 * scores + q
    assert layer.input_bytes == 2 * s * h


def test_head_saves_logits_and_embedding_saves_ids():
    p = trace_preset("llama2-7b", 2048)
    assert p.pre.input_bytes == 8 * 2048
    loss = next(op for op in p.post.ops if op.kind == "loss")
    # fp32 log-probabilities of 2047 predicted positions over the vocabulary, plus int64 targets
    assert loss.saved_bytes == 4 * 2047 * 32000 + 8 * 2048
