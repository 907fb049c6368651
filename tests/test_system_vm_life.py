"""System VM on lifecycle-compiled programs: closed forms, symmetry, memory, CLI, errors."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.ir import print_module
from ratc.frontend.graph_ir import module_from_profile
from ratc.ir.core import Operation
from ratc.lifecycle.lowering import find_pipeline, find_plan
from ratc.platform import load_platform
from ratc.program import write_program
from ratc.step.config import parse_config
from ratc.vm.system.driver import compile_candidate, kendall_tau, run_module
from ratc.vm.system.engine import simulate
from ratc.vm.system.life import translate
from ratc.vm.system.task_graph import TaskGraphError
from ratc.vm.system.results import critical_path, step_window
from life_programs import Unit, lowered, plan_text

ROOT = Path(__file__).resolve().parents[1]
MT3000 = load_platform("mt3000")


@pytest.fixture(scope="module")
def tiny():
    from ratc.frontend.presets import trace_preset
    return trace_preset("tiny", 128)


@pytest.mark.parametrize("config", ["P=2,D=3,Z=2,b=1,A=4,FSR,deadline", "P=2,D=2,Z=0,b=2,A=3,Ckpt,bulk",
                                    "P=3,D=2,Z=1,b=1,A=5,Full,layerwise"])
def test_symmetric_replicas_equal_explicit_on_compiled_programs(tiny, config):
    module = compile_candidate(tiny, parse_config(config), MT3000)
    sym, exp = (translate(module, MT3000, symmetric=s, memory_limit=False) for s in (True, False))
    ts, te = simulate(sym), simulate(exp)
    assert te.makespan == ts.makespan
    want = sorted((t.step, t.stage, t.name, ts.start[i], ts.end[i]) for i, t in enumerate(sym.tasks))
    for r in range(exp.replicas):
        got = sorted((t.step, t.stage, t.name, te.start[i], te.end[i]) for i, t in enumerate(exp.tasks)
                     if t.replica == r)
        assert got == want
    assert ts.memory.stage_peaks() == te.memory.stage_peaks()


def test_vm_peak_memory_tracks_the_lifecycle_memory_plan(tiny):
    # Both count the same values; the VM over simulated time, the memory plan over the
    # issue order, so they may differ only by values whose lifetimes overlap differently.
    module = compile_candidate(tiny, parse_config("P=2,D=2,Z=2,b=1,A=4,FSR,deadline"), MT3000)
    planned = module.body.ops[-1].attributes
    _, res = run_module(module, MT3000, memory_limit=False)
    # Under ZeRO >= 2 memory-plan keeps a bucket until the Backward reusing its buffer issues;
    # the VM frees it when its reduce-scatter ends, which may be earlier (tiny's buckets are
    # a large share of its memory), never later.
    for vm, plan in zip(res.stage_peak_bytes, planned["peak"]):
        assert 0.9 * plan <= vm <= plan


def _bucket_lifetimes(module):
    """Per (stage, replica): (alloc cycle, free cycle) of every bucket value over simulated time."""
    prog = translate(module, MT3000, memory_limit=False)
    tl = simulate(prog)
    born, last = {}, {}
    for i, t in enumerate(prog.tasks):
        for name, _ in t.allocs:
            if ".bucket" in name:
                born[(t.stage, t.replica, name)] = tl.start[i]
        for name in t.frees:
            if isinstance(name, str) and ".bucket" in name:
                key = (t.stage, t.replica, name)
                last[key] = max(last.get(key, 0), tl.end[i])
    out: dict = {}
    for key, t0 in born.items():
        out.setdefault(key[:2], []).append((t0, last[key]))
    return out


def test_zero3_buckets_no_longer_pile_up(tiny):
    # ZeRO-3's link serves gathers (prio 1) before reduce-scatters (prio 2); without the
    # double-buffer dependency unreduced buckets piled up every micro-batch. Now at most two
    # are live at any simulated moment (a free at t comes before an allocation at t).
    module = compile_candidate(tiny, parse_config("P=1,D=8,Z=3,b=1,A=8,Ckpt,deadline"), MT3000)
    lives = _bucket_lifetimes(module)
    assert lives
    for key, spans in lives.items():
        events = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans])
        live = most = 0
        for _, d in events:
            live += d
            most = max(most, live)
        assert most <= 2, f"stage/replica {key}: {most} buckets live at once"
        units = len(find_plan(module).region.ops)
        assert len(spans) == 2 * 8 * units   # every Backward of both simulated steps made its bucket


@pytest.mark.parametrize("config", ["P=2,D=4,Z=2,b=1,A=4,FSR,deadline", "P=2,D=4,Z=3,b=1,A=4,FSR,deadline",
                                    "P=1,D=8,Z=3,b=1,A=4,Ckpt,deadline", "P=3,D=2,Z=3,b=1,A=6,Full,deadline",
                                    "P=2,D=8,Z=2,b=2,A=3,Ckpt,bulk"])
def test_vm_peak_stays_within_eq9_under_zero2_and_3(tiny, config):
    # Double-buffered buckets: a Backward waits for the reduce-scatter of the bucket two
    # Backwards back, so the VM never holds more than Eq. 9's two buckets per stage.
    from ratc.planner.search import Planner
    cand = parse_config(config)
    planner = Planner(tiny, MT3000)
    _, mem, _ = planner.detail(cand)
    module = compile_candidate(tiny, cand, MT3000)
    _, res = run_module(module, MT3000, memory_limit=False)
    for p, vm in enumerate(res.stage_peak_bytes):
        assert vm <= 1.005 * float(mem.total[0, p]), f"stage {p}: VM {vm} above Eq. 9 {float(mem.total[0, p])}"


def test_trace_slices_are_named_by_parsable_tokens_with_the_long_form_in_their_args(tiny):
    """Every slice of a compiled program's trace is a token that parses back to its task's
    stage, micro-batch and layer, and its args describe it in words: the tiny preset's 4
    decoder layers are units 1..4, unit 0 the embedding and unit 5 the head."""
    from ratc.lifecycle.actions import parse
    from ratc.vm.system.trace import chrome_trace
    module = compile_candidate(tiny, parse_config("P=2,D=2,Z=2,b=1,A=2,FSR,deadline"), MT3000)
    tl, _ = run_module(module, MT3000, steps=1, memory_limit=False)
    slices = [e for e in chrome_trace(tl)["traceEvents"] if e["ph"] == "X"]
    names = {e["name"] for e in slices}
    assert {"0F0@1", "0F1@2", "1B0@5", "0B1@0", "0SEND_F0", "1SEND_B1", "0G@1#0", "0U@1", "0P@1#0",
            "0RS0@2#0", "1R0@3"} <= names
    words = {0: "the embedding", 5: "the head"}
    for e in slices:
        a, args = parse(e["name"]), e["args"]
        assert f"on stage {a.stage}" in args["description"], e
        assert a.unit == args.get("layer") and a.mb == args.get("micro_batch", a.mb), e
        if a.unit is not None:
            assert words.get(a.unit, f"layer {a.unit}") in args["description"], e
        if a.mb is not None:
            assert f"micro-batch {a.mb}" in args["description"], e
    long = {e["name"]: e["args"]["description"] for e in slices}
    assert long["0F1@2"] == "Forward of micro-batch 1 through layer 2 on stage 0"
    assert long["1B0@5"] == "Backward of micro-batch 0 through the head on stage 1"
    assert long["0G@1#0"] == "GradSync of layer 1 on stage 0 (ring step 0)"
    assert long["1SEND_B1"] == "Send of micro-batch 1's gradient to stage 0 on stage 1"


def test_op_without_handler_is_named():
    module = lowered(plan_text([[Unit(fwd=(5, 0), bwd=(5, 0))]], M=1))
    unit = find_plan(module).region.ops[1]
    find_pipeline(module).region.ops[0].region.append(Operation("life.unit", attributes=dict(unit.attributes)))
    with pytest.raises(TaskGraphError, match=r"life\.unit on stage 0 \(op #\d+\): the system VM has no handler"):
        translate(module, MT3000)


def test_parse_config_reads_planner_labels_and_rejects_junk():
    c = parse_config("P=2,D=4,Z=2,b=1,A=128,FSR,deadline")
    assert (c.P, c.D, c.T, c.Z, c.b, c.A, c.act, c.pref) == (2, 4, 1, 2, 1, 128, "fsr", "deadline")
    assert parse_config(c.label()) == c
    assert parse_config("P=8,D=32,A=128,checkpoint,bulk").act == "ckpt"
    for bad in ("P=2,D=4", "P=2,D=4,A=8,turbo", "P=x,D=4,A=8", "P=0,D=1,A=1", "", "P=2,P=3,D=4,A=8",
                "P=2,D=4,A=8,FSR,ckpt"):
        with pytest.raises(Exception, match="--plan"):
            parse_config(bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=3, max_size=12))
def test_kendall_tau_matches_scipy(pairs):
    """tau-b, ties in either ranking included (the planner's and the VM's step times tie often)."""
    from scipy.stats import kendalltau

    xs, ys = [float(x) for x, _ in pairs], [float(y) for _, y in pairs]
    want = kendalltau(xs, ys).statistic
    if np.isnan(want):          # a constant ranking: scipy says undefined
        return
    assert kendall_tau(xs, ys) == pytest.approx(want, abs=1e-12)


def test_kendall_tau_of_a_known_case():
    xs = [3.0, 1.0, 2.0, 5.0, 4.0, 4.0, 7.0]
    ys = [2.5, 1.5, 1.0, 6.0, 4.0, 3.0, 3.0]
    assert kendall_tau(xs, ys) == pytest.approx(0.65, abs=1e-12)     # scipy.stats.kendalltau's tau-b


def _ratc(capsys, *args):
    from ratc.cli.main import main
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def program_dir(tiny, tmp_path_factory):
    module = compile_candidate(tiny, parse_config("P=2,D=2,Z=2,b=1,A=4,FSR,deadline"), MT3000)
    out = tmp_path_factory.mktemp("prog") / "tiny"
    write_program(out, {"model.ir": print_module(module_from_profile(tiny)),
                        "program.ir": print_module(module)})
    return out


def test_cli_run_json_has_stable_keys_and_trace(program_dir, tmp_path, capsys):
    trace = tmp_path / "t.json"
    code, stdout, stderr = _ratc(capsys, "run", str(program_dir), "--json", "--trace", str(trace))
    assert code == 0, stderr
    out = json.loads(stdout)
    assert set(out) == {"config", "results", "predicted_step_time_s", "prediction_error", "predicted_cost_source",
                        "plan_default_step_time_s"}
    assert set(out["results"]) == {
        "step_time_s", "step_cycles", "tokens_per_s", "mac_utilization", "bubble_fraction",
        "stage_bubble_fraction", "stage_peak_memory_bytes", "exposed_tail_s", "exposed_s",
        "critical_path_cycles", "tasks", "stages", "replicas", "replicas_simulated"}
    r = out["results"]
    assert 0 < r["mac_utilization"] < 1
    assert r["tokens_per_s"] == pytest.approx(2 * 4 * 128 / r["step_time_s"])
    assert json.loads(trace.read_text())["traceEvents"]


def test_cli_over_budget_plan_stops_with_out_of_memory_report(program_dir, tmp_path, capsys):
    small = tmp_path / "small.toml"
    text = (ROOT / "ratc/platform/profiles/mt3000.toml").read_text()
    small.write_text(text.replace('memory_budget = "20GB"', 'memory_budget = "4MB"'))
    code, _, stderr = _ratc(capsys, "run", str(program_dir), "--platform", str(small), "--plan", "P=2,D=2,A=4,full")
    assert code == 1
    assert "out of memory on stage 0" in stderr and "live values:" in stderr and "step0.opt1" in stderr
    code, stdout, _ = _ratc(capsys, "run", str(program_dir), "--platform", str(small), "--plan", "P=2,D=2,A=4,full",
                            "--json")
    assert code == 1
    oom = json.loads(stdout)["out_of_memory"]
    assert oom["stage"] == 0 and sum(v["bytes"] for v in oom["live"]) > oom["budget_bytes"] == 4 * 10**6


def test_cli_run_rejects_a_directory_without_a_program(tmp_path, capsys):
    code, _, stderr = _ratc(capsys, "run", str(tmp_path))
    assert code == 1 and "not a ratc program" in stderr


def test_state_and_recovery_placements_show_in_simulated_time(tiny):
    runs = {}
    # ZeRO-1, where bulk defers GradSync (under ZeRO-2 it reduces each bucket during backward).
    for config in ("P=2,D=2,Z=1,A=4,FSR,deadline", "P=2,D=2,Z=1,A=4,Ckpt,deadline", "P=2,D=2,Z=1,A=4,FSR,layerwise",
                   "P=2,D=2,Z=1,A=4,FSR,bulk"):
        runs[config] = run_module(compile_candidate(tiny, parse_config(config), MT3000), MT3000, memory_limit=False)

    def first_sync_vs_last_bwd(tl, stage=0, step=1):
        idx = [i for i, t in enumerate(tl.program.tasks) if t.stage == stage and t.step == step]
        syncs = min(tl.start[i] for i in idx if tl.program.tasks[i].kind == "grad_sync"
                    and "G" in tl.program.tasks[i].name)
        return syncs, max(tl.end[i] for i in idx if tl.program.tasks[i].kind == "backward")

    sync, last_bwd = first_sync_vs_last_bwd(runs["P=2,D=2,Z=1,A=4,FSR,bulk"][0])
    assert sync >= last_bwd                       # bulk: GradSync only after the whole backward
    sync, last_bwd = first_sync_vs_last_bwd(runs["P=2,D=2,Z=1,A=4,FSR,layerwise"][0])
    assert sync < last_bwd                        # layer-wise: overlapped with the remaining backward
    tail = {c: r.tail_cycles for c, (_, r) in runs.items()}
    assert tail["P=2,D=2,Z=1,A=4,FSR,bulk"] > tail["P=2,D=2,Z=1,A=4,FSR,layerwise"] > tail["P=2,D=2,Z=1,A=4,FSR,deadline"]
    step = {c: r.step_cycles for c, (_, r) in runs.items()}
    # backward-time recovery waits for the gradient; FSR co-runs it with the task before it
    assert step["P=2,D=2,Z=1,A=4,Ckpt,deadline"] > step["P=2,D=2,Z=1,A=4,FSR,deadline"]
    ckpt = runs["P=2,D=2,Z=1,A=4,Ckpt,deadline"][1].critical_cycles["recovery"]
    assert ckpt > runs["P=2,D=2,Z=1,A=4,FSR,deadline"][1].critical_cycles["recovery"]


def test_corun_recover_runs_alongside_its_host(tiny):
    # FSR: a co-running Recover holds no engine; it starts and ends with its host, the compute
    # task issued before it, whose duration is the pair's. What the pair adds is recovery
    # on the critical path; the trace draws the Recover on a track of its own.
    from ratc.vm.system.trace import chrome_trace
    module = compile_candidate(tiny, parse_config("P=2,D=2,Z=2,b=1,A=4,FSR,deadline"), MT3000)
    tl, res = run_module(module, MT3000, memory_limit=False)
    prog = tl.program
    host = {}
    guests = 0
    for i, t in enumerate(prog.tasks):
        if t.resources and t.resources[0][2] == "compute":
            host[(t.stage, t.replica, t.step)] = i
        elif t.alongside:
            h = host[(t.stage, t.replica, t.step)]
            assert (tl.start[i], tl.end[i]) == (tl.start[h], tl.end[h])
            assert t.corun == prog.tasks[h].corun > 0 and t.duration == prog.tasks[h].duration
            guests += 1
    assert guests == 2 * 4 * 4     # steps x micro-batches x decoder layers
    w0, w1 = step_window(tl)
    on_path = sum(min(prog.tasks[i].corun, max(0, min(tl.end[i], w1) - max(tl.start[i], w0)))
                  for i in critical_path(tl) if prog.tasks[i].corun)
    assert res.critical_cycles["recovery"] == on_path > 0
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in chrome_trace(tl)["traceEvents"]
              if e["name"] == "thread_name"}
    recs = [e for e in chrome_trace(tl)["traceEvents"] if e["ph"] == "X" and e["cat"] == "recover"]
    assert recs and all(tracks[(e["pid"], e["tid"])] == "co-run" for e in recs)


def test_streaming_recovery_needs_less_memory_than_a_second_buffer(tiny):
    # With the kernel-VM profile the tiny layer's Backward hides part of the Recover it hosts,
    # and the Recover streams into what that Backward frees: its headroom is below a whole
    # layer, the VM stays within memory-plan, and both hold less than with a second buffer.
    from ratc.lifecycle.compile import CompileOptions, compile_program
    from ratc.lifecycle.lowering import find_pipeline
    from ratc.planner.exec_profile import load_exec_profile
    from ratc.planner.search import Planner
    planner = Planner(tiny, MT3000, exec_profile=load_exec_profile(MT3000, "kernel-vm"))
    layer = next(u for u in planner.units(1).units if u.decoder)
    assert 0 < layer.stream < layer.saved_bytes
    cand = parse_config("P=2,D=2,Z=2,b=1,A=4,FSR,deadline")
    peaks = {}
    for stream in (True, False):
        module = compile_program(tiny, cand, MT3000, CompileOptions(planner=planner, memory_limit=False, stream=stream))
        recs = [op for s in find_pipeline(module).region.ops for op in s.region.ops if op.name == "life.recover"]
        assert any("stream" in op.attributes for op in recs) == stream
        plan = find_pipeline(module).attributes["peak"]
        _, res = run_module(module, MT3000, memory_limit=False)
        assert all(vm <= p for vm, p in zip(res.stage_peak_bytes, plan))
        peaks[stream] = (plan, res.stage_peak_bytes)
    assert all(a < b for a, b in zip(peaks[True][0], peaks[False][0]))
    assert all(a <= b for a, b in zip(peaks[True][1], peaks[False][1]))
