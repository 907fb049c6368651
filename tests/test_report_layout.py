"""The report's data model and the diagram's row layout, on hand-built inputs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.errors import RatcError
from ratc.report import diagram
from ratc.report.data import Interval, MemorySeries, PipelineData, StageBreakdown

LANE_KIND = {"F/B": "forward", "R": "recover", "GradSync": "grad_sync"}


def make(spans, stages=2) -> PipelineData:
    """Intervals from (stage, lane, start, length) tuples."""
    ivs = tuple(Interval(s, lane, LANE_KIND[lane], f"t{k}", a, a + n) for k, (s, lane, a, n) in enumerate(spans))
    end = max([iv.end for iv in ivs] + [0.0])
    return PipelineData("test", stages, ivs, 0.0, end, end)


def max_depth(intervals) -> int:
    """Oracle: the most intervals open at any one instant (half-open [start, end))."""
    points = sorted({iv.start for iv in intervals})
    return max((sum(1 for iv in intervals if iv.start <= t < iv.end) for t in points), default=0)


spans = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(sorted(LANE_KIND)),
                           st.integers(0, 50), st.integers(1, 20)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(spans)
def test_layout_packs_each_lane_into_its_overlap_depth(sp):
    """Greedy packing in start order is optimal: a lane needs as many rows as tasks overlap."""
    data = make(sp)
    rows = diagram.layout(data)
    key = lambda iv: (iv.stage, iv.lane, iv.label)  # noqa: E731
    assert sorted((iv for r in rows for iv in r.intervals), key=key) == sorted(data.intervals, key=key)
    for r in rows:
        assert all(a.end <= b.start for a, b in zip(r.intervals, r.intervals[1:]))
    for stage in range(2):
        for lane in LANE_KIND:
            ivs = [iv for iv in data.intervals if iv.stage == stage and iv.lane == lane]
            subs = [r for r in rows if r.stage == stage and r.lane == lane]
            assert len(subs) == max_depth(ivs)
    keys = [(r.stage, diagram.LANES.index(r.lane), r.sub) for r in rows]
    assert keys == sorted(keys)


def test_label_runs_merge_parts_of_one_task():
    ivs = (Interval(0, "F/B", "forward", "F0", 0, 2), Interval(0, "F/B", "forward", "F0", 2, 5),
           Interval(0, "F/B", "backward", "B0", 6, 7))
    (row,) = diagram.layout(PipelineData("t", 1, ivs, 0, 7, 7))
    assert diagram._label_runs(row) == [["F0", 0, 5], ["B0", 6, 7]]


def test_bad_inputs_say_what_is_wrong():
    with pytest.raises(RatcError, match="unknown lane 'X'"):
        Interval(0, "X", "forward", "F0", 0.0, 1.0)
    with pytest.raises(RatcError, match="unknown kind 'nap'"):
        Interval(0, "F/B", "nap", "F0", 0.0, 1.0)
    with pytest.raises(RatcError, match="ends .* before it starts"):
        Interval(0, "F/B", "forward", "F0", 2.0, 1.0)
    with pytest.raises(RatcError, match="stage 3 outside 0..1"):
        PipelineData("t", 2, (Interval(3, "F/B", "forward", "F0", 0.0, 1.0),), 0.0, 1.0, 1.0)
    with pytest.raises(RatcError, match="does not contain the tail start"):
        PipelineData("t", 2, (), 0.0, 1.0, 2.0)
    with pytest.raises(RatcError, match="needs tiers"):
        MemorySeries(0, (0.0,), {"long": (1,)})
    with pytest.raises(RatcError, match="times must not decrease"):
        MemorySeries(0, (1.0, 0.0), {"long": (1, 1), "medium": (0, 0), "short": (0, 0)})
    with pytest.raises(RatcError, match="unknown group 'misc'"):
        StageBreakdown(0, (("x", "misc", 1.0),))


def test_renders_are_deterministic_and_valid():
    data = make([(0, "F/B", 0, 2), (0, "R", 1, 2), (1, "F/B", 2, 3), (1, "GradSync", 5, 1)])
    for fmt, magic in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<svg")):
        a, b = diagram.render(data, fmt), diagram.render(data, fmt)
        assert a == b
        assert magic in a[:400]
    with pytest.raises(RatcError, match="unknown image format 'gif'"):
        diagram.render(data, "gif")


def test_an_empty_step_still_draws():
    data = PipelineData("empty", 1, (), 0.0, 0.0, 0.0)
    assert diagram.layout(data) == []
    assert diagram.render(data, "png").startswith(b"\x89PNG")
