"""Frozen parameters (requires_grad=False) from the trace through the graph IR, the planner
and the compiled program: they keep their fp16 copy but have no gradient, optimizer state,
GradSync, UpdateShard or PrefetchW."""

import dataclasses

import numpy as np
import pytest

from ratc.frontend.modelfile import load_model_file
from ratc.frontend.presets import trace_preset
from ratc.frontend.trace import trace_model
from ratc.ir import parse_module, print_module
from ratc.frontend.graph_ir import module_from_profile, profile_from_module
from ratc.ir.verifier import VerifyError, verify
from ratc.step.config import RECIPE, Candidate
from ratc.planner.search import Planner
from ratc.platform import load_platform

from frozen_models import LLAMA, frozen_model_file


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """(module, profile) of the tiny LLaMA with its embedding and one q_proj frozen."""
    path = frozen_model_file(tmp_path_factory.mktemp("frozen"), ("embed",), ("layers.1.self_attn.q_proj.weight",))
    spec = load_model_file(path, "tiny")
    return spec.module, trace_model(spec.module, spec.seq_len, name="frozen")


@pytest.fixture(scope="module")
def plain():
    spec = load_model_file(str(LLAMA), "tiny")
    return trace_model(spec.module, spec.seq_len, name="tiny")


def test_trace_counts_trainable_parameters_per_tensor(frozen, plain):
    """Oracle: the module's own requires_grad flags, counted tensor by tensor."""
    module, profile = frozen
    assert profile.param_count == sum(p.numel() for p in module.parameters())
    assert profile.trainable_count == sum(p.numel() for p in module.parameters() if p.requires_grad)
    assert profile.pre.frozen == ("embed_tokens.weight",) and profile.pre.trainable_count == 0
    # the layer with a frozen q_proj is a template of its own; the others are the plain model's
    assert [(t.repeat, t.frozen) for t in profile.layers] == [(1, ()), (1, ("self_attn.q_proj.weight",)), (2, ())]
    assert profile.layers[2].ops == plain.layers[0].ops
    q = next(op for op in profile.layers[1].ops if op.name == "self_attn.q_proj")
    m, n, k = q.gemm
    assert q.bwd_weight_flops == 0 and q.bwd_input_flops == 2 * m * n * k
    assert next(op for op in profile.layers[0].ops if op.name == "self_attn.q_proj").bwd_weight_flops == 2 * m * n * k
    # a frozen table needs no backward; the first layer still checkpoints its input (the
    # hidden state, seq x hidden fp16), which no longer needs a gradient
    assert profile.pre.ops[0].bwd_weight_flops == 0
    assert profile.layers[0].input_bytes == plain.layers[0].input_bytes == profile.seq_len * profile.hidden * 2
    assert sum(op.kind == "rope" for op in profile.layers[0].ops) == sum(op.kind == "rope" for op in plain.layers[0].ops)


def test_graph_ir_keeps_the_frozen_flags(frozen):
    """The printed graph names each frozen parameter and parses back to the same profile."""
    _, profile = frozen
    text = print_module(module_from_profile(profile))
    assert text.count("frozen = true") == 2
    back = profile_from_module(parse_module(text))
    assert back.trainable_count == profile.trainable_count
    assert [t.frozen for t in back.layers] == [t.frozen for t in profile.layers] and back.pre.frozen == profile.pre.frozen
    # more frozen elements than the layer holds is refused, naming the layer
    bad = parse_module(text.replace(f"param_count = {profile.pre.param_count},", "param_count = 5,", 1))
    with pytest.raises(VerifyError, match="frozen parameter elements, more than its param_count 5"):
        verify(bad)


@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_state_memory_is_zero_papers_bytes_of_trainable_parameters(frozen, Z):
    """Oracle: ZeRO's 2 + 2 + 12 bytes per parameter, of which a frozen one keeps only its 2."""
    module, profile = frozen
    planner = Planner(profile, load_platform("mt3000"))
    D = 4
    _, mem, _ = planner.detail(Candidate(1, D, 1, Z, 1, 4, "fsr", "deadline"))
    phi = sum(p.numel() for p in module.parameters())
    trained = sum(p.numel() for p in module.parameters() if p.requires_grad)
    assert mem.params[0, 0] == pytest.approx(2 * phi / (D if Z >= 3 else 1))
    assert mem.grads[0, 0] == pytest.approx(2 * trained / (D if Z >= 2 else 1))
    assert mem.optimizer[0, 0] == pytest.approx(12 * trained / (D if Z >= 1 else 1))


@pytest.fixture(scope="module")
def planner13_half_frozen():
    """LLaMA-2-13B with its embedding and its first 20 decoder layers frozen (a fine-tuning set-up)."""
    full = trace_preset("llama2-13b")
    (layer,) = full.layers
    freeze = lambda lp: dataclasses.replace(lp, frozen=tuple(n for n, _, _ in lp.params))  # noqa: E731
    profile = dataclasses.replace(full, pre=freeze(full.pre),
                                  layers=(dataclasses.replace(freeze(layer), repeat=20),
                                          dataclasses.replace(layer, repeat=layer.repeat - 20)))
    return Planner(profile, load_platform("mt3000")), Planner(full, load_platform("mt3000"))


def test_frozen_units_send_nothing_and_the_system_vm_agrees(planner13_half_frozen):
    """Oracle: the system VM on the compiled program, as for the unfrozen model (tests/test_timing.py)."""
    from ratc.lifecycle.plan_ir import plan_op
    from ratc.vm.system.driver import compile_candidate, run_module
    planner, full = planner13_half_frozen
    cand = Candidate(2, 128, 1, 2, 1, 8, "fsr", "deadline")
    units = [op.attributes for op in plan_op(planner.model, cand, planner.platform, planner).region.ops]
    frozen, trained = units[:21], units[21:]
    for u in frozen:
        assert int(u["param"]) > 0
        assert all(int(u[k]) == 0 for k in ("grad", "opt", "shard", "bucket"))
        assert all(u[k] == 0.0 for k in ("sync", "reduce", "update", "prefetch"))
    assert all(float(u["sync"]) > 0.0 and int(u["opt"]) > 0 for u in trained)
    ev = planner.evaluate_group([cand])[0]
    sim = run_module(compile_candidate(planner.model, cand, planner.platform, planner),
                     planner.platform, memory_limit=False)[1]
    assert ev.t_step == pytest.approx(sim.step_seconds, rel=1e-5)
    # half the gradients to reduce, so stage 0 (the frozen layers) carries less state and
    # the step is no slower than the fully trained model's
    full_ev = full.evaluate_group([cand])[0]
    assert ev.peak_mem < full_ev.peak_mem and ev.t_step <= full_ev.t_step
    assert np.isfinite(ev.t_step)


def test_min_cluster_ladder_counts_frozen_parameters_at_two_bytes(planner13_half_frozen):
    """Oracle: the state-only bound, (2 + 2 + 12) bytes per trained parameter and 2 per frozen one."""
    planner, full = planner13_half_frozen
    model, r = planner.model, RECIPE
    assert r.param_bytes + r.grad_bytes + r.optimizer_bytes == 16
    bound = (2 * model.param_count + 14 * model.trainable_count) / planner.budget
    step = planner.platform.network.clusters_per_node
    assert planner.ladder_start() == max(step, step * int(np.ceil(bound / step)))
    assert planner.ladder_start() <= full.ladder_start()


def test_plan_report_says_how_many_parameters_are_frozen(frozen):
    """The text report names the frozen count only when there is one; the JSON always gives both."""
    import json

    from ratc.planner.report import render_json, render_text
    module, profile = frozen
    planner = Planner(profile, load_platform("mt3000"))
    result = planner.plan(4, 16)
    frozen_n = sum(p.numel() for p in module.parameters() if not p.requires_grad)
    assert f"{frozen_n:,} of {profile.param_count:,} parameters frozen" in render_text(result, profile.seq_len)
    data = json.loads(render_json(result, profile.seq_len))
    assert data["parameters"] == {"total": profile.param_count, "trainable": profile.param_count - frozen_n}
    plain = Planner(trace_preset("tiny", profile.seq_len), load_platform("mt3000")).plan(4, 16)
    assert "frozen" not in render_text(plain, profile.seq_len)


def test_memory_balance_weighs_frozen_layers_at_their_state_bytes(planner13_half_frozen):
    """Oracle: a brute-force split of the units into two stages minimizing the larger stage's
    training state (16 bytes per trained parameter, 2 per frozen one)."""
    planner, full = planner13_half_frozen
    model = planner.model
    units = [model.pre, *model.decoder_layers(), model.post]
    state = [2 * u.param_count + 14 * u.trainable_count for u in units]
    cuts = range(2, len(units) - 1)      # stage 0 = units[:cut]: at least one decoder layer each
    best = min(cuts, key=lambda cut: (max(sum(state[:cut]), sum(state[cut:])), cut))
    got = planner.stages(2, 1, "memory").ranges
    assert max(sum(state[s:e]) for s, e in got) == max(sum(state[:best]), sum(state[best:]))
    # the frozen half holds more layers than the trained half; unfrozen, the split is even
    assert got[0][1] - got[0][0] > got[1][1] - got[1][0]
    (s0, e0), (s1, e1) = full.stages(2, 1, "memory").ranges
    assert abs((e0 - s0) - (e1 - s1)) <= 1


def _trace_frozen(tmp_path, freeze: tuple, replicate: bool = True):
    spec = load_model_file(frozen_model_file(tmp_path, freeze), "tiny")
    return spec.module, trace_model(spec.module, spec.seq_len, replicate=replicate)


def test_a_frozen_embedding_does_not_make_every_layer_look_like_the_first(tmp_path):
    """Oracle: the trace of every layer on its own (replicate=False). Behind a frozen embedding
    only the first layer's input needs no gradient."""
    _, replicated = _trace_frozen(tmp_path, ("embed",))
    _, each = _trace_frozen(tmp_path, ("embed",), replicate=False)
    assert [(t.name, t.repeat) for t in replicated.layers] == [("layers[0:1]", 1), ("layers[1:4]", 3)]
    assert [t.ops for t in replicated.layers] == [t.ops for t in each.layers]
    first, rest = replicated.layers
    assert sum(op.bwd_input_flops for op in first.ops) < sum(op.bwd_input_flops for op in rest.ops)


def test_a_layer_behind_frozen_inputs_has_no_backward(tmp_path):
    """Oracle: autograd. With the embedding and layer 0 frozen, layer 0's output needs no
    gradient, so PyTorch runs no backward for it and saves nothing; layer 1's does."""
    import torch

    module, profile = _trace_frozen(tmp_path, ("embed", "layers.0."))
    first, second = profile.layers[0], profile.layers[1]
    assert (first.name, second.name) == ("layers[0:1]", "layers[1:2]")
    assert sum(op.bwd_input_flops + op.bwd_weight_flops for op in first.ops) == 0 and first.saved_bytes == 0
    assert sum(op.bwd_input_flops for op in second.ops) > 0 and second.saved_bytes > 0
    real = module.to_empty(device="cpu").float()
    outs = {}
    for i in (0, 1):
        real.layers[i].register_forward_hook(lambda m, a, out, i=i: outs.__setitem__(i, out))
    ids = torch.zeros(1, profile.seq_len, dtype=torch.long)
    real(input_ids=ids, labels=ids)
    grad = [(o[0] if isinstance(o, tuple) else o).requires_grad for o in (outs[0], outs[1])]
    assert grad == [False, True]
