"""Fused attention forward: O, m, r against torch's softmax(Q K^T scale) V; forward -> backward against autograd."""

import numpy as np
import pytest
import torch

from ratc.codegen.flash import flash_constants, generate_flash_backward
from ratc.codegen.flash_fwd import (flash_forward_constants, flash_forward_footprint, generate_flash_forward,
                                    newton_steps)
from ratc.errors import RatcError
from ratc.platform import load_platform

P = load_platform("mt3000")


def inputs_and_torch(heads, seq, d, kv_heads, seed, logit_scale=1.0):
    """FP16 Q, K, V (kernel inputs) and torch's float64 scores and output on the same values."""
    rng = np.random.default_rng(seed)
    q = (logit_scale * rng.standard_normal((heads, seq, d))).astype(np.float16)
    k, v = (rng.standard_normal((kv_heads, seq, d)).astype(np.float16) for _ in range(2))
    scale = 1 / np.sqrt(d)
    rep = heads // kv_heads
    K, V = (torch.tensor(x, dtype=torch.float64).repeat_interleave(rep, 0) for x in (k, v))
    scores = torch.tensor(q, dtype=torch.float64) @ K.transpose(1, 2) * scale
    out = torch.softmax(scores, -1) @ V
    inputs = {"Q": q.reshape(-1, d), "K": k.reshape(-1, d), "V": v.reshape(-1, d), "Sc": np.array([[scale]]),
              "Ex": np.array(flash_forward_constants(seq))}
    return inputs, scores, out


def run_forward(heads, seq, d, kv_heads, seed=0, logit_scale=1.0, **tiles):
    inputs, scores, out = inputs_and_torch(heads, seq, d, kv_heads, seed, logit_scale)
    kernel = generate_flash_forward(P, heads, seq, d, kv_heads, **tiles)
    result = kernel.run(inputs)
    assert result.cycles == kernel.run(mode="timing").cycles
    return kernel, inputs, result, scores, out


def check(heads, seq, d, kv_heads, seed=0, logit_scale=1.0, **tiles):
    kernel, _, result, scores, out = run_forward(heads, seq, d, kv_heads, seed, logit_scale, **tiles)
    got = result.ddr["O"].astype(np.float64).reshape(out.shape)
    # FP16 output and FP16 probabilities (as the paper's P): a few FP16 ulps of the output's scale
    np.testing.assert_allclose(got, out.numpy(), atol=2e-3 * out.abs().max().item(), rtol=0)
    mr = result.ddr["MR"].astype(np.float64).reshape(heads, seq, 2)
    m = scores.max(-1).values.numpy()
    np.testing.assert_allclose(mr[..., 0], m, atol=1e-5 * max(1.0, np.abs(m).max()), rtol=0)
    r = 1 / torch.exp(scores - scores.max(-1, keepdim=True).values).sum(-1).numpy()
    np.testing.assert_allclose(mr[..., 1], r, rtol=2e-4)       # the polynomial exp's error, not Newton's
    return kernel


# (the last: 30 heads of one 64-row tile each, more tiles than DSPs: a second wave)
@pytest.mark.parametrize("shape", [(1, 64, 64, 1), (2, 128, 64, 1), (2, 256, 128, 2), (4, 192, 64, 2),
                                   (30, 64, 64, 30)])
def test_fused_forward_matches_torch_softmax_attention(shape):
    check(*shape, seed=sum(shape))


def test_large_magnitude_scores_match_torch():
    # logits spread ~+-60: the running max moves a lot between key tiles, most of P underflows
    check(2, 256, 64, 1, seed=3, logit_scale=8.0, br=64, bc=32)


def test_running_max_jump_far_beyond_the_exp_range_rescales_to_zero():
    # the first key tile's scores are ~5000 below the second's: exp(m_old - m_new) must be 0,
    # which the polynomial alone (p(y)^N >= 0.5^N only for y >= -1) gets only through the clamp
    inputs, _, _ = inputs_and_torch(1, 64, 64, 1, seed=1)
    inputs["K"][32:] *= 0
    inputs["K"][32:, 0] = 200.0
    inputs["Q"][:, 0] = 200.0
    kernel = generate_flash_forward(P, 1, 64, 64, 1, bc=32)
    out = kernel.run(inputs).ddr["O"].astype(np.float64).reshape(64, 64)
    k, v, q = (torch.tensor(inputs[x], dtype=torch.float64) for x in "KVQ")
    want = torch.softmax(q @ k.T / 8.0, -1) @ v
    np.testing.assert_allclose(out, want.numpy(), atol=2e-3 * want.abs().max().item(), rtol=0)


def test_forward_statistics_drive_the_fused_backward_to_autograds_gradients():
    heads, seq, d, kv = 2, 128, 64, 1
    kernel, inputs, result, _, _ = run_forward(heads, seq, d, kv, seed=11, logit_scale=2.0)
    rng = np.random.default_rng(12)
    do = rng.standard_normal((heads * seq, d)).astype(np.float16)
    Q, K, V = (torch.tensor(inputs[x].astype(np.float64), requires_grad=True) for x in "QKV")
    rep = heads // kv
    Kr, Vr = (x.reshape(kv, seq, d).repeat_interleave(rep, 0) for x in (K, V))
    out = torch.softmax(Q.reshape(heads, seq, d) @ Kr.transpose(1, 2) / 8.0, -1) @ Vr
    dO = torch.tensor(do, dtype=torch.float64).reshape(heads, seq, d)
    out.backward(dO)
    o16 = result.ddr["O"].astype(np.float64).reshape(-1, d)
    bwd_inputs = {"Q": inputs["Q"], "K": inputs["K"], "V": inputs["V"], "dO": do, "Sc": inputs["Sc"],
                  "MR": result.ddr["MR"].reshape(-1, 2), "D": (do.astype(np.float64) * o16).sum(-1, keepdims=True),
                  "Ex": np.array(flash_constants())}
    grads = generate_flash_backward(P, heads, seq, d, kv).run(bwd_inputs).ddr
    for name, want in (("dQ", Q.grad), ("dK", K.grad), ("dV", V.grad)):
        got = grads[name].astype(np.float64).reshape(want.shape)
        np.testing.assert_allclose(got, want.numpy(), atol=5e-3 * want.abs().max().item(), rtol=0, err_msg=name)


def test_newton_steps_reach_fp32_from_the_worst_start():
    for seq in (64, 2048, 4096):
        x, l = 1 / seq, 1.0                      # l = 1: the start farthest from 1/l
        for _ in range(newton_steps(seq)):
            x = x * (2 - l * x)
        assert abs(x - 1) < 2 ** -23


def test_fused_forward_reads_no_probabilities_and_writes_8_bytes_a_row():
    kernel = generate_flash_forward(P, 2, 256, 64, 2)
    names = {b.name for b in kernel.program.buffers if b.space == "ddr"}
    assert names == {"Q", "K", "V", "Sc", "Ex", "O", "MR"}
    assert kernel.min_ddr_bytes == 2 * (3 * 2 * 256 * 64) + 2 * 2 * 256 * 64 + 8 * 2 * 256 + 4 * 7


def test_fused_forward_tiles_must_fit_and_divide():
    fp = flash_forward_footprint(256, 64, 128)
    assert fp["sm"] == 4 * 2 * 64 * 128 <= P.dsp.sm_size
    with pytest.raises(RatcError, match="need .* of SM"):
        generate_flash_forward(P, 1, 256, 128, 1, bc=128)
    with pytest.raises(RatcError, match="multiple of kv_heads"):
        generate_flash_forward(P, 3, 64, 64, 2)
    with pytest.raises(RatcError, match="br=96"):
        generate_flash_forward(P, 1, 192, 64, 1, br=96)


def test_kernel_cli_generates_and_times_the_fused_forward(capsys):
    from ratc.cli.main import main
    assert main(["kernel", "attention-forward-fused", "2", "128", "64", "--kv-heads", "1", "--run"]) == 0
    out = capsys.readouterr().out
    assert "flash_fwd_h2_s128_d64_kv1_f16" in out
    assert f"{generate_flash_forward(P, 2, 128, 64, 1).cycles}" in out.replace(",", "")


def test_spot_check_runs_the_fused_forward_against_numpy():
    from ratc.codegen.spot_check import check_kernel
    kernel = generate_flash_forward(P, 2, 128, 64, 1)
    result = check_kernel(kernel.program, P, (2, 128, 64, 1), seed=0, kind="flash_fwd")
    assert result.ok and result.kernel == "flash_fwd_h2_s128_d64_kv1_f16" and result.max_abs_error > 0
