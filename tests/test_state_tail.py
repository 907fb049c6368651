"""The deadline state tail (Eq. 4): the updates as the update-prefetch pass orders them.

Each UpdateShard runs on the DDR engine once its GradSync ends, one at a time, earliest
deadline first among the released; the first unit's, released last, can wait for one
released before it. The planner's vectorized server must equal the pass's scalar one, and
its step time the system VM's where that wait shows (few replicas: long updates).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.frontend.presets import trace_preset
from ratc.lifecycle.placement import _serve
from ratc.step.config import Candidate
from ratc.planner.search import Planner
from ratc.planner.timing import _edf, _fifo_ends, _updates
from ratc.platform import load_platform

jobs = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9), st.integers(-30, 30), st.booleans()),
                min_size=1, max_size=9)


def _check_against_serve(rows, server, in_release_order: bool):
    U = max(len(r) for r in rows)
    pad = [r + [(0, 0, 0, False)] * (U - len(r)) for r in rows]
    if in_release_order:       # the updates' order: the last unit released first
        pad = [[(rel, *rest) for rel, (_, *rest) in zip(sorted((j[0] for j in r), reverse=True), r)] for r in pad]
    release, dur, deadline, real = (np.array([[[job[k] for job in r] for r in pad]], dtype=float) for k in range(4))
    start = server(release, dur, deadline, real.astype(bool))
    for row, jobs_ in enumerate(pad):
        tasks = [{"unit": u, "release": rel, "deadline": dl, "dur": d}
                 for u, (rel, d, dl, on) in enumerate(jobs_) if on]
        _serve(tasks, edf=True)
        for x in tasks:
            assert start[0, row, x["unit"]] == x["start"]


@settings(max_examples=150, deadline=None)
@given(st.lists(jobs, min_size=1, max_size=4))
def test_edf_equals_the_update_prefetch_passs_server(rows):
    """Oracle: ratc.lifecycle.placement._serve, a scalar event loop, row by row (integer
    times, so ties between releases and deadlines are exact; its clock starts at 0, so
    releases are not negative here)."""
    _check_against_serve(rows, _edf, in_release_order=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(jobs, min_size=1, max_size=4))
def test_updates_in_release_order_equal_the_passs_server(rows):
    """The same oracle for the planner's fast path, on releases in the updates' order
    (the last unit's first): only rows where two wait at once go through the event loop."""
    _check_against_serve(rows, _updates, in_release_order=True)


def test_fifo_ends_are_the_syncs_on_the_link_one_by_one():
    """Oracle: the syncs simulated one by one in release order (last unit first), each
    released when its unit's Backward ends."""
    rs = np.array([[[1.0, 4.0, 0.5, 3.0]]])
    bwd = np.array([[[2.0, 0.1, 1.0, 2.5]]])
    ends = -(np.cumsum(bwd[0, 0]) - bwd[0, 0])       # Backward(j) ends, before the stage's last
    got = _fifo_ends(ends[None, None], rs)[0, 0]
    t, want = -np.inf, {}
    for j in reversed(range(4)):
        t = max(t, ends[j]) + rs[0, 0, j]
        want[j] = t
    assert got.tolist() == [want[j] for j in range(4)]


@pytest.fixture(scope="module")
def planner7b():
    return Planner(trace_preset("llama2-7b"), load_platform("mt3000"))


@pytest.mark.parametrize("cand", [Candidate(2, 1, 1, 1, 1, 4, "full", "deadline"),
                                  Candidate(4, 4, 1, 0, 1, 4, "fsr", "deadline")], ids=lambda c: c.label())
def test_deadline_tail_equals_the_system_vm_with_few_replicas(planner7b, cand):
    """Oracle: the system VM on the compiled program. With one replica the embedding's
    update (stage 0's first unit) waits for layer 0's, released 2 ms before it; with four
    replicas and ZeRO-0 the all-reduces keep the link busy past the backward."""
    from ratc.vm.system.driver import compile_candidate, run_module
    ev = planner7b.evaluate_group([cand])[0]
    sim = run_module(compile_candidate(planner7b.model, cand, planner7b.platform, planner7b),
                     planner7b.platform, memory_limit=False)[1]
    assert ev.t_step == pytest.approx(sim.step_seconds, rel=1e-6)
