"""The P=4, M=8 pipeline diagrams (paper Fig. 6) draw exactly the simulated schedule."""

from __future__ import annotations

import pytest

from ratc.lifecycle.actions import parse
from ratc.report import diagram
from ratc.report.build import DIAGRAM_POLICIES, policy_diagram
from ratc.report.from_vm import task_label

P, M = 4, 8

# Megatron-LM's forward_backward_pipelining_without_interleaving (and torch.distributed.
# pipelining's Schedule1F1B) for P=4, M=8, written out by hand: stage p runs P-p-1 warm-up
# forwards, then one forward and one backward alternately, then the remaining backwards.
MEGATRON_1F1B = {
    0: "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
    1: "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
    2: "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
    3: "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
}


@pytest.fixture(scope="module")
def planner():
    from ratc.frontend.presets import trace_preset
    from ratc.planner.search import Planner
    from ratc.platform import load_platform

    return Planner(trace_preset("llama2-7b", 2048), load_platform("mt3000"))


@pytest.fixture(scope="module")
def diagrams(planner):
    return {policy: policy_diagram(planner, P, M, policy) for policy in DIAGRAM_POLICIES}


def simulated_tasks(planner, policy):
    """The same configuration compiled and simulated again, straight from the VM:
    (tasks of the measured step on replica 0, step window, results)."""
    from ratc.step.config import Candidate
    from ratc.vm.system.driver import compile_candidate, run_module
    from ratc.vm.system.results import step_window

    cand = Candidate(P=P, D=2, T=1, Z=2, b=1, A=M, act=DIAGRAM_POLICIES[policy], pref="deadline")
    tl, res = run_module(compile_candidate(planner.model, cand, planner.platform, planner), planner.platform,
                         memory_limit=False)
    prog = tl.program
    last = prog.steps - 1
    # a co-running Recover (FSR) holds no engine but runs as long as its host
    tasks = [(t.stage, t.kind, t.name, tl.start[i] / prog.clock, tl.end[i] / prog.clock,
              bool(t.resources) or t.alongside)
             for i, t in enumerate(prog.tasks) if t.step == last and t.replica == 0]
    return tasks, [w / prog.clock for w in step_window(tl)], res


@pytest.mark.parametrize("policy", sorted(DIAGRAM_POLICIES))
def test_diagram_data_is_the_simulated_schedule(planner, diagrams, policy):
    data, _ = diagrams[policy]
    tasks, (w0, w1), res = simulated_tasks(planner, policy)
    drawn = sorted((iv.stage, iv.kind, iv.label, iv.start, iv.end) for iv in data.intervals)
    # Every task that holds a cluster resource or co-runs; the rest (markers, arrivals) take no time.
    busy = [(s, kind, task_label(name), start, end) for s, kind, name, start, end, res_ in tasks if res_]
    assert all(start == end for *_, start, end, res_ in tasks if not res_)
    assert len(drawn) == len(busy) > 0
    assert drawn == sorted(busy)
    assert (data.step_start, data.step_end) == (w0, w1)
    assert data.tail == pytest.approx(res.tail_seconds, abs=1e-12)
    last_bwd = max(end for _, kind, _, _, end, _ in tasks if kind == "backward")
    assert data.tail_start == last_bwd


@pytest.mark.parametrize("policy", sorted(DIAGRAM_POLICIES))
def test_main_lane_follows_megatron_1f1b(diagrams, policy):
    data, _ = diagrams[policy]
    for stage, order in MEGATRON_1F1B.items():
        (row,) = [r for r in diagram.layout(data) if r.stage == stage and r.lane == "F/B"]
        # each box is one layer's task ('F3@12'); a micro-batch's run through the stage's
        # layers is labelled once, with its range in issue order ('F3@9-16', 'B3@16-9')
        labels = [label for label, _, _ in diagram._label_runs(row)]
        assert " ".join(label.split("@")[0] for label in labels) == order
        units = sorted({parse(f"{stage}{iv.label}").unit for iv in row.intervals})
        assert units == list(range(units[0], units[-1] + 1))
        ranges = {"F": f"@{units[0]}-{units[-1]}", "B": f"@{units[-1]}-{units[0]}"}
        assert all(label.endswith(ranges[label[0]]) for label in labels), labels


def compute_order(data, stage: int) -> list:
    """Labels of the stage's compute work (Forward, Backward, Recover) in time order, with
    consecutive boxes of one task (its layers) merged."""
    boxes = sorted((iv for iv in data.intervals if iv.stage == stage and iv.lane in ("F/B", "R")),
                   key=lambda iv: (iv.start, iv.end))
    labels = []
    for iv in boxes:
        if not labels or labels[-1] != iv.label:
            labels.append(iv.label)
    return labels


def test_standard_recomputes_right_before_each_backward(diagrams):
    """Fig. 6 (a): with backward-time recovery every Backward(m) of a layer is immediately
    preceded by Recover(m) of that layer (embedding and head are saved, not recomputed)."""
    data, _ = diagrams["standard"]
    for stage in range(P):
        order = compute_order(data, stage)
        for k, label in enumerate(order):
            if label.startswith("R"):
                assert order[k + 1] == "B" + label[1:], (stage, order[k - 2:k + 3])
        assert sum(lab.startswith("R") for lab in order) >= M


def test_fsr_is_never_slower_than_standard(diagrams):
    """Eq. 7: forward-side recovery hides what fits its window and falls back otherwise, so
    the FSR step is at most the standard one."""
    assert diagrams["fsr"][1].step_seconds <= diagrams["standard"][1].step_seconds


@pytest.mark.parametrize("policy", sorted(DIAGRAM_POLICIES))
def test_layout_rows_hold_every_task_without_overlap(diagrams, policy):
    data, _ = diagrams[policy]
    rows = diagram.layout(data)
    assert sum(len(r.intervals) for r in rows) == len(data.intervals)
    for r in rows:
        assert all(a.end <= b.start for a, b in zip(r.intervals, r.intervals[1:]))
        assert {iv.lane for iv in r.intervals} == {r.lane}
    assert {r.lane for r in rows} >= {"F/B", "R", "GradSync", "UpdateShard", "PrefetchW"}


def test_diagram_cli_writes_png_and_svg(tmp_path, planner):
    from ratc.cli.main import main

    for suffix, magic in (("png", b"\x89PNG"), ("svg", b"<svg")):
        out = tmp_path / f"fsr.{suffix}"
        assert main(["diagram", "--pp", "4", "--microbatches", "8", "--policy", "fsr", "-o", str(out)]) == 0
        data = out.read_bytes()
        assert magic in data[:400]
        # no date and no library version: the same diagram is the same file on any install
        assert b"Matplotlib v" not in data and b"<dc:date>" not in data


def test_diagram_cli_errors(tmp_path, capsys):
    from ratc.cli.main import main

    assert main(["diagram", "--pp", "4", "--microbatches", "8", "-o", str(tmp_path / "x.jpg")]) == 1
    assert "use .png or .svg" in capsys.readouterr().err
    assert main(["diagram", "--pp", "64", "--microbatches", "8", "-o", str(tmp_path / "x.png")]) == 1
    assert "P=64" in capsys.readouterr().err
    assert main(["diagram", "--pp", "4", "--microbatches", "0", "-o", str(tmp_path / "x.png")]) == 1
    assert "at least 1" in capsys.readouterr().err


def test_a_diagram_of_more_micro_batches_than_can_be_drawn_is_refused(tmp_path, capsys):
    from ratc.cli.main import main

    from ratc.cli.diagram import MAX_MICROBATCHES

    for extra, message in ((["--microbatches", str(MAX_MICROBATCHES + 1)], f"a diagram shows at most {MAX_MICROBATCHES}"),
                           (["--microbatches", "4", "--width", "1"], "--width must be 2..100 inches")):
        assert main(["diagram", "--preset", "tiny", "--pp", "2", *extra, "-o", str(tmp_path / "d.png")]) == 1
        assert message in capsys.readouterr().err
    assert not (tmp_path / "d.png").exists()
