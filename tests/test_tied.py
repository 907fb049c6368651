"""Tied parameters (the LM head reading the embedding's weight): counted on every stage that
holds a copy, the copies' gradients summed by TieSum, trained as PyTorch trains them."""

import re
import sys
from pathlib import Path

import pytest
import torch

from ratc.dist.launch import launch
from ratc.dist.worker import RunConfig
from ratc.errors import RatcError
from ratc.ir import parse_module, print_module, verify
from ratc.vm.functional.session import Session, TrainConfig, compile_for

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")
STEPS = 3


@pytest.fixture(scope="module")
def llama():
    sys.path.insert(0, str(Path(EXAMPLE).parent))
    try:
        import llama
    finally:
        sys.path.pop(0)
    return llama


def _model(llama, preset="tiny-tied"):
    cfg = dict(llama.PRESETS[preset])
    cfg.pop("seq_len")
    return llama.build_model(**cfg)


def test_the_profile_gives_the_tied_weight_to_the_embedding_and_the_head_and_counts_it_once(llama):
    from ratc.frontend.trace import trace_model
    from ratc.frontend.graph_ir import module_from_profile, profile_from_module

    model = _model(llama)
    profile = trace_model(model, 64)
    weight = model.embed_tokens.weight.numel()
    assert profile.post.param_count == weight + model.norm.weight.numel()
    assert profile.param_count == sum(p.numel() for p in model.parameters())     # torch counts it once
    assert [[layer for layer, _ in holders] for holders in profile.ties().values()] == [["embedding", "head"]]
    # the graph IR carries the tie (model.ir is what run, report and launch read back)
    again = profile_from_module(parse_module(print_module(module_from_profile(profile)), "model.ir"))
    assert again.ties() == profile.ties() and again.param_count == profile.param_count


def test_plan_counts_the_tied_weight_on_every_stage_that_holds_it(llama):
    """Against a hand count: each stage's parameters are those of the modules it runs."""
    from ratc.frontend.trace import trace_model
    from ratc.planner.search import Planner
    from ratc.platform import load_platform

    model = _model(llama)
    planner = Planner(trace_model(model, 64), load_platform("mt3000"))
    stages = planner.stages(2, 1, "time")
    modules = [[model.embed_tokens], *[[layer] for layer in model.layers], [model.norm, model.lm_head]]
    for p, (start, end) in enumerate(stages.ranges):
        held = {id(q): q.numel() for mods in modules[start:end] for m in mods for q in m.parameters()}
        assert stages.params[p] == sum(held.values()), f"stage {p}"
    assert stages.ranges[0][0] == 0 and stages.ranges[-1][1] == len(modules)   # embedding and head apart


@pytest.mark.parametrize("P,D,Z,act", [(1, 1, 0, "full"), (2, 1, 1, "fsr"), (2, 2, 3, "ckpt")])
def test_ratc_train_trains_tied_embeddings_as_pytorch_does(P, D, Z, act):
    cfg = TrainConfig(model=EXAMPLE, preset="tiny-tied", P=P, D=D, Z=Z, act=act, M=2, b=1)
    session = Session(cfg)
    for i in range(STEPS):
        ours, ref = session.step(i)
        assert abs(ours - ref) <= 1e-5 * abs(ref), f"step {i}: {ours} vs {ref}"
    assert session.parameter_deviation() < 1e-5
    # the copies stay equal: each updates from the same summed gradient
    params = session.executor.parameters()
    emb, head = params[0], params[-1]
    assert torch.equal(emb, head[-emb.numel():])


def test_launch_trains_tied_embeddings_on_two_stages_as_the_one_process_executor():
    cfg = TrainConfig(model=EXAMPLE, preset="tiny-tied", P=2, D=2, Z=1, act="fsr", M=2, b=1, reference=False)
    module = compile_for(cfg)
    results = launch(module, RunConfig(model=EXAMPLE, preset="tiny-tied", steps=2, timeout_s=60), 2, 2,
                     deadline_s=240)
    session = Session(cfg, module=module)
    losses = [session.step(i)[0] for i in range(2)]
    assert [r.losses for r in results] == [losses] * 4
    for u, full in enumerate(session.executor.parameters()):
        layout = session.executor.state[0][u]
        got = layout.unshard(torch.cat([r.shards[u] for r in results if u in r.shards]))
        assert torch.equal(got, full), f"unit {u}"


def test_an_update_reading_the_gradient_before_its_tie_sum_is_refused():
    cfg = TrainConfig(model=EXAMPLE, preset="tiny-tied", P=2, D=1, Z=0, act="full", M=2, b=1, reference=False)
    text = print_module(compile_for(cfg))
    assert "life.tie_sum" in text
    edited = re.sub(r"life\.update\(%gt5,", "life.update(%gs5,", text)
    assert edited != text
    # (the buffer rule sees it first: the TieSum overwrites the gradient the Update would read)
    with pytest.raises(RatcError, match=r"prog\.ir:\d+:\d+: error: stage 1: 'life\.tie_sum' \(unit 5\) "
                                        r"overwrites a buffer that 'life\.update' \(unit 5\) still reads"):
        verify(parse_module(edited, "prog.ir"))
    # a program without the TieSum misses a task
    no_sum = re.sub(r"\n *%gt5 = life\.tie_sum[^\n]*", "", edited)
    with pytest.raises(RatcError, match=r"stage 1: missing task life\.tie_sum \(unit 5\)"):
        verify(parse_module(no_sum, "prog.ir"))


def test_a_program_compiled_without_ties_does_not_run_a_tied_model(llama):
    from ratc.vm.functional.executor import FunctionalExecutor
    from ratc.vm.functional.units import flat_params, split_model

    cfg = TrainConfig(model=EXAMPLE, preset="tiny", P=2, D=1, Z=0, act="full", M=2, b=1, reference=False)
    model = _model(llama)
    units = split_model(model)
    with pytest.raises(RatcError, match=r"the program sums tied gradients over units of no group, but in the "
                                        r"model units \[\[0, 5\]\] share a parameter"):
        FunctionalExecutor(compile_for(cfg), units, [flat_params(u, model) for u in units.units])
