"""Layers behind frozen inputs: no backward, no checkpoint, no Recover.

With the embedding and the first decoder layers frozen, those layers' outputs need no
gradient: autograd builds no graph for them, so checkpointing has nothing to recompute and
their backward moves nothing. The trace marks such ops `OpProfile.grad = False`, the
planner gives their units no backward time and no recovery (`UnitCost.recovers`); their
plan units save nothing (`saved = 0`), units with nothing trained are `frozen` (no gradient,
so no state chain), and the verifier holds the program to what the plan says of each.
"""

from __future__ import annotations

import functools
from collections import Counter

import pytest
import torch

from ratc.frontend.modelfile import load_model_file
from ratc.frontend.trace import trace_model
from ratc.ir import parse_module, print_module
from ratc.frontend.graph_ir import module_from_profile, profile_from_module
from ratc.ir.verifier import VerifyError, verify
from ratc.lifecycle.compile import CompileOptions, compile_program
from ratc.lifecycle.lowering import find_plan
from ratc.step.config import Candidate
from ratc.planner.search import Planner
from ratc.platform import load_platform

from frozen_models import frozen_model_file

# the embedding and the first two of tiny's four decoder layers
FREEZE = ("embed", "layers.0.", "layers.1.")


@pytest.fixture(scope="module")
def tiny_frozen(tmp_path_factory):
    """(model file, module, profile, planner) of tiny LLaMA with FREEZE frozen."""
    path = frozen_model_file(tmp_path_factory.mktemp("frozen"), FREEZE)
    spec = load_model_file(path, "tiny")
    profile = trace_model(spec.module, spec.seq_len, name="frozen")
    return path, spec.module, profile, Planner(profile, load_platform("mt3000"))


@pytest.fixture(scope="module")
def torch_facts(tiny_frozen) -> tuple[list[int], list[bool]]:
    """What autograd does on the real model: the decoder layers torch.utils.checkpoint
    recomputes in one forward and backward, and whether each layer's output needs a gradient.

    Each layer runs under non-reentrant checkpointing and counts its forward calls: a layer
    whose graph autograd needs is run again in backward (two calls), one behind frozen
    inputs with frozen weights is not (one call)."""
    spec = load_model_file(tiny_frozen[0], "tiny")
    real = spec.module.to_empty(device="cpu").float()
    with torch.no_grad():
        for p in real.parameters():
            p.normal_(0.0, 0.02)
    calls: Counter = Counter()
    grads: dict = {}

    def counted(i, forward, *args, **kwargs):
        calls[i] += 1
        return forward(*args, **kwargs)

    for i, layer in enumerate(real.layers):
        inner = functools.partial(counted, i, layer.forward)
        layer.forward = functools.partial(torch.utils.checkpoint.checkpoint, inner, use_reentrant=False)
        layer.register_forward_hook(lambda m, a, out, i=i: grads.__setitem__(i, out.requires_grad))
    ids = torch.randint(0, real.embed_tokens.num_embeddings, (1, spec.seq_len))
    real(input_ids=ids, labels=ids).backward()
    assert set(calls.values()) <= {1, 2}
    return sorted(i for i, n in calls.items() if n == 2), [grads[i] for i in range(len(real.layers))]


def _recover_units(module) -> set[int]:
    return {op.attributes["unit"] for op in module.walk() if op.name == "life.recover"}


def test_recovers_exactly_the_layers_torch_checkpointing_recomputes(tiny_frozen, torch_facts):
    """Oracle: torch.utils.checkpoint's own recomputation, layer by layer."""
    _, _, profile, planner = tiny_frozen
    torch_layers = torch_facts[0]
    assert torch_layers == [2, 3]
    units = planner.units(1).units           # 0 = embedding, 1..L = decoder layers, L+1 = head
    assert [i - 1 for i, u in enumerate(units) if u.recovers] == torch_layers
    for act in ("ckpt", "fsr"):
        program = compile_program(profile, Candidate(2, 1, 1, 1, 1, 4, act, "deadline"), planner.platform,
                                  CompileOptions(planner=planner))
        assert sorted(i - 1 for i in _recover_units(program)) == torch_layers
        plan_units = find_plan(program).region.ops
        assert [u.attributes["index"] for u in plan_units
                if u.attributes["decoder"] and int(u.attributes["saved"]) == 0] == [1, 2]
        assert [u.attributes["index"] for u in plan_units if u.attributes.get("frozen")] == [0, 1, 2]
        assert sum(op.name == "life.recover" for op in program.walk()) == 4 * len(torch_layers)


def test_a_layer_without_backward_costs_nothing_in_backward(tiny_frozen, torch_facts):
    """Oracle: autograd's requires_grad of each layer's output. A layer whose output needs
    no gradient has no backward: no work, no kernel and, under tensor parallelism, no
    all-reduces; nor does the frozen embedding."""
    _, _, profile, planner = tiny_frozen
    layers = profile.decoder_layers()
    assert [any(op.grad for op in t.ops) for t in layers] == torch_facts[1] == [False, False, True, True]
    assert not any(op.grad for op in profile.pre.ops)
    units = planner.units(2).units
    for u in units[:3]:
        assert (u.bwd, u.bwd_compute, u.bwd_ddr, u.backward) == (0.0, 0.0, 0.0, False)
        assert u.kernels.bwd == () and u.kernels.bwd_other == 0.0
    assert all(u.bwd > 0 and u.backward for u in units[3:])
    from ratc.lifecycle.plan_ir import plan_op
    plan = plan_op(profile, Candidate(1, 1, 2, 1, 1, 2, "full", "deadline"), planner.platform, planner)
    attrs = [op.attributes for op in plan.region.ops]
    assert attrs[1]["bwd"] == 0.0 and attrs[1]["fwd"] > units[1].fwd   # its forward all-reduces stay
    assert attrs[3]["bwd"] > units[3].bwd
    # the planner charges the link what the plan's tasks carry: a stage's TP all-reduces
    sc = planner.stages(1, 2, "time")
    assert (sc.n_dec[0], sc.n_dec_bwd[0], sc.n_rec[0]) == (4, 2, 2)


def test_checkpointing_costs_the_recomputed_layers_forward(tiny_frozen, torch_facts):
    """Oracle: on one stage with one replica nothing overlaps, so checkpointing adds M times
    the forward of the layers torch recomputes to the full-save main path, and its
    checkpoints are those layers' inputs (seq x hidden fp16 each)."""
    _, _, profile, planner = tiny_frozen
    M = 4
    (_, _, full), (_, _, ckpt) = (planner.detail(Candidate(1, 1, 1, 0, 1, M, act, "deadline")) for act in ("full", "ckpt"))
    units = planner.units(1).units
    recomputed = [units[i + 1] for i in torch_facts[0]]
    assert full.e_rec[0] == 0.0 and ckpt.t_1f1b[0] == full.t_1f1b[0]
    assert ckpt.e_rec[0] == pytest.approx(M * sum(u.fwd for u in recomputed), rel=1e-9)
    sc = planner.stages(1, 1, "time")
    others = sum(u.saved_bytes for u in units if not u.recovers)
    assert sc.ckpt[0] == pytest.approx(len(recomputed) * profile.seq_len * profile.hidden * 2 + others)


@pytest.fixture(scope="module")
def llama7b_frozen(tmp_path_factory):
    """LLaMA-2-7B with its embedding and first ten decoder layers frozen."""
    path = frozen_model_file(tmp_path_factory.mktemp("frozen7b"), ("embed",) + tuple(f"layers.{i}." for i in range(10)))
    spec = load_model_file(path, "llama2-7b")
    profile = trace_model(spec.module, spec.seq_len, name="frozen7b")
    return profile, Planner(profile, load_platform("mt3000"))


@pytest.mark.parametrize("act, Z, pref", [("ckpt", 1, "deadline"), ("fsr", 2, "deadline"), ("full", 2, "bulk"),
                                          ("fsr", 0, "layerwise")])
def test_planner_equals_the_system_vm_behind_frozen_layers(llama7b_frozen, act, Z, pref):
    """Oracle: the system VM running the compiled program task by task. The time-balanced
    partition puts twenty layers on stage 0, ten of them frozen: their Backwards take no time,
    so the trained layers' state chains meet the next step's forwards."""
    from ratc.vm.system.driver import compile_candidate, run_module
    profile, planner = llama7b_frozen
    assert [t.saved_bytes == 0 for t in profile.layers] == [True, False, False]
    cand = Candidate(2, 2, 1, Z, 1, 4, act, pref)
    ev = planner.evaluate_group([cand])[0]
    program = compile_candidate(profile, cand, planner.platform, planner)
    # unit 11 = layer 10, the first trained one
    assert min(_recover_units(program), default=None) == (None if act == "full" else 11)
    sim = run_module(program, planner.platform, memory_limit=False)[1]
    assert ev.t_step == pytest.approx(sim.step_seconds, rel=1e-6)


def test_graph_ir_keeps_the_grad_flags(tiny_frozen):
    """print -> parse gives back the same profile, ops without a backward included."""
    _, _, profile, _ = tiny_frozen
    text = print_module(module_from_profile(profile))
    assert "no_grad = true" in text
    back = profile_from_module(parse_module(text))
    assert (back.pre, back.layers, back.post) == (profile.pre, profile.layers, profile.post)


def test_the_verifier_holds_recovery_to_what_the_plan_says_of_each_layer(tiny_frozen):
    """The plan's units say which layers save nothing (so have no Recover); the pipeline
    repeats none of it, and a Recover of a layer the plan says saves nothing is refused."""
    import re

    _, _, profile, planner = tiny_frozen
    program = compile_program(profile, Candidate(2, 1, 1, 1, 1, 2, "ckpt", "deadline"), planner.platform,
                              CompileOptions(planner=planner))
    text = print_module(program)
    assert "no_recover" not in text
    verify(parse_module(text))
    # the plan now says unit 3 saves nothing: its Forward must then keep what it saves, as
    # under full-save, and it has no Recover
    unit3 = re.compile(r"(life\.unit \{[^\n]*index = 3, [^\n]*saved = )[0-9.]+[KMG]?i?B")
    assert unit3.search(text)
    with pytest.raises(VerifyError, match=r"'life.fwd' \(unit 3, mb 0\): results must be \(!life.act, !life.saved\)"):
        verify(parse_module(unit3.sub(r"\g<1>0B", text, count=1)))


def test_frozen_units_have_no_state_chain(tiny_frozen):
    """Nothing trained, no gradient: no reduce, GradSync, UpdateShard or PrefetchW, and no
    gradient bucket to wait for; the next step reads the parameters as they are."""
    _, _, profile, planner = tiny_frozen
    M = 4
    program = compile_program(profile, Candidate(2, 2, 1, 2, 1, M, "fsr", "deadline"), planner.platform,
                              CompileOptions(planner=planner))
    state = Counter(op.attributes["unit"] for op in program.walk()
                    if op.name in ("life.reduce", "life.grad_sync", "life.update", "life.prefetch"))
    assert sorted(state) == [3, 4, 5]                     # the trained layers and the head
    assert set(state.values()) == {(M - 1) + 3}           # M - 1 reduces, then GradSync, UpdateShard, PrefetchW
    for end in (op for op in program.walk() if op.name == "life.step_end"):
        kinds = {v.owner.attributes["unit"]: v.owner.name for v in end.operands}
        assert all(kinds[i] == ("life.param" if i < 3 else "life.prefetch") for i in kinds)
    # the plan now says unit 1 is trained: the program lacks its state chain
    text = print_module(program)
    line = next(ln for ln in text.splitlines() if "life.unit {" in ln and "index = 1," in ln)
    assert ", frozen = true" in line
    with pytest.raises(VerifyError, match=r"stage 0: missing task life.grad_sync \(unit 1\)"):
        verify(parse_module(text.replace(line, line.replace(", frozen = true", ""))))


def test_training_behind_frozen_layers_matches_pytorch(tiny_frozen):
    """Oracle: plain PyTorch training of the same model (AdamW skips the frozen parameters)."""
    from ratc.vm.functional.session import Session, TrainConfig, relative_deviation
    path, *_ = tiny_frozen
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for act, Z in (("ckpt", 2), ("fsr", 1)):
            s = Session(TrainConfig(model=path, P=2, D=2, Z=Z, act=act, M=2, b=1))
            assert max(relative_deviation(*s.step(i)) for i in range(3)) <= 1e-5
            assert s.parameter_deviation() <= 1e-5
    finally:
        torch.set_num_threads(before)
