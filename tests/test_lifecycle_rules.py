"""Lifecycle passes' rules and frontend op costs, pinned on small hand-built programs.

Each test kills at least one hand mutation of ratc/lifecycle/*.py, ratc/passes/lifecycle.py
or ratc/frontend/opcosts.py that the rest of the suite let through. The oracles are ratc's
own docs rules worked out by hand on small hand-built programs (times and byte counts in
the comments), formulas from docs/frontend.md evaluated from torch modules' parameter
shapes, and torch's autograd (what it really saves).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_programs import compile_tiny, mt3000, tiny, tiny_plan

from ratc.errors import RatcError
from ratc.frontend import trace_model
from ratc.ir import print_module, verify
from ratc.ir.core import Block, Operation
from ratc.ir.types import OpaqueType
from ratc.ir.verifier import VerifyError
from ratc.lifecycle.checks import check_task
from ratc.lifecycle.lowering import find_pipeline
from ratc.lifecycle.placement import _phases
from ratc.lifecycle.timeline import estimate
from ratc.passes import PassFailure, PassManager, parse_pipeline
from ratc.planner.corun import solo

ACT, REC, GRAD, TOKEN = (OpaqueType("life", n) for n in ("act", "rec", "grad", "token"))


# ---------------------------------------------------------------- hand-built programs

def _op(name, operands=(), results=(), **attrs):
    """One task op; `results` lists result types."""
    return Operation(name, list(operands), list(results), attrs)


def _pipeline(*stages):
    """A life.pipeline of stages given as op lists (only what the timeline and the memory
    plan read: names, attributes, operands)."""
    ops = [Operation("life.stage", attributes={"stage": p}, region=Block(list(s))) for p, s in enumerate(stages)]
    return Operation("life.pipeline", attributes={}, region=Block(ops))


def _two_stage_program():
    """Stage 0: Forward (2 s), its co-running Recover, the send (1 s on the link), two DDR
    tasks (3 s, 8 s); stage 1: the receive and a 4 s Forward.

    By hand: F0 [0, 2]; the Recover shares its host's interval [0, 2]; send [2, 3]; the
    receive ends with the send, at 3; F1 [3, 7]; the DDR tasks queue: [0, 3], [3, 11].
    The makespan is the last compute task's end, 7 (not the DDR tail's 11).
    """
    f0 = _op("life.fwd", results=[ACT], unit=0, mb=0, dur=2.0, res="compute")
    rec = _op("life.recover", results=[REC], unit=1, mb=0, dur=5.0, res="compute", placement="corun")
    send = _op("life.send", [f0.results[0]], [TOKEN], mb=0, dir="fwd", peer=1, dur=1.0, res="link")
    d1 = _op("life.update", results=[GRAD], unit=0, dur=3.0, res="ddr")
    d2 = _op("life.update", results=[GRAD], unit=1, dur=8.0, res="ddr")
    recv = _op("life.recv", results=[ACT], mb=0, dir="fwd", peer=0, dur=0.0, res="link")
    f1 = _op("life.fwd", [recv.results[0]], [ACT], unit=2, mb=0, dur=4.0, res="compute")
    pipe = _pipeline([f0, rec, send, d1, d2], [recv, f1])
    return pipe, dict(f0=f0, rec=rec, send=send, d1=d1, d2=d2, recv=recv, f1=f1)


def test_timeline_estimate_of_a_hand_built_program():
    """docs/lifecycle.md "The timing estimate": in-order per resource, operands and the
    matching send awaited, a co-running Recover takes its host's interval, makespan =
    last compute end."""
    pipe, op = _two_stage_program()
    tl = estimate(pipe)
    got = {k: (tl.start[o], tl.end[o]) for k, o in op.items()}
    assert got == {"f0": (0.0, 2.0), "rec": (0.0, 2.0), "send": (2.0, 3.0), "d1": (0.0, 3.0),
                   "d2": (3.0, 11.0), "recv": (3.0, 3.0), "f1": (3.0, 7.0)}
    assert tl.makespan == 7.0


def test_timeline_corun_host_is_the_last_compute_task_not_a_link_task_between():
    """Under ZeRO >= 2 a Backward's reduce-scatter sits between it and the Recover that
    co-runs with it (bwd(l), reduce(l), recover(l-1)): the Recover still takes the
    Backward's interval [0, 3], not the reduce's [3, 4]."""
    bwd = _op("life.bwd", results=[GRAD], unit=2, mb=0, dur=3.0, res="compute")
    red = _op("life.reduce", [bwd.results[0]], [TOKEN], unit=2, mb=0, dur=1.0, res="link")
    rec = _op("life.recover", results=[REC], unit=1, mb=0, dur=2.0, res="compute", placement="corun")
    tl = estimate(_pipeline([bwd, red, rec]))
    assert (tl.start[red], tl.end[red]) == (3.0, 4.0)
    assert (tl.start[rec], tl.end[rec]) == (0.0, 3.0)


def test_timeline_refuses_a_deadlocked_program():
    """Each stage first waits for the other's message: no order finishes, and the estimate
    says so instead of returning times for half the program."""
    r0 = _op("life.recv", results=[ACT], mb=0, dir="bwd", peer=1, dur=0.0, res="link")
    s0 = _op("life.send", [r0.results[0]], [TOKEN], mb=0, dir="fwd", peer=1, dur=1.0, res="link")
    r1 = _op("life.recv", results=[ACT], mb=0, dir="fwd", peer=0, dur=0.0, res="link")
    s1 = _op("life.send", [r1.results[0]], [TOKEN], mb=0, dir="bwd", peer=0, dur=1.0, res="link")
    with pytest.raises(RatcError, match="deadlock"):
        estimate(_pipeline([r0, s0], [r1, s1]))


# ---------------------------------------------------------------- the plan op (plan_ir)

def _units(**kw):
    return [u.attributes for u in tiny_plan(**kw).body.ops[0].region.ops]


def test_plan_per_micro_batch_costs_scale_with_b():
    """docs/lifecycle.md: a unit's times and bytes are "per micro-batch of b sequences"; every
    op of a dense decoder is linear in the batch (docs/frontend.md), so b = 2 doubles each
    of them (times, their compute/DDR parts and phases, checkpoint, saved and workspace
    bytes, the stream headroom, kernel calls) and leaves the per-step state alone."""
    one, two = _units(P=2, b=1, A=2), _units(P=2, b=2, A=2)
    for u1, u2 in zip(one, two, strict=True):
        for k in ("fwd", "bwd", "fwd_compute", "bwd_compute", "fwd_ddr", "bwd_ddr", "fwd_other", "bwd_other"):
            assert u2[k] == pytest.approx(2 * u1[k], rel=1e-12), k
        for k in ("input_bytes", "saved", "workspace", "stream"):
            assert int(u2[k]) == 2 * int(u1[k]), k
        for k in ("fwd_phases", "bwd_phases"):
            assert u2[k] == pytest.approx([2 * x for x in u1[k]], rel=1e-12), k
        for k in ("fwd_kernels", "bwd_kernels"):
            assert [e[:-1] for e in u2[k]] == [e[:-1] for e in u1[k]]
            assert [e[-1] for e in u2[k]] == [2 * e[-1] for e in u1[k]], k
        for k in ("param", "opt", "grad", "shard", "bucket", "view"):
            assert u2[k] == u1[k], k


# ---------------------------------------------------------------- placement passes

def _run(module, pipeline):
    return PassManager(parse_pipeline(pipeline)).run(module)


def _stages(module):
    return [s.region.ops for s in find_pipeline(module).region.ops]


@pytest.mark.parametrize("Z", [1, 2])
def test_bulk_update_and_prefetch_wait_for_the_whole_phase_before_them(Z):
    """update-prefetch{mode=bulk}: one step-end phase. Every UpdateShard is released when the
    stage's last GradSync ends and every PrefetchW when the stage's last UpdateShard ends
    (times from the timing estimate of the program update-prefetch was given)."""
    module = compile_tiny(P=2, A=3, Z=Z, act="ckpt", pipeline="lower-to-life,schedule-1f1b,state-pipeline{mode=bulk}")
    tl = estimate(find_pipeline(module))
    sync_end = [max(tl.end[op] for op in ops if op.name == "life.grad_sync") for ops in _stages(module)]
    _run(module, "update-prefetch{mode=bulk}")
    for p, ops in enumerate(_stages(module)):
        ups = [op.attributes for op in ops if op.name == "life.update"]
        pres = [op.attributes for op in ops if op.name == "life.prefetch"]
        assert ups and pres
        assert all(a["release"] == sync_end[p] for a in ups)
        last_update = max(a["start"] + a["dur"] for a in ups)
        assert all(a["release"] == last_update for a in pres)
        assert min(a["start"] for a in pres) >= last_update


@pytest.mark.parametrize("mode", ["deadline", "eager"])
def test_state_tasks_issue_in_the_order_their_server_runs_them(mode):
    """update-prefetch: UpdateShard (DDR) and PrefetchW (link) are each served by one
    non-preemptive server, and an executor issues each resource's ops in list order, so the
    list order must be the planned one (by `start`): with updates longer than the step,
    several wait at once and earliest-deadline-first reorders them against their GradSyncs'."""
    module = tiny_plan(P=2, A=3, Z=1)
    for u in module.body.ops[0].region.ops:
        u.attributes["update"] = 1.0          # seconds: the tiny step takes milliseconds
    _run(module, f"lower-to-life,schedule-1f1b,state-pipeline,update-prefetch{{mode={mode}}}")
    reordered = 0
    for ops in _stages(module):
        for name in ("life.update", "life.prefetch"):
            starts = [op.attributes["start"] for op in ops if op.name == name]
            assert starts == sorted(starts), name
        syncs = [op.attributes["unit"] for op in ops if op.name == "life.grad_sync"]
        reordered += [op.attributes["unit"] for op in ops if op.name == "life.update"] != syncs
    assert (reordered > 0) == (mode == "deadline")

# ---------------------------------------------------------------- memory-plan

def test_memory_budget_admits_exactly_the_peak_and_checks_every_stage():
    """memory-plan{budget=SIZE}: a stage fits when its peak is at most the budget (equal is
    fine, one byte less is not), and the stage over budget is reported whichever it is
    (here the middle one: P = 3 puts only decoder layers there, the largest peak)."""
    peaks = find_pipeline(compile_tiny(P=3, A=4)).attributes["peak"]
    worst = max(range(3), key=lambda p: peaks[p])
    assert worst != 0 and sorted(peaks)[1] < peaks[worst]
    compile_tiny(P=3, A=4, budget=f"{peaks[worst]}B")
    for budget in (peaks[worst] - 1, sorted(peaks)[1]):
        with pytest.raises(PassFailure, match=f"stage {worst} needs"):
            compile_tiny(P=3, A=4, budget=f"{budget}B")


def test_memory_plan_rerun_replaces_stale_frees():
    """A re-run plans from scratch: `frees` an earlier plan (or a hand edit) left on an op
    that frees nothing now is dropped, and the result is the fresh plan's."""
    fresh = print_module(compile_tiny(P=2, A=3, budget="plan"))
    module = compile_tiny(P=2, A=3, budget="plan")
    first = _stages(module)[0][0]
    assert first.name == "life.param" and "frees" not in first.attributes
    first.attributes["frees"] = [0]
    _run(module, "memory-plan")
    assert print_module(module) == fresh


# ---------------------------------------------------------------- frontend op costs

S, H, HEADS, D, DV, FF, V = 12, 16, 2, 8, 4, 24, 50    # tokens, hidden, heads, qk / v head dims, MLP width, vocab


def _toy_model():
    """A small decoder whose layer touches every cost rule: LayerNorm, bias-free Q/K/V with a
    value head dim (4) unlike the query/key one (8), SDPA, biased linears, where/gt/scalar
    mul, SiLU, a standalone softmax, a product, casts and a mean in fp64, a division, a
    matmul with a parameter; an embedding, a fused RMSNorm, an LM head and cross-entropy around it."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(H)
            self.q = nn.Linear(H, HEADS * D, bias=False)
            self.k = nn.Linear(H, HEADS * D, bias=False)
            self.v = nn.Linear(H, HEADS * DV, bias=False)
            self.o = nn.Linear(HEADS * DV, H)
            self.fc = nn.Linear(H, FF)
            self.proj = nn.Parameter(torch.randn(FF, H) / FF)

        def forward(self, x):
            b, s, _ = x.shape
            y = self.norm(x)
            q = self.q(y).view(b, s, HEADS, D).transpose(1, 2)
            k = self.k(y).view(b, s, HEADS, D).transpose(1, 2)
            v = self.v(y).view(b, s, HEADS, DV).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x1 = x + self.o(a.transpose(1, 2).reshape(b, s, HEADS * DV))
            u = self.fc(x1)
            u = torch.where(u > 0, u, u * 0.1)
            p = F.silu(u) * torch.softmax(u, dim=-1)
            z = p / x1.double().mean(-1, keepdim=True).float()     # the statistic in fp64
            return x1 + (z @ self.proj) * 0.5

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, H)
            self.layers = nn.ModuleList(Block() for _ in range(2))
            self.norm = nn.RMSNorm(H)
            self.head = nn.Linear(H, V, bias=False)

        def forward(self, input_ids, labels):
            x = self.emb(input_ids)
            for layer in self.layers:
                x = layer(x)
            return F.cross_entropy(self.head(self.norm(x)).flatten(0, 1), labels.flatten())

    torch.manual_seed(0)
    return Toy()          # float32 on the CPU: autograd can run it for real


_TOY = {}


def _toy():
    if not _TOY:
        from ratc.frontend import trace_model
        model = _toy_model()
        _TOY.update(model=model, profile=trace_model(model, S))
    return _TOY["model"], _TOY["profile"]


def _expected_toy_costs():
    """(fwd, bwd input, bwd weight, read, written, saved) per op, from docs/frontend.md's
    tables with the shapes above; fp32 (E bytes), one sequence of S tokens."""
    E, s, h, f = 4, S, H, FF
    sc = HEADS * S * S                       # attention scores
    x, qk, vv, u = s * h * E, s * HEADS * D * E, s * HEADS * DV * E, s * f * E      # tensor bytes

    def lin(m, n, k, bias, saved):           # linear: 2MNK (+MN); backward 2MNK each (+MN bias grad)
        return (2 * m * n * k + (m * n if bias else 0), 2 * m * n * k, 2 * m * n * k + (m * n if bias else 0),
                (m * k + n * k + (n if bias else 0)) * E, m * n * E, saved)
    layer = {
        # LayerNorm 7 / 9 / 3 per element; writes and saves 2 fp32 statistics per row
        "norm": (7 * s * h, 9 * s * h, 3 * s * h, x + 2 * h * E, x + 2 * s * 4, x + 2 * s * 4),
        "q": lin(s, HEADS * D, h, False, x), "k": lin(s, HEADS * D, h, False, 0),    # one saved input for Q, K, V
        "v": lin(s, HEADS * DV, h, False, 0),
        # QK^T (2 sc d) and PV (2 sc dv), softmax 5 per score; backward twice the GEMMs + 4 per score;
        # S and P go through DDR; Q, K, V and P are saved
        "attention": (2 * sc * D + 2 * sc * DV + 5 * sc, 2 * (2 * sc * D + 2 * sc * DV) + 4 * sc, 0,
                      2 * qk + vv + 2 * sc * E, 2 * sc * E + vv, 2 * qk + vv + sc * E),
        "o": lin(s, h, HEADS * DV, True, vv),
        "add": (s * h, 0, 0, 2 * x, x, 0),
        "fc": lin(s, f, h, True, x),
        "mul": (s * f, s * f, 0, u, u, 0),                            # u * 0.1: saves nothing
        "where": (s * f, 2 * s * f, 0, s * f + 2 * u, u, s * f),       # saves its bool condition
        "silu": (4 * s * f, 4 * s * f, 0, u, u, u),                    # saves its input
        "softmax": (5 * s * f, 4 * s * f, 0, u, u, u),                 # saves its output
        "mul.1": (s * f, 2 * s * f, 0, 2 * u, u, u),                   # saves both; softmax's counted already
        # casts to another dtype move bytes (no FLOPs, no saves); the mean reduces in fp64:
        # input elements forward, output elements backward
        "cast": (0, 0, 0, x, 2 * x, 0),
        "mean": (s * h, s, 0, 2 * x, s * 8, 0),
        "cast.1": (0, 0, 0, s * 8, s * E, 0),
        "div": (s * f, 2 * s * f, 0, u + s * E, u, u + s * E),         # divisor needs grad: saves both
        "matmul": (2 * s * h * f, 2 * s * h * f, 2 * s * h * f, u + f * h * E, x, u),   # z @ param
        "mul.2": (s * h, s * h, 0, x, x, 0),
        "add.1": (s * h, 0, 0, 2 * x, x, 0),
    }
    ids = 8 * s
    pre = {"emb": (0, 0, s * h, ids + x, x, ids)}                      # scatter-add s*h; reads ids and rows
    post = {
        "norm": (4 * s * h, 7 * s * h, 2 * s * h, x + h * E, x + s * 4, x + s * 4),   # RMSNorm, 1 statistic
        "head": lin(s, V, h, False, x),
        # cross-entropy 5 / 2 per logit; writes and saves the log-probabilities, saves the targets
        "cross_entropy": (5 * s * V, 2 * s * V, 0, s * V * E + ids, s * V * E + E, s * V * E + ids),
    }
    return pre, layer, post


def test_op_costs_of_a_toy_decoder_follow_the_documented_formulas():
    """Every op's FLOPs, bytes and saved bytes equal docs/frontend.md's formulas evaluated
    on the module's shapes (the attention's PV GEMM at the value head dim, the standalone
    softmax, norms and their statistics, the bias terms, the element-wise rules)."""
    _, profile = _toy()
    want_pre, want_layer, want_post = _expected_toy_costs()
    assert [t.repeat for t in profile.layers] == [2]
    for part, want in ((profile.pre, want_pre), (profile.layers[0], want_layer), (profile.post, want_post)):
        got = {op.name: (op.fwd_flops, op.bwd_input_flops, op.bwd_weight_flops, op.bytes_read, op.bytes_written,
                         op.saved_bytes) for op in part.ops if op.name != "gt"}
        assert got == want, part.name
    att = next(op for op in profile.layers[0].ops if op.kind == "attention")
    assert att.attention == (HEADS, HEADS, S, D)


def test_toy_layer_saves_what_autograd_saves():
    """The decoder layer's saved bytes (full-save) equal the distinct non-parameter tensors
    torch's autograd saves while running it for real (math SDPA, LayerNorm's statistics
    included)."""
    import torch

    from autograd_oracle import saved_by_scope
    model, profile = _toy()
    saved = saved_by_scope(model, torch.randint(0, V, (1, S)))
    layer0 = sum(n for where, n in saved.items() if where == "layers.0" or where.startswith("layers.0."))
    assert profile.layers[0].saved_bytes == layer0


def test_lower_to_life_act_policy_overrides_the_plans():
    """lower-to-life{act-policy=...}: checkpoint lowers every decoder layer with a
    backward-time Recover right before its Backward, full-save with none, whatever the
    plan says (here fsr)."""
    for policy, act in (("checkpoint", "ckpt"), ("full-save", "full"), ("fsr", "fsr")):
        module = _run(tiny_plan(P=2, A=2, act="fsr"), f"lower-to-life{{act-policy={policy}}},schedule-1f1b,fsr")
        from ratc.lifecycle.lowering import find_pipeline
        assert find_pipeline(module).attributes["act"] == act
        recs = [op.attributes["placement"] for ops in _stages(module) for op in ops if op.name == "life.recover"]
        assert len(recs) == (0 if act == "full" else 4 * 2)          # 4 decoder layers x 2 micro-batches
        assert set(recs) <= ({"bwd"} if act == "ckpt" else {"corun", "bwd"})


def test_over_budget_error_names_the_task_running_at_the_peak():
    """The over-budget message names the op at the peak by its task name (`0B1@2`), which
    parses back to that op's own kind, micro-batch and layer (the same program compiled
    without a budget holds the op at that index)."""
    import re

    from ratc.lifecycle.actions import parse

    with pytest.raises(PassFailure) as info:
        compile_tiny(P=2, A=4, budget="1MB")
    m = re.search(r"stage (\d+) needs .* at op #(\d+) \(life\.(fwd|bwd|recover) (\S+?)(?:, during \S+)?\);",
                  str(info.value))
    assert m, str(info.value)
    stage, index, kind, name = int(m[1]), int(m[2]), m[3], m[4]
    op = find_pipeline(compile_tiny(P=2, A=4)).region.ops[stage].region.ops[index]
    assert op.name == f"life.{kind}"
    a = parse(name)
    assert (a.stage, a.kind, a.mb, a.unit) == (stage, {"fwd": "F", "bwd": "B", "recover": "R"}[kind],
                                               op.attributes["mb"], op.attributes["unit"])


def test_tensor_parallel_all_reduces_are_megatrons():
    """T = 2 (Shoeybi et al. 2019, Megatron-LM): a decoder layer all-reduces its hidden
    stream twice in forward (after the row-parallel attention output and MLP down
    projections) and twice in backward (the column-parallel inputs' gradients); the
    vocab-parallel embedding all-reduces its output in forward, the column-parallel LM
    head its input gradient in backward -- as the planner charges them (ratc.planner.timing,
    "vocab-parallel embedding"). Each is a ring all-reduce of b*s*h fp16 bytes over T ranks
    on the intra-node link: 2 (T - 1) (latency + bytes / (T * bandwidth)). A unit's TP time
    is its duration beyond its engine phases (`fwd_phases` / `bwd_phases`)."""
    net, T = mt3000().network, 2
    ar = 2 * (T - 1) * (net.intra_node_latency + 2 * tiny().seq_len * tiny().hidden / (T * net.intra_node_bandwidth))
    units = _units(P=2, T=T, D=1, A=2)
    tp = [x for u in units for x in (u["fwd"] - solo(_phases(u["fwd_phases"])), u["bwd"] - solo(_phases(u["bwd_phases"])))]
    want = [ar, 0.0] + [2 * ar, 2 * ar] * (len(units) - 2) + [0.0, ar]
    assert tp == pytest.approx(want, rel=1e-9, abs=1e-15)
    other = [x for u in units for x in (u["fwd_other"], u["bwd_other"])]
    assert all(o >= w * (1 - 1e-9) for o, w in zip(other, want))   # seconds no kernel runs include them


@pytest.mark.parametrize("edit, message", [
    # a negative duration (NaN and inf are refused too)
    (lambda ops: ops[next(i for i, op in enumerate(ops) if op.name == "life.fwd")].attributes.update(dur=-1.0),
     "duration must be finite and not negative, got -1.0"),
    # an in-place task (UpdateShard writes the parameters) marked out of place
    (lambda ops: next(op for op in ops if op.name == "life.update").attributes.pop("inplace"), "inplace must be true"),
    # step_end not last
    (lambda ops: ops.insert(len(ops) - 2, ops.pop()), "life.step_end must be the last op"),
    # a negative size
    (lambda ops: next(op for op in ops if op.name == "life.fwd").attributes.update(sizes=[-1]), "sizes needs one non-negative"),
])
def test_the_verifier_refuses_task_attributes_no_pass_writes(edit, message):
    """Stage 0 of a ZeRO-1 full-save program with one hand edit each."""
    module = compile_tiny(P=2, A=2, Z=1, act="full", pipeline="lower-to-life,schedule-1f1b")
    edit(_stages(module)[0])
    with pytest.raises(VerifyError, match=message):
        verify(module)


def test_a_transfer_with_the_wrong_peer_is_named_at_the_transfer():
    """A receive's peer is its direction's neighbour (forward: p - 1). With a wrong one the
    program also fails to match, but the task rule names the transfer and the right peer."""
    module = compile_tiny(P=3, A=2, Z=1, act="full", pipeline="lower-to-life")
    recv = next(op for op in _stages(module)[1] if op.name == "life.recv" and op.attributes["dir"] == "fwd")
    check_task(recv)
    recv.attributes["peer"] = 2
    with pytest.raises(VerifyError, match="'life.recv' fwd on stage 1 must have peer 0, got 2"):
        check_task(recv)


def test_a_co_running_recovers_tp_all_reduces_are_not_hidden():
    """fsr under T = 2: a Recover re-runs its layer's forward, two Megatron all-reduces on
    the link, which run after its host's own (ratc.lifecycle.placement._corun), so what the
    pair adds (`exposed`, and the host's `corun`) is at least those two all-reduces."""
    net, T = mt3000().network, 2
    ar = 2 * (T - 1) * (net.intra_node_latency + 2 * tiny().seq_len * tiny().hidden / (T * net.intra_node_bandwidth))
    recs = [op.attributes for ops in _stages(compile_tiny(P=2, T=T, D=1, A=3, act="fsr")) for op in ops
            if op.name == "life.recover" and op.attributes["placement"] == "corun"]
    assert len(recs) == 4 * 3
    assert all(a["exposed"] >= 2 * ar * (1 - 1e-9) for a in recs)


def test_a_max_reduction_costs_its_input_forward_and_no_backward_arithmetic():
    """docs/frontend.md: a reduction reads its input elements forward; only mean and sum
    have arithmetic backward (output elements). A max only routes the gradient to where
    the maxima were, a copy, which costs no FLOPs ("0 for ... copies")."""
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(H, H)

        def forward(self, x):
            y = self.fc(x)
            return y - y.amax(-1, keepdim=True)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, H)
            self.layers = nn.ModuleList(Layer() for _ in range(2))
            self.head = nn.Linear(H, V)

        def forward(self, input_ids, labels):
            x = self.emb(input_ids)
            for layer in self.layers:
                x = layer(x)
            return F.cross_entropy(self.head(x).flatten(0, 1), labels.flatten())

    torch.manual_seed(0)
    ops = {op.name: op for op in trace_model(Model(), S).layers[0].ops}
    assert (ops["amax"].fwd_flops, ops["amax"].bwd_input_flops) == (S * H, 0)
    assert (ops["sub"].fwd_flops, ops["sub"].bwd_input_flops) == (S * H, 0)


def test_a_reduce_of_the_last_micro_batch_is_named_at_the_reduce():
    """ZeRO >= 2: GradSync reduces the last micro-batch's bucket, so a life.reduce of micro-
    batch M - 1 is not a task of any program; the task rule says so at the op (other rules
    would only report a dependency or in-place conflict)."""
    module = compile_tiny(P=1, A=2, Z=2, act="full", pipeline="lower-to-life")
    red = next(op for op in _stages(module)[0] if op.name == "life.reduce")
    check_task(red)
    red.attributes["mb"] = 1
    with pytest.raises(VerifyError, match="per-micro-batch reduction exists only under ZeRO >= 2 before the last"):
        check_task(red)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))))
def test_the_deadlock_checks_cycle_test_agrees_with_networkx(graph):
    """The verifier's Kahn count (networkx costs more to import than the check) against
    networkx's own acyclicity test, on random graphs with self-loops and repeated edges."""
    import networkx as nx

    from ratc.lifecycle.checks import _acyclic

    n, edges = graph
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    assert _acyclic(n, edges) == nx.is_directed_acyclic_graph(g)
