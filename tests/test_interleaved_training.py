"""Interleaved 1F1B (v = 2 model chunks per stage) trains the real tiny LLaMA in the functional
executor exactly as plain PyTorch does, over 20 steps.

Oracle: torch training the same model on the same global batches with the same AdamW
(ratc.vm.functional.reference), as in test_functional.py. The distributed runtime's run of
an interleaved program is in test_dist_runtime.py.
"""

from __future__ import annotations

import pytest
import torch

from pytorch_oracle import assert_trains_as_pytorch
from ratc.lifecycle.lowering import find_pipeline
from ratc.vm.functional.session import Session, TrainConfig, compile_for
from ratc.vm.functional.transport import message_key

MODEL = "examples/llama.py"
TOL = 1e-5
STEPS = 20

pytestmark = pytest.mark.usefixtures("one_thread")

# tiny has 4 decoder layers: P = 2 ranks x v = 2 chunks puts one on each virtual stage
CASES = [
    dict(act="full", Z=0, D=2, M=4),                      # all-reduce GradSync, every layer saved
    dict(act="ckpt", Z=2, D=2, M=4, keep="2s2l"),         # whole-layer and selective recovery, reduce-scatter
    dict(act="ckpt", Z=1, D=1, M=4, preset="tiny-tied"),  # tied embedding and head on ranks 0 and 1
    dict(act="fsr", Z=2, D=2, M=4),                       # each chunk's Recovers co-run with the task before them
    dict(act="fsr", Z=3, D=2, M=8, keep="1s3l"),          # ... ZeRO-3 views gathered a task early, one selective
]


def _config(kw: dict) -> TrainConfig:
    return TrainConfig(model=MODEL, P=2, v=2, b=1, **kw)


def _crossings(module) -> dict:
    """Per (sending stage, peer, direction): the boundary units its messages cross."""
    seen: dict = {}
    for stage in find_pipeline(module).region.ops:
        for op in stage.region.ops:
            if op.name == "life.send":
                a = op.attributes
                seen.setdefault((stage.attributes["stage"], a["peer"], a["dir"]), set()).add(a["unit"])
    return seen


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "{act}-Z{Z}-D{D}-M{M}{k}{t}".format(
    k=f"-keep{kw['keep']}" if "keep" in kw else "", t="-tied" if "preset" in kw else "", **kw))
def test_interleaved_1f1b_trains_as_pytorch_over_20_steps(kw):
    s = Session(_config(kw))
    # the program really interleaves: a stage sends its peer across two chunk boundaries
    assert max(len(units) for units in _crossings(s.module).values()) == 2
    if kw["act"] == "fsr":
        # every Recover co-runs, each chunk's first ahead of the wait for its gradient
        recovers = [op for st in find_pipeline(s.module).region.ops for op in st.region.ops if op.name == "life.recover"]
        assert recovers and {op.attributes["placement"] for op in recovers} == {"corun"}
    assert_trains_as_pytorch(s, STEPS, TOL)


def test_interleaving_changes_nothing_bit_for_bit():
    """v only reorders independent work: v = 2 and v = 1 compute the same losses and weights."""
    runs = []
    for v in (1, 2):
        s = Session(TrainConfig(model=MODEL, P=2, D=2, Z=1, act="ckpt", M=4, b=1, v=v, reference=False))
        runs.append(([s.step(i)[0] for i in range(2)], s.executor.parameters()))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


def test_every_message_of_an_interleaved_step_has_its_own_key():
    """A stage sends its peer across several chunk boundaries: only the boundary unit tells
    those messages apart, and each send's key is one receive's."""
    module = compile_for(_config(dict(act="ckpt", Z=0, D=1, M=4)))
    keys = {"life.send": [], "life.recv": []}
    for stage in find_pipeline(module).region.ops:
        for op in stage.region.ops:
            if op.name in keys:
                keys[op.name].append(message_key(stage.attributes["stage"], op))
    assert len(set(keys["life.send"])) == len(keys["life.send"]) == 4 * 2 * 3      # M x (fwd, bwd) x boundaries
    assert sorted(keys["life.send"]) == sorted(keys["life.recv"])
    assert len({k[:3] + k[4:] for k in keys["life.send"]}) < len(keys["life.send"])  # (stages, dir, mb) repeats
