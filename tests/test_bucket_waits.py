"""ZeRO >= 2's bucket waits (two bucket buffers per stage, DeepSpeed's ipg buffers with
overlap_comm): the step rule against the system VM's trace, and the planner's step against
the VM's where the reduce-scatters outlast the Backwards (a 64-token sequence) and where
they hide behind them (2048)."""

import functools
import re

import numpy as np
import pytest

from ratc.frontend import trace_preset
from ratc.planner.search import Planner
from ratc.step.config import Candidate
from ratc.step.rules import bucket_chain
from ratc.vm.system.driver import compile_candidate, run_module
from ratc.vm.system.results import step_window
from tiny_programs import mt3000

# measured worst |planner - VM| / VM on the grid below: 4.0 % at 64 tokens (P=4, v=4, A=4P;
# the planner's DDR bound and the sends' link queues are what is left), 0.1 % at 2048
SHORT, LONG = 0.05, 0.01
# ZB1P at P = 4 and 64 tokens: 6.4 % below the VM (Full; Ckpt 4.9 %). There the Ws wait for
# the bucket reduce-scatters on the link; the planner's order ends put the last rank (its
# deferred Ws) 0.28 s after rank 0 where the VM's rank 0 ends last (0.21 s after rank 3),
# and 1.0 s before the VM's. The step, the next step's start (ratc.step.rules.next_step_start),
# credits the last rank its late reach; priced as the latest rank's end (4.8 %) the missing
# credit offset part of that.
SHORT_ZB1P_P4 = 0.065


@functools.lru_cache(maxsize=None)
def _planner(seq: int) -> Planner:
    return Planner(trace_preset("llama2-7b", seq), mt3000())


def _run(cand, seq: int) -> tuple:
    """(the planner's step, the VM's timeline and step) of a candidate."""
    planner = _planner(seq)
    (ev,) = planner.evaluate_group([cand])
    tl, sim = run_module(compile_candidate(planner.model, cand, planner.platform, planner), planner.platform,
                         memory_limit=False)
    return ev.t_step, tl, sim.step_seconds


def test_the_vm_runs_a_stage_s_backwards_as_the_bucket_chain_says():
    # the last stage's first Backward of the measured step, on a link its reduces have alone
    cand = Candidate(P=2, D=2, T=1, Z=2, b=1, A=4, act="full", pref="deadline")
    _, tl, _ = _run(cand, 64)
    prog, (w0, _) = tl.program, step_window(tl)
    mine = lambda kind, pattern: sorted((tl.start[i], i) for i, t in enumerate(prog.tasks)  # noqa: E731
                                        if t.step == prog.steps - 1 and t.replica == 0 and t.stage == 1
                                        and t.kind == kind and re.fullmatch(pattern, t.name))
    bwd = [i for _, i in mine("backward", r"1B0@\d+")]
    red = [i for _, i in mine("grad_sync", r"1RS0@\d+#0")]
    assert len(bwd) == len(red) == 17
    sec = lambda cycles: np.array(cycles, dtype=float) / prog.clock  # noqa: E731
    assert tl.start[red[0]] == tl.end[bwd[0]]                   # (nothing else on the link)
    work, reduce = sec([prog.tasks[i].duration for i in bwd]), sec([prog.tasks[i].duration for i in red])
    ends, _ = bucket_chain(0.0, work, reduce, np.ones(17, dtype=bool), start=sec(tl.start[bwd[0]] - w0))
    vm_ends = sec([tl.end[i] - w0 for i in bwd])
    assert np.allclose(ends, vm_ends, atol=1e-3)              # (a send may hold the link 0.2 ms)
    assert ends[-1] - ends[0] > 1.5 * work[1:].sum()           # the waits are half the run


CONFIGS = [(2, 1, "1f1b"), (4, 1, "1f1b"), (2, 2, "1f1b"), (4, 2, "1f1b"), (2, 4, "1f1b"), (4, 4, "1f1b"),
           (2, 2, "zb1p"), (4, 2, "zb1p")]


# (at 2048 tokens v > 1 is held to 1 % by test_interleaved_planner and test_zero_bubble_planner)
@pytest.mark.parametrize("seq,P,v,sched", [(64, *c) for c in CONFIGS] + [(2048, *c) for c in CONFIGS[:2]])
@pytest.mark.parametrize("act", ["full", "ckpt"])
def test_zero2_step_prediction_prices_the_bucket_waits(seq, P, v, sched, act):
    cand = Candidate(P=P, D=2, T=1, Z=2, b=1, A=4 * P, act=act, pref="deadline", v=v, sched=sched)
    planned, _, simulated = _run(cand, seq)
    short = SHORT_ZB1P_P4 if (sched, P) == ("zb1p", 4) else SHORT
    assert abs(planned / simulated - 1) <= (short if seq == 64 else LONG)
