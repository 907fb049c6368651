"""Fused attention backward: dQ, dK, dV against torch.autograd with P recomputed from Q, K and L."""

import numpy as np
import pytest
import torch

from ratc.codegen.attention import generate_attention_backward
from ratc.codegen.flash import flash_constants, flash_footprint, generate_flash_backward
from ratc.errors import RatcError
from ratc.platform import load_platform

P = load_platform("mt3000")


def row_stats(scores):
    """The fused forward's per-row (m, r): the row max and the softmax's reciprocal denominator."""
    m = scores.max(-1, keepdim=True).values
    return torch.cat([m, 1 / torch.exp(scores - m).sum(-1, keepdim=True)], -1).numpy().reshape(-1, 2)


def reference(heads, seq, d, kv_heads, seed, logit_scale=1.0):
    """Kernel inputs (each row's max and 1 / softmax denominator, no probabilities) and autograd's gradients."""
    rng = np.random.default_rng(seed)
    q = (logit_scale * rng.standard_normal((heads, seq, d))).astype(np.float16)
    do = rng.standard_normal((heads, seq, d)).astype(np.float16)
    k, v = (rng.standard_normal((kv_heads, seq, d)).astype(np.float16) for _ in range(2))
    scale = 1 / np.sqrt(d)
    Q, K, V = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    rep = heads // kv_heads
    scores = Q @ K.repeat_interleave(rep, 0).transpose(1, 2) * scale
    out = torch.softmax(scores, -1) @ V.repeat_interleave(rep, 0)
    dO = torch.tensor(do, dtype=torch.float64)
    out.backward(dO)
    inputs = {
        "Q": q.reshape(-1, d), "dO": do.reshape(-1, d), "K": k.reshape(-1, d), "V": v.reshape(-1, d),
        "MR": row_stats(scores.detach()),
        "D": (dO * out).sum(-1).detach().numpy().reshape(-1, 1), "Sc": np.array([[scale]]),
        "Ex": np.array(flash_constants()),
    }
    return inputs, {"dQ": Q.grad.numpy(), "dK": K.grad.numpy(), "dV": V.grad.numpy()}


def check(heads, seq, d, kv_heads, seed=0, logit_scale=1.0, **tiles):
    inputs, grads = reference(heads, seq, d, kv_heads, seed, logit_scale)
    kernel = generate_flash_backward(P, heads, seq, d, kv_heads, **tiles)
    result = kernel.run(inputs)
    for name, want in grads.items():
        got = result.ddr[name].astype(np.float64).reshape(want.shape)
        # FP16 P, dS and outputs, as the paper's kernel: a few FP16 ulps of the gradient's scale.
        np.testing.assert_allclose(got, want, atol=4e-3 * np.abs(want).max(), rtol=0, err_msg=name)
    assert result.cycles == kernel.run(mode="timing").cycles
    return kernel


@pytest.mark.parametrize("heads,seq,head_dim,kv_heads", [(1, 64, 64, 1), (2, 128, 64, 1), (2, 64, 128, 2),
                                                        (1, 192, 128, 1), (4, 128, 64, 2)])
def test_fused_backward_matches_autograd(heads, seq, head_dim, kv_heads):
    check(heads, seq, head_dim, kv_heads, seed=heads * seq + head_dim)


def test_gqa_heads_sharing_kv_tiles_across_waves_match_autograd():
    check(4, 192, 64, 2, seed=7)


def test_wide_key_tiles_and_peaked_softmax_match_autograd():
    # bc = 2 vectors per row in the exp loop; logits spread ~+-40, so most of P is far below 1
    check(1, 128, 64, 1, seed=3, logit_scale=6.0, bc=128)


def test_recomputed_probabilities_are_as_accurate_as_the_forwards_fp16_ones():
    # the paper's kernel reads P rounded to FP16; the fused one computes it with its polynomial exp
    inputs, grads = reference(2, 128, 64, 1, seed=5, logit_scale=3.0)
    q, k = (inputs[x].astype(np.float64).reshape(-1, 128, 64) for x in "QK")
    p = torch.softmax(torch.tensor(q @ k.transpose(0, 2, 1) / 8.0), -1).numpy()
    paper_inputs = {**inputs, "P": p.astype(np.float16).reshape(-1, 128)}
    del paper_inputs["MR"], paper_inputs["Ex"]
    errors = {}
    for name, kernel, given in (("fused", generate_flash_backward(P, 2, 128, 64, 1), inputs),
                                ("paper", generate_attention_backward(P, 2, 128, 64, 1), paper_inputs)):
        out = kernel.run(given).ddr
        errors[name] = max(float(np.abs(out[g].astype(np.float64).reshape(w.shape) - w).max() / np.abs(w).max())
                           for g, w in grads.items())
    assert errors["fused"] <= 1.5 * errors["paper"], errors


def test_fused_backward_reads_no_probabilities():
    fused = generate_flash_backward(P, 2, 256, 64, 2)
    paper = generate_attention_backward(P, 2, 256, 64, 2)
    probs = 2 * 2 * 256 * 256
    assert "P" not in {b.name for b in fused.program.buffers}
    # what the fused kernel reads instead: m, r (8 bytes a row) and the 3 FP32 constants per query tile
    tiles = 2 * 256 // fused.options["br"]
    assert paper.stats().ddr_bytes - fused.stats().ddr_bytes == probs - 8 * 2 * 256 - 12 * tiles
    assert fused.min_ddr_bytes == paper.min_ddr_bytes - probs + 8 * 2 * 256


def test_fused_tiles_must_fit_sm_and_am():
    fp = flash_footprint(32, 64, 128, P.vliw.vector_lanes)
    assert fp["sm"] == 2 * (2 * 128 * 32 + 3 * 32 * 64) <= P.dsp.sm_size
    with pytest.raises(RatcError, match="need .* of SM"):
        generate_flash_backward(P, 1, 1024, 128, 1, br=64, bc=128)
    with pytest.raises(RatcError, match="multiple of kv_heads"):
        generate_flash_backward(P, 3, 64, 64, 2)


def test_spot_check_runs_the_fused_kernel_against_numpy():
    from ratc.codegen.spot_check import check_kernel
    kernel = generate_flash_backward(P, 2, 128, 64, 1)
    result = check_kernel(kernel.program, P, (2, 128, 64, 1), seed=0, kind="flash_bwd")
    assert result.ok and result.kernel == "flash_bwd_h2_s128_d64_kv1_f16"


def test_kernel_cli_generates_and_times_the_fused_backward(capsys):
    from ratc.cli.main import main
    assert main(["kernel", "attention-backward-fused", "2", "128", "64", "--kv-heads", "1", "--run"]) == 0
    out = capsys.readouterr().out
    assert "flash_bwd_h2_s128_d64_kv1_f16" in out
    assert f"{generate_flash_backward(P, 2, 128, 64, 1).cycles}" in out.replace(",", "")
