"""Fused attention as a plan choice (attn=fused): what a layer keeps, the kernels it runs, the
search that tries it, and the planner against the system VM on its programs."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ratc.errors import RatcError
from ratc.frontend.presets import trace_preset
from ratc.planner.exec_profile import load_exec_profile
from ratc.planner.search import Planner
from ratc.platform import load_platform
from ratc.step.config import parse_config
from ratc.step.rules import attention_kept

S = 2048


@pytest.fixture(scope="module")
def planner_7b():
    return Planner(trace_preset("llama2-7b", S), load_platform("mt3000"))


def _saved_by_sdpa(backend, heads=4, seq=64, d=16) -> list:
    q, k, v = (torch.randn(1, heads, seq, d, requires_grad=True) for _ in range(3))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t), sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(q, k, v)
    return [t for t in saved if t.data_ptr() not in {q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()}]


def test_fused_attention_keeps_what_torchs_flash_attention_keeps_in_two_numbers():
    """Oracle: torch's flash SDPA saves Q, K, V, its output and one FP32 log-sum-exp per head
    and query row; ratc's rule keeps that row statistic beyond Q, K, V (O is the output
    projection's input, saved there) as two FP32 numbers, m and 1/sum, as the ISA has no log."""
    (lse,) = _saved_by_sdpa(SDPBackend.FLASH_ATTENTION)
    assert 2 * lse.numel() * lse.element_size() == attention_kept(4, 64, 2, "fused")
    assert attention_kept(4, 64, 2, "paper") == 4 * 64 * 64 * 2      # the FP16 probabilities


def test_fused_layer_saves_row_statistics_instead_of_the_probabilities(planner_7b):
    paper, fused = planner_7b.units(1).units[1], planner_7b.units(1, attn="fused").units[1]
    heads = 32
    assert paper.saved_bytes - fused.saved_bytes == heads * S * S * 2 - heads * S * 8
    assert fused.core_bytes == 0 and not fused.selective        # no core left to recompute
    (kind, shape), calls = next(k for k in fused.kernels.bwd if k[0][0] != "gemm")
    assert (kind, shape, calls) == ("flash_bwd", (32, S, 128, 32), 1)
    # the forward: one fused kernel in place of 2 x 32 per-head GEMMs and the softmax stream
    attn_fwd = [k for k in fused.kernels.fwd if k[0][0] != "gemm"]
    assert attn_fwd == [(("flash_fwd", (32, S, 128, 32)), 1)]
    assert fused.fwd < paper.fwd


def test_attn_text_round_trips_through_the_plan_and_keep_s_means_full_under_it():
    c = parse_config("P=4,D=2,Z=2,b=1,A=256,FSR,deadline,keep=24s8l,attn=fused")
    assert c.attn == "fused" and c.keep == "24f8l" and c.label().endswith("keep=24f8l,attn=fused")
    assert parse_config(c.label()) == c
    assert "attn" not in parse_config("P=4,D=2,A=256").label()       # the paper's: the default, unprinted
    with pytest.raises(RatcError, match="attn must be one of paper, fused"):
        parse_config("P=4,D=2,A=256,attn=flash")


def test_fused_program_round_trips_and_runs_the_fused_kernel(planner_7b):
    from ratc.ir import parse_module, print_module, verify
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan
    from ratc.vm.system.driver import compile_candidate
    cand = parse_config("P=4,D=1,Z=2,b=1,A=4,fsr,deadline,keep=4f28l,attn=fused")
    module = compile_candidate(planner_7b.model, cand, planner_7b.platform, planner_7b)
    assert Plan.from_ir(find_plan(module)).config == cand
    text = print_module(module)
    again = parse_module(text)
    verify(again)
    assert print_module(again) == text and Plan.from_ir(find_plan(again)).config == cand
    from ratc.codegen.program_kernels import codegen
    kernels = {op.attributes["kind"] for op in codegen(module, planner_7b.platform)}
    assert kernels == {"gemm", "flash_fwd", "flash_bwd"}


@pytest.mark.parametrize("config", ["P=4,D=1,Z=2,b=1,A=8,full,deadline,attn=fused",
                                    "P=4,D=1,Z=2,b=1,A=8,ckpt,deadline,keep=4f4l4f20l,attn=fused",
                                    "P=4,D=2,Z=3,b=1,A=8,fsr,deadline,keep=2f6l2f6l8f8l,attn=fused",
                                    # the shape of llama2-7b's best fused plan on 8 clusters (beyond_paper)
                                    "P=8,D=1,Z=0,b=1,A=16,fsr,deadline,keep=3l3f2l3f1l20f,attn=fused"])
def test_planner_agrees_with_the_system_vm_on_fused_programs(planner_7b, config):
    """Oracle: the system VM simulating the compiled program task by task: the planner's step
    time within 1 %, its Eq. 9 peak never below the program's memory plan on any stage."""
    from ratc.lifecycle.lowering import find_pipeline
    from ratc.vm.system.driver import compile_candidate, run_module
    cand = parse_config(config)
    ev = planner_7b.evaluate_group([cand])[0]
    _, mem, _ = planner_7b.detail(cand)
    module = compile_candidate(planner_7b.model, cand, planner_7b.platform, planner_7b)
    _, res = run_module(module, planner_7b.platform, memory_limit=False)
    assert ev.t_step == pytest.approx(res.step_seconds, rel=0.01)
    for p, (mine, eq9) in enumerate(zip(find_pipeline(module).attributes["peak"], mem.total[0])):
        assert mine <= eq9 * 1.001, p


def test_the_searches_beyond_the_paper_try_fused_attention_and_ratrain_does_not():
    from ratc.planner.strategies import get_strategy
    planner = Planner(trace_preset("llama2-7b", 64), load_platform("mt3000"))
    for name, want in (("ratrain", {"paper"}), ("selective", {"paper", "fused"}), ("any", {"paper", "fused"})):
        space = planner.space(8, 64, get_strategy(name))
        assert {c.attn for cands in space.values() for c in cands} == want, name
    twins = planner.space(8, 64, get_strategy("selective"))[4]
    assert sum(c.attn == "fused" for c in twins) == sum(c.attn == "paper" for c in twins)


def test_fused_backward_is_priced_by_its_kernel_on_the_kernel_vm_profile():
    platform = load_platform("mt3000")
    planner = Planner(trace_preset("llama2-7b", 256), platform, load_exec_profile(platform, "kernel-vm"))
    paper, fused = planner.units(1).units[1], planner.units(1, attn="fused").units[1]
    profile = planner.exec_profile
    shape = (32, 256, 128, 32)
    assert fused.bwd - paper.bwd == pytest.approx(profile.kernel("flash_bwd", shape)["seconds"]
                                                  - profile.kernel("attn_bwd", shape)["seconds"])


@pytest.mark.usefixtures("one_thread")
def test_fused_attention_programs_train_as_pytorch_does():
    """The functional executor runs a fused-attention program's schedule with the same math
    (only what the layer keeps on the DSP changes): plain PyTorch within 1e-5 over 20 steps."""
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan
    from ratc.vm.functional.session import Session, TrainConfig, relative_deviation
    s = Session(TrainConfig(model="examples/llama.py", M=4, b=1, P=2, D=2, Z=2, act="fsr", keep="2f2l",
                            attn="fused", state_pipeline=True))
    assert Plan.from_ir(find_plan(s.module)).config.attn == "fused"
    worst = max(relative_deviation(*s.step(i)) for i in range(20))
    assert worst <= 1e-5 and s.parameter_deviation() <= 1e-5
