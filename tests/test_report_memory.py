"""Memory over time from the VM's timeline, and the Eq. 9 breakdown from the planner."""

from __future__ import annotations

import pytest

from ratc.report import memory_plot
from ratc.report.data import MemoryData, MemorySeries, StageBreakdown
from ratc.report.from_vm import memory_from_timeline
from ratc.vm.system.engine import simulate
from ratc.vm.system.task_graph import TaskGraph
from life_programs import Unit, plan_text, simulated


def test_hand_built_program_gives_the_hand_computed_step_function():
    """compute: F0 0-10 (makes x), F1 10-20 (makes y), B0 20-25 (frees x, r), B1 25-30
    (frees y); ddr: R0 10-12 (makes r). x and y span two later main-path starts (medium),
    r one (short), the static w never dies (long)."""
    prog = TaskGraph(stages=1, replicas=1, clock=10.0)
    prog.static[(0, 0)] = (("w", 1000),)
    f0 = prog.add("0F0", "forward", 0, ["compute"], 10, allocs=(("x", 100),))
    f1 = prog.add("0F1", "forward", 0, ["compute"], 10, deps=(f0,), allocs=(("y", 50),))
    r0 = prog.add("0R0", "recover", 0, ["ddr"], 2, deps=(f0,), allocs=(("r", 7),))
    b0 = prog.add("0B0", "backward", 0, ["compute"], 5, deps=(f1, r0), frees=("x", "r"))
    prog.add("0B1", "backward", 0, ["compute"], 5, deps=(b0,), frees=("y",))
    (s,) = memory_from_timeline(simulate(prog), "t").series
    assert s.times == (0.0, 1.0, 2.5, 3.0)      # cycles 0, 10, 25, 30 at 10 cycles per second
    assert s.tiers == {"long": (1000,) * 4, "medium": (100, 150, 50, 0), "short": (0, 7, 0, 0)}
    assert s.total() == [1100, 1157, 1050, 1000]


def layer(k: int) -> Unit:
    return Unit(fwd=(40 + 7 * k, 25), bwd=(90, 50 + 3 * k), saved=400 + 10 * k, act_in=64, param=1500, opt=3500 + k,
                grad=3000, sync=60, update=20, prefetch=30)


@pytest.mark.parametrize("act", ["full", "ckpt", "fsr"])
def test_peaks_equal_the_vm_memory_tracker(act):
    """Over a one-step program the series covers the whole run, so each stage's peak must be
    the VM tracker's high-water mark; parameters and optimizer state live throughout (long)
    and are all that is left at the step end."""
    P = 3
    text = plan_text([[layer(p), layer(p + 1)] for p in range(P)], M=6, D=2, Z=1, act=act, p2p=11)
    tl, _ = simulated(text, steps=1)
    mem = memory_from_timeline(tl, "t")
    assert [s.peak() for s in mem.series] == tl.memory.stage_peaks()
    for s in mem.series:
        state = sum(1500 + 3500 + k for k in (s.stage, s.stage + 1))
        assert set(s.tiers["long"]) == {state}
        assert s.total()[-1] == state


def test_breakdown_terms_add_up_to_the_planners_eq9():
    from ratc.frontend.presets import trace_preset
    from ratc.step.config import Candidate
    from ratc.planner.search import Planner
    from ratc.platform import load_platform
    from ratc.report.from_planner import breakdown

    planner = Planner(trace_preset("tiny", 64), load_platform("mt3000"))
    _, mem, _ = planner.detail(Candidate(P=2, D=4, T=1, Z=2, b=2, A=8, act="fsr", pref="deadline"))
    stages = breakdown(mem)
    assert [st.stage for st in stages] == [0, 1]
    for st in stages:
        p = st.stage
        assert st.total == pytest.approx(mem.total[0, p])
        assert st.group("state") == pytest.approx(mem.state[0, p])
        assert st.group("activations") == pytest.approx(mem.activations[0, p])
        assert st.group("buffers") == pytest.approx(mem.buffers[0, p])


def series(stage: int, peak: int) -> MemorySeries:
    return MemorySeries(stage, (0.0, 1.0, 2.0), {"long": (5, 5, 5), "medium": (0, peak, 0), "short": (0, 1, 0)})


def test_large_pipelines_draw_the_highest_peaks_in_stage_order():
    data = MemoryData("t", tuple(series(s, (s * 7) % 20) for s in range(20)), budget=30)
    shown = memory_plot.shown_stages(data)
    assert len(shown) == memory_plot.MAX_PANELS
    assert [s.stage for s in shown] == sorted(s.stage for s in shown)
    cut = min(s.peak() for s in shown)
    assert all(s.peak() <= cut for s in data.series if s not in shown)


def test_memory_pictures_render():
    data = MemoryData("t", tuple(series(s, 10 + s) for s in range(3)), budget=18, step_end=2.0)
    assert memory_plot.render_timeline(data, "png").startswith(b"\x89PNG")
    bd = [StageBreakdown(p, (("params", "state", 4e9), ("activations", "activations", 2e9 * p),
                             ("workspace", "buffers", 1e8))) for p in range(3)]
    svg = memory_plot.render_breakdown(bd, 2e10, "Eq. 9", "svg")
    assert b"<svg" in svg[:400]
