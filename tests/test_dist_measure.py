"""`ratc launch --measure K`: the real step against the planner's and the VM's predictions.

Oracles: hand-built event lists and task graphs whose per-kind sums are known; the worker's
own step times (`--csv`) for the measured line; `ratc run --json` for the predictions.
"""

import json
import re
from pathlib import Path
from statistics import median
from types import SimpleNamespace

import pytest

from ratc.cli.main import main
from ratc.dist.measure import Figure, Prediction, measure, planner_kind_seconds, task_kind, vm_kind_seconds
from ratc.dist.worker import RankResult
from ratc.errors import RatcError
from ratc.vm.system.task_graph import Task

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")


@pytest.mark.parametrize("name,expected", [
    ("0F3@1", (0, "forward")), ("12B0@40", (12, "backward")), ("1R2@3", (1, "recover")),
    ("0SEND_F3", (0, "send")), ("1RECV_B0", (1, "recv")), ("0G@5", (0, "grad_sync")),
    ("0RS1@5", (0, "reduce")), ("1AG_F0@4", (1, "gather")), ("0U@2", (0, "update")),
    ("0P@2", (0, "prefetch")), ("0T@0", (0, "tie_sum")), ("0PARAM@3", (0, "marker")),
    ("1F0@2#2", (1, "forward")), ("0I3@12", (0, "backward")), ("0W3@12", (0, "backward")),
])
def test_action_names_give_their_stage_and_task_kind(name, expected):
    assert task_kind(name) == expected


def test_a_name_outside_action_notation_is_refused():
    with pytest.raises(RatcError, match="'wait 0G1' is not in action notation"):
        task_kind("wait 0G1")


def _event(track, name, kind, start_ms, end_ms, step):
    return (track, name, kind, int(start_ms * 1e6), int(end_ms * 1e6), {"step": step})


def _rank_events(p: int, step: int, scale: float) -> list:
    """One step of a stage of a P=2 program: every figure in ms, times `scale`."""
    s = 1000 * step
    if p == 0:
        return [_event("compute", "0F0@0", "forward", s, s + 2 * scale, step),
                _event("compute", "0F1@0", "forward", s + 2, s + 2 + 3 * scale, step),
                _event("compute", "0SEND_F0", "send", s + 5, s + 6, step),      # an issue: not counted
                _event("send", "0SEND_F0", "send", s + 5, s + 900, step),       # waited at the step's end
                _event("receive", "0RECV_B0", "send", s + 10, s + 10 + 4 * scale, step),
                _event("waits", "wait 0RECV_B0", "wait", s + 12, s + 14, step),
                _event("compute", "0B0@1", "backward", s + 20, s + 20 + 5 * scale, step),
                _event("collectives", "0G@0", "grad_sync", s + 30, s + 30 + 6 * scale, step),
                _event("compute", "0U@0", "update", s + 40, s + 41, step)]
    return [_event("receive", "1RECV_F0", "send", s + 5, s + 5 + 7 * scale, step),
            _event("compute", "1F0@2", "forward", s + 12, s + 12 + 8 * scale, step),
            _event("compute", "1B0@2", "backward", s + 20, s + 20 + 9 * scale, step)]


def _prediction(**kinds) -> Prediction:
    return Prediction("mt3000", False, 0.004, 0.005, {("forward", 0): 0.001}, kinds)


def test_per_kind_times_of_a_hand_built_trace_are_its_known_sums():
    """P=2, D=1, one warm-up step and three measured ones scaled 1, 3, 2: each row's median is
    the scale-2 step's sum, min and max the others'; a transfer is its receiver's record at the
    sender's stage; warm-up, waits, sends' own spans and comm handlers are not counted."""
    scales = {0: 50.0, 1: 1.0, 2: 3.0, 3: 2.0}
    trace = [[e for step, k in scales.items() for e in _rank_events(p, step, k)] for p in (0, 1)]
    results = [RankResult(0, step_seconds=[9.0, 0.3, 0.1, 0.2], trace=trace), RankResult(1)]
    found = measure(results, 1, 1, _prediction(**{"forward": None}))
    rows = {(r.kind, r.stage): r.measured for r in found.rows}
    expected = {("forward", 0): 5, ("forward", 1): 8, ("backward", 0): 5, ("backward", 1): 9,
                ("send", 0): 7, ("send", 1): 4, ("grad_sync", 0): 6}
    assert set(rows) == set(expected) | {("update", 0)}
    for key, ms in expected.items():
        assert rows[key].median == pytest.approx(2 * ms / 1e3), key
        assert (rows[key].low, rows[key].high) == pytest.approx((ms / 1e3, 3 * ms / 1e3)), key
    assert rows[("update", 0)].samples == pytest.approx((1e-3,) * 3)
    blocked = {(r.kind, r.stage): r.blocked for r in found.rows}
    assert blocked[("send", 1)].samples == pytest.approx((2e-3,) * 3)      # its receiver's waits
    assert blocked[("send", 0)].samples == blocked[("grad_sync", 0)].samples == (0.0,) * 3
    assert blocked[("forward", 0)] is None
    assert [(r.kind, r.stage) for r in found.rows] == [       # kinds in KINDS order, then stages
        ("forward", 0), ("forward", 1), ("backward", 0), ("backward", 1), ("send", 0), ("send", 1),
        ("grad_sync", 0), ("update", 0)]
    assert found.step == Figure(0.2, 0.1, 0.3, (0.3, 0.1, 0.2))


def test_a_stages_replicas_are_pooled_and_transfers_go_to_their_own_replica():
    """P=2, D=2: stage 0's sends are recorded by stage 1's two replicas, each its own sample."""
    trace = [_rank_events(0, 1, 1.0), _rank_events(0, 1, 3.0), _rank_events(1, 1, 1.0), _rank_events(1, 1, 5.0)]
    results = [RankResult(0, step_seconds=[1.0, 0.5], trace=trace)] + [RankResult(r) for r in (1, 2, 3)]
    rows = {(r.kind, r.stage): r.measured for r in measure(results, 2, 1, _prediction()).rows}
    assert rows[("send", 0)].samples == pytest.approx((7e-3, 35e-3))
    assert rows[("forward", 1)].samples == pytest.approx((8e-3, 40e-3))


def test_a_transfer_or_collective_is_timed_from_when_its_last_member_issued_it():
    """A receive posted at 2 ms whose send is issued at 10 ms and seen complete at 15 ms took
    at most 5 ms; an all-reduce issued at 0 and 4 ms by the two replicas, seen complete at 9
    and 6 ms, at most 5 and 2 ms. Waits count from the same instants: a wait from 3 ms for
    that receive blocked on the transfer 5 ms, one from 1 ms for that all-reduce 5 ms."""
    stage0 = [[_event("send", "0SEND_F0", "send", 10, 30, 1), _event("collectives", "0G@0", "grad_sync", 0, 9, 1),
               _event("waits", "wait 0G@0", "wait", 1, 9, 1)],
              [_event("send", "0SEND_F0", "send", 1, 30, 1), _event("collectives", "0G@0", "grad_sync", 4, 6, 1),
               _event("waits", "wait 0G@0", "wait", 5, 6, 1)]]
    stage1 = [[_event("receive", "1RECV_F0", "send", 2, 15, 1), _event("waits", "wait 1RECV_F0", "wait", 3, 15, 1)],
              [_event("receive", "1RECV_F0", "send", 3, 4, 1)]]
    results = [RankResult(0, step_seconds=[1.0, 0.5], trace=stage0 + stage1)] + [RankResult(r) for r in (1, 2, 3)]
    found = measure(results, 2, 1, _prediction())
    rows = {(r.kind, r.stage): r.measured for r in found.rows}
    assert rows[("send", 0)].samples == pytest.approx((5e-3, 1e-3))
    assert rows[("grad_sync", 0)].samples == pytest.approx((5e-3, 2e-3))
    blocked = {(r.kind, r.stage): r.blocked for r in found.rows}
    assert blocked[("send", 0)].samples == pytest.approx((5e-3, 0.0))
    assert blocked[("grad_sync", 0)].samples == pytest.approx((5e-3, 1e-3))


def test_an_interleaved_receive_is_the_transfer_of_its_wrapped_sender():
    """v = 2, P = 2: rank 0's chunk 1 receives unit 3's input from rank 1 (0RECV_F0@3 is
    1SEND_F0@3's, issued at 10 ms, seen complete at 15 ms: 5 ms at stage 1), and rank 1's
    chunk 0 the gradient of unit 4's input from rank 0 (1RECV_B0@4, posted at 19 ms, is
    0SEND_B0@4's, issued at 20 ms: 2 ms at stage 0)."""
    trace = [[_event("receive", "0RECV_F0@3", "send", 2, 15, 1), _event("send", "0SEND_B0@4", "send", 20, 40, 1)],
             [_event("send", "1SEND_F0@3", "send", 10, 40, 1), _event("receive", "1RECV_B0@4", "send", 19, 22, 1)]]
    results = [RankResult(0, step_seconds=[1.0, 0.5], trace=trace), RankResult(1)]
    rows = {(r.kind, r.stage): r.measured for r in measure(results, 1, 1, _prediction()).rows}
    assert set(rows) == {("send", 0), ("send", 1)}
    assert rows[("send", 1)].samples == pytest.approx((5e-3,))
    assert rows[("send", 0)].samples == pytest.approx((2e-3,))


@pytest.mark.parametrize("act,sched", [("Full", ""), ("Ckpt", ""), ("Ckpt", ",sched=zb1p"), ("Full", ",sched=zbv")])
def test_the_planners_per_kind_times_of_an_interleaved_program_are_the_vms(tmp_path, act, sched):
    """Oracle: the system VM simulating the compiled v = 2 program task by task; each rank's
    Forwards, Backwards (zero bubble: its Is and Ws), Recovers and sends are its two chunks'
    (the planner's virtual stages p and P + p, ZB-V's p and 2P - 1 - p, whose bottom sends
    nothing; the VM counts whole cycles), and its state chain's pieces are per rank."""
    from ratc.dist.measure import predict
    from ratc.program_check import open_program

    out = tmp_path / "prog"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--plan", f"P=2,D=1,Z=1,b=1,A=4,{act},deadline,v=2{sched}",
                 "--no-run", "-o", str(out)]) == 0
    pred = predict(open_program(out))
    kinds = [(k, p) for k in ("forward", "backward", "recover", "send", "update") for p in (0, 1)
             if (k, p) in pred.vm_kinds]
    assert len(kinds) == (10 if act == "Ckpt" else 8)
    for key in kinds:
        assert pred.planner_kinds[key] == pytest.approx(pred.vm_kinds[key], rel=1e-4), key


def test_a_tie_sum_waits_for_the_other_stages_copy():
    """The tiny-tied preset's embedding (unit 0, stage 0) and head (unit 5, stage 1) are one
    tie group: stage 1's TieSum issued at 1 ms and seen complete at 9 ms could start only at
    6 ms, when stage 0 issued its own."""
    from ratc.dist.measure import tie_members
    from ratc.vm.functional.session import TrainConfig, compile_for

    ties = tie_members(compile_for(TrainConfig(model=EXAMPLE, preset="tiny-tied", P=2, D=1, Z=0, act="full", M=2,
                                               b=1, reference=False)))
    assert ties == {0: ((0, 0), (1, 5)), 5: ((0, 0), (1, 5))}
    trace = [[_event("collectives", "0T@0", "grad_sync", 6, 9.5, 1)],
             [_event("collectives", "1T@5", "grad_sync", 1, 9, 1)]]
    results = [RankResult(0, step_seconds=[1.0, 0.5], trace=trace), RankResult(1)]
    rows = {(r.kind, r.stage): r.measured for r in measure(results, 1, 1, _prediction(), ties).rows}
    assert rows[("tie_sum", 1)].samples == pytest.approx((3e-3,))
    assert rows[("tie_sum", 0)].samples == pytest.approx((3.5e-3,))
    without = {(r.kind, r.stage): r.measured for r in measure(results, 1, 1, _prediction()).rows}
    assert without[("tie_sum", 1)].samples == pytest.approx((8e-3,))


def test_the_measured_line_and_table_are_formatted_exactly():
    trace = [[e for step in (0, 1) for e in _rank_events(p, step, 1.0)] for p in (0, 1)]
    results = [RankResult(0, step_seconds=[9.0, 0.25], trace=trace), RankResult(1)]
    text = measure(results, 1, 1, _prediction(forward=0.004)).text()
    lines = text.splitlines()
    assert lines[0] == "step time: measured 0.25 s, planner 0.004 s (error -98.4 %), VM 0.005 s (error -98.0 %)"
    assert lines[1].startswith("note: the predictions are for mt3000, the platform the program was compiled for, "
                               "not this machine")
    assert lines[2] == "measured 1 step after 1 warm-up step: rank 0's step time median 0.25 s [0.25 .. 0.25]"
    assert lines[6] == ("  forward        0        5.000        [5.000 .. 5.000]           -           -         -"
                        "       1.000   -80.0 %")
    assert lines[11] == ("  send           1        4.000        [4.000 .. 4.000]       2.000           -         -"
                         "           -         -")
    assert text == measure(results, 1, 1, _prediction(forward=0.004)).text()


def test_a_run_without_steps_after_the_warm_up_is_refused():
    results = [RankResult(0, step_seconds=[0.3], trace=[[]])]
    with pytest.raises(RatcError, match="none is left to measure after 1 warm-up step"):
        measure(results, 1, 1, _prediction())


def test_the_vms_per_kind_times_split_a_co_running_recover_from_its_host():
    """The measured (last) step's replica-0 tasks: a Forward of 100 cycles hosting a Recover
    that adds 30 is 70 of forward and 30 of recover; the Recover task itself (no engine)
    counts nothing, nor do markers, receives, replica 1 and the step before."""
    cpu = ((0, 0, "compute"),)
    tasks = [Task("0F0@0", "forward", 0, 0, cpu, 100, step=1, corun=30),
             Task("0R0@1", "recover", 0, 0, (), 100, step=1),
             Task("1B0@2", "backward", 1, 0, ((1, 0, "compute"),), 40, step=1),
             Task("1R0@2", "recover", 1, 0, ((1, 0, "compute"),), 25, step=1),    # a recover of its own
             Task("0SEND_F0", "send", 0, 0, ((0, 0, "tx"),), 7, step=1),
             Task("1RECV_F0", "send", 1, 0, (), 0, step=1),
             Task("0PARAM@0", "marker", 0, 0, (), 0, step=1),
             Task("0F0@0", "forward", 0, 1, cpu, 500, step=1),
             Task("0F0@0", "forward", 0, 0, cpu, 900, step=0)]
    tl = SimpleNamespace(program=SimpleNamespace(tasks=tasks, steps=2, clock=10.0))
    assert vm_kind_seconds(tl) == {("forward", 0): 7.0, ("recover", 0): 3.0, ("backward", 1): 4.0,
                                   ("recover", 1): 2.5, ("send", 0): 0.7}


def test_the_planners_forward_is_its_stage_compute_without_the_boundary_send():
    """Planner.detail's Forward carries the stage's send (ratc.planner.timing); the per-kind
    figure is M x b x the stage's forward work, the send counted once per transfer apart."""
    from ratc.planner.search import Planner
    from ratc.platform import load_platform
    from ratc.step.config import parse_config
    from ratc.frontend.modelfile import trace_model_file

    cand = parse_config("P=2,D=1,Z=1,b=2,A=3,Full,deadline")
    planner = Planner(trace_model_file(EXAMPLE, "tiny"), load_platform("mt3000"))
    sc, _, st = planner.detail(cand)
    kinds = planner_kind_seconds(st, cand)
    p2p = float(st.p2p[0, 0])
    assert p2p > 0
    for p in (0, 1):
        assert kinds[("forward", p)] == pytest.approx(3 * 2 * float(sc.fwd[p]))
        assert kinds[("send", p)] == pytest.approx(3 * p2p)
        assert kinds[("update", p)] == float(st.update[0, p])


@pytest.mark.parametrize("argv,message", [
    (["--measure", "0"], "--measure must be at least 1 (measured steps after 2 warm-up ones), got 0"),
    (["--measure", "-3"], "--measure must be at least 1"),
    (["--measure", "2", "--steps", "5"], "--measure K runs 2 + K steps from the start; drop --steps"),
    (["--measure-json", "m.json"], "--measure-json writes the measurement of --measure K; give --measure too"),
])
def test_bad_measure_options_are_refused_before_any_rank_starts(tmp_path, capsys, argv, message):
    assert main(["launch", str(tmp_path / "no-such-program"), *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_measure_prints_the_medians_of_the_workers_step_times_beside_ratc_runs_predictions(tmp_path, capfd):
    out, csv, js, run = tmp_path / "prog", tmp_path / "steps.csv", tmp_path / "m.json", tmp_path / "run.json"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--plan", "P=2,D=1,Z=1,b=1,A=2,FSR,deadline",
                 "--no-run", "-o", str(out)]) == 0
    trace = tmp_path / "real.json"
    assert main(["launch", str(out), "--measure", "2", "--timeout", "60", "--csv", str(csv),
                 "--measure-json", str(js), "--trace", str(trace)]) == 0
    printed = capfd.readouterr().out
    assert main(["run", str(out), "--json", "-o", str(run)]) == 0
    seconds = [float(row.split(",")[2]) for row in csv.read_text().splitlines()[1:]]
    assert len(seconds) == 4                    # 2 warm-up + 2 measured steps
    got = json.loads(js.read_text())
    step = got["step_time_s"]
    assert step["measured"]["samples"] == pytest.approx(seconds[2:], abs=1e-6)
    assert step["measured"]["median"] == pytest.approx(median(seconds[2:]), abs=1e-6)
    sim = json.loads(run.read_text())
    assert step["planner"] == sim["predicted_step_time_s"] and step["vm"] == sim["results"]["step_time_s"]
    assert step["planner_error"] == pytest.approx((step["planner"] - step["measured"]["median"])
                                                  / step["measured"]["median"])
    line = next(li for li in printed.splitlines() if li.startswith("step time: "))
    assert line == (f"step time: measured {step['measured']['median']:.4g} s, planner {step['planner']:.4g} s "
                    f"(error {100 * step['planner_error']:+.1f} %), VM {step['vm']:.4g} s "
                    f"(error {100 * step['vm_error']:+.1f} %)")
    assert "the predictions are for mt3000" in printed
    assert got["warmup_steps"] == 2 and got["measured_steps"] == 2 and not got["predicts_this_machine"]
    kinds = {(k["kind"], k["stage"]) for k in got["kinds"]}
    assert {("forward", 0), ("forward", 1), ("backward", 1), ("recover", 0), ("send", 0), ("send", 1),
            ("update", 1)} <= kinds
    assert all(len(k["measured_s"]["samples"]) == 2 for k in got["kinds"])
    # --trace records the warm-up too; the measurement leaves it out
    recorded = {e["args"]["step"] for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"}
    assert recorded == {0, 1, 2, 3}
    assert re.search(r"^  forward +0 +\d+\.\d{3} +\[", printed, re.M)


def test_the_ranks_record_nothing_before_the_first_measured_step():
    from ratc.dist.launch import launch
    from ratc.dist.worker import RunConfig
    from ratc.vm.functional.session import TrainConfig, compile_for

    module = compile_for(TrainConfig(model=EXAMPLE, P=1, D=2, Z=1, M=2, b=1, reference=False))
    results = launch(module, RunConfig(model=EXAMPLE, preset="tiny", steps=3, timeout_s=60, trace=True,
                                       record_from=2), 1, 2, deadline_s=240)
    assert len(results[0].trace) == 2
    for events in results[0].trace:
        assert {e[5]["step"] for e in events} == {2}
        assert {e[0] for e in events} >= {"compute", "collectives", "waits"}
