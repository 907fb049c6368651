"""Zero-bubble schedules (ZB1P and ZB-V, issue 31) train the real tiny LLaMA in the functional
executor exactly as plain PyTorch does, over 20 steps.

Oracle: torch training the same model on the same global batches with the same AdamW
(ratc.vm.functional.reference), as in test_interleaved_training.py. Each Backward runs as
an I (`life.bwd_i`, the input gradient) and, later, a W (`life.bwd_w`, the weight gradient);
the distributed runtime's run of a ZB-V program is in test_dist_runtime.py.
"""

from __future__ import annotations

import pytest
import torch

from pytorch_oracle import assert_trains_as_pytorch
from ratc.lifecycle.lowering import find_pipeline
from ratc.vm.functional.session import Session, TrainConfig

MODEL = "examples/llama.py"
TOL = 1e-5
STEPS = 20

pytestmark = pytest.mark.usefixtures("one_thread")

# tiny has 4 decoder layers: P = 2 ranks x v = 2 chunks puts one on each virtual stage
CASES = [
    dict(sched="zb1p", act="full", Z=0, D=1, M=4),     # every layer saved; I's graph kept for W
    dict(sched="zb1p", act="full", Z=2, D=2, M=4),     # W's gradient reduce-scattered per micro-batch
    dict(sched="zb1p", act="ckpt", Z=0, D=2, M=4),     # a Recover rebuilds the graph before the I
    dict(sched="zb1p", act="ckpt", Z=2, D=2, M=3),
    dict(sched="zbv", act="full", Z=0, D=1, M=4),      # rank 1 holds the bottom of the V: no transfer there
    dict(sched="zbv", act="ckpt", Z=2, D=2, M=3),
    # selective: a kept layer's Recover rebuilds its attention core before its I; its W reads
    # only what the I kept (whole-layer, selective and full-save layers side by side)
    dict(sched="zb1p", act="ckpt", Z=2, D=2, M=4, keep="1s1l1f1s"),
    dict(sched="zbv", act="ckpt", Z=3, D=2, M=4, keep="2s2l"),
    # FSR: each I's first Recover co-runs with the F, I or W its rank runs before it
    dict(sched="zb1p", act="fsr", Z=0, D=1, M=4),
    dict(sched="zbv", act="fsr", Z=2, D=2, M=4),
    dict(sched="zb1p", act="fsr", Z=3, D=2, M=4, keep="1s3l"),
    dict(sched="zbv", act="fsr", Z=1, D=2, M=4, corun="w"),      # ... or in the latest W's slot before it
]


def _config(kw: dict, **more) -> TrainConfig:
    return TrainConfig(model=MODEL, P=2, v=2, b=1, **kw, **more)


def _ops(module, name: str) -> list:
    """(stage, op) of every `name` op in the program."""
    return [(s.attributes["stage"], op) for s in find_pipeline(module).region.ops
            for op in s.region.ops if op.name == name]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "{sched}-{act}-Z{Z}-D{D}-M{M}{k}{h}".format(
    k=f"-keep{kw['keep']}" if "keep" in kw else "", h=f"-corun{kw['corun']}" if "corun" in kw else "", **kw))
def test_zero_bubble_trains_as_pytorch_over_20_steps(kw):
    s = Session(_config(kw))
    # the program really splits its Backwards: no whole one, an I and a W per unit and micro-batch
    assert not _ops(s.module, "life.bwd")
    units = len(s.units.units)
    assert len(_ops(s.module, "life.bwd_i")) == len(_ops(s.module, "life.bwd_w")) == units * kw["M"]
    # ZB-V's chunks meet on rank P - 1 = 1: its sends to itself are the hand-over
    to_self = [op for p, op in _ops(s.module, "life.send") if op.attributes["peer"] == p]
    assert {op.attributes["peer"] for op in to_self} == ({1} if kw["sched"] == "zbv" else set())
    if kw["act"] == "fsr":  # (Forwards, Is and Ws host co-running Recovers)
        hosts = {ops[k - 1].name for st in find_pipeline(s.module).region.ops for ops in [st.region.ops]
                 for k, op in enumerate(ops) if op.attributes.get("placement") == "corun"}
        assert {"life.fwd", "life.bwd_i", "life.bwd_w"} <= hosts
    if "keep" in kw:        # (selective layers' Recovers rebuild the attention core alone)
        assert any(op.attributes["dur"] < s.module.body.ops[0].region.ops[op.attributes["unit"]].attributes["fwd"]
                   for _, op in _ops(s.module, "life.recover"))
    assert_trains_as_pytorch(s, STEPS, TOL)


def test_what_an_i_keeps_is_released_when_its_w_ends():
    """The graph and gradients an I keeps for its W are dropped as that W ends, not later."""
    s = Session(_config(dict(sched="zb1p", act="full", Z=0, D=1, M=4), reference=False))
    ex = s.executor
    kept: dict = {}         # stage -> the I results its Ws have consumed
    alive_between, leaked = [], []

    def watch(p, op, start, end):
        # (called after the op's handler, before the executor drops what it read last)
        leaked.extend(v.name for v in kept.get(p, ()) if v in ex.vals[p])
        if op.name == "life.bwd_w":
            alive_between.append(op.operands[0] in ex.vals[p])
            kept.setdefault(p, []).append(op.operands[0])
    ex.on_task = watch
    s.step(0)
    assert alive_between and all(alive_between)
    assert sum(len(v) for v in kept.values()) == len(s.units.units) * 4 and not leaked


def test_splitting_the_backward_changes_nothing_bit_for_bit():
    """I and W only split and reorder a Backward's work: ZB1P and ZB-V, Full or Ckpt, compute
    the same losses and weights as interleaved 1F1B (v = 2, Ckpt) bit for bit."""
    runs = []
    for sched, act in (("1f1b", "ckpt"), ("zb1p", "ckpt"), ("zbv", "ckpt"), ("zb1p", "full"), ("zbv", "full")):
        s = Session(_config(dict(sched=sched, act=act, Z=1, D=2, M=4), reference=False))
        runs.append(([s.step(i)[0] for i in range(2)], s.executor.parameters()))
    for losses, params in runs[1:]:
        assert losses == runs[0][0]
        assert all(torch.equal(a, b) for a, b in zip(params, runs[0][1]))
