"""Planning and compiling for a host profile: its tables price the step, the VM runs it, and
`ratc launch --measure` compares it with this machine.

Oracles: hand-computed times from a hand-written host profile (tests/test_host_platform.py's
HOST: three GEMM rows, two add rows, one all-reduce fit, sharing 1.5 / 1.8, load 1.25 and busy 1.4
at 2 ranks).
"""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_host_platform import FACTS, FIGURES, HOST, fig

from ratc.calibrate.profile import render
from ratc.cli.main import main
from ratc.planner.collectives import Link, all_reduce, link_for, reduce_scatter
from ratc.planner.exec_profile import load_exec_profile
from ratc.planner.host_exec import HostExecProfile
from ratc.platform import load_platform, parse_platform

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")


@pytest.fixture(scope="module")
def host():
    return parse_platform(HOST, "host.toml")


@pytest.fixture
def host_file(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text(HOST)
    return str(path)


def test_a_gemm_is_priced_at_the_rate_of_the_nearest_measured_shape_of_its_layout(host):
    prof = HostExecProfile(host)
    load = host.sharing.load.median         # a lone rank's slow-down by the machine's other load
    # (200, 300, 250) is nearest 256^3 in log space: 40 G MAC/s forward, 30 G MAC/s as a weight gradient
    assert prof.gemm_time(200, 300, 250, "nt") == pytest.approx(load * 200 * 300 * 250 / 40e9)
    assert prof.gemm_time(200, 300, 250, "tn") == pytest.approx(load * 200 * 300 * 250 / 30e9)
    assert prof.gemm_time(70, 60, 64, "nt") == pytest.approx(load * 70 * 60 * 64 / 20e9)
    # the tn layout was measured at 256^3 only, whatever the shape
    assert prof.gemm_time(64, 64, 64, "tn") == pytest.approx(load * 64 ** 3 / 30e9)
    # an unmeasured layout takes the nearest shape of any layout
    assert prof.gemm_time(64, 64, 64, "nn") == pytest.approx(load * 64 ** 3 / 20e9)


def test_two_ranks_sharing_the_cores_slow_a_gemm_by_the_larger_of_busy_and_its_contention(host):
    alone, shared = HostExecProfile(host), HostExecProfile(host).for_program(2, 1)
    unloaded = 256 ** 3 / 40e9
    assert alone.gemm_time(256, 256, 256) == pytest.approx(1.25 * unloaded)     # [sharing].load
    # [sharing].matmul 1.5 and .memory 1.8, each over .busy 1.4
    assert shared.gemm_time(256, 256, 256) == pytest.approx(1.5 * unloaded)
    assert shared.memory_time("add", 786432) == pytest.approx(1.8 * 25e-6)
    # three ranks of a two-rank calibration: each figure's excess twice over (busy 1.8, matmul 2.0)
    three = HostExecProfile(host).for_program(3, 1)
    assert three.gemm_time(256, 256, 256) == pytest.approx(2.0 * unloaded)
    assert interpreter(three, _decoder_layer()) == pytest.approx(
        tuple(1.8 / 1.3 * t for t in interpreter(alone, _decoder_layer())))     # (alone: [sharing].tasks)
    # a busy figure over the contention figures prices GEMMs too
    busier = {**FIGURES, "sharing": {**FIGURES["sharing"], "busy": fig(2.2)}}
    prof = HostExecProfile(parse_platform(render("busier", "ratc calibrate", FACTS, busier), "busier.toml"))
    assert prof.for_program(2, 1).gemm_time(256, 256, 256) == pytest.approx(2.2 * unloaded)


def test_two_ranks_slow_the_interpreter_by_busy_and_never_by_less_than_the_load(host):
    layer = _decoder_layer()
    params = len(layer.params)
    # unit_overhead's hand-worked figures, the executor's loop after each task included (6 and 20 us)
    fwd, bwd = 28e-6 + params * 10e-6 + 6e-6, 57e-6 + params * 4e-6 + 20e-6
    assert interpreter(HostExecProfile(host).for_program(2, 1), layer) == pytest.approx((1.4 * fwd, 1.4 * bwd))
    add = next(op for op in layer.ops if op.name == "add")
    moved = (add.bytes_read + add.bytes_written) * 4 / 2
    assert HostExecProfile(host).for_program(2, 1).op_times(add, 1, 2)[0] == pytest.approx(
        1.8 * moved * 25e-6 / 786432 + 1.4 * 2e-6)
    # a busy figure under the lone rank's (measured in a quieter minute) gives way to it: the
    # interpreter's [sharing].tasks 1.3 over the GEMM's .load 1.25
    quiet = {**FIGURES, "sharing": {**FIGURES["sharing"], "busy": fig(1.1)}}
    prof = HostExecProfile(parse_platform(render("quiet", "ratc calibrate", FACTS, quiet), "quiet.toml"))
    assert interpreter(prof.for_program(2, 1), layer) == pytest.approx((1.3 * fwd, 1.3 * bwd))
    assert interpreter(prof, layer) == pytest.approx((1.3 * fwd, 1.3 * bwd))


def interpreter(prof, layer) -> tuple:
    """A unit's fixed costs (unit_overhead) without its gradient's bytes, which stream as memory-bound work."""
    fwd, bwd = prof.unit_overhead(layer)
    return fwd, bwd - prof.gradient_time(layer) / prof.batch


def test_a_memory_bound_op_is_interpolated_between_its_measured_sizes(host):
    prof = HostExecProfile(host)
    small, large, load = 786432, 201326592, host.sharing.load.median
    assert prof.memory_time("add", small) == pytest.approx(load * 25e-6)
    assert prof.memory_time("add", (small + large) / 2) == pytest.approx(load * (25e-6 + 0.033) / 2)
    assert prof.memory_time("add", 2 * large) == pytest.approx(load * 0.066)      # the out-of-cache rate beyond
    assert prof.memory_time("add", small / 2) == pytest.approx(load * 12.5e-6)    # the in-cache rate below
    # softmax was not measured in this profile: it streams like the add
    assert prof.memory_time("softmax", small) == pytest.approx(load * 25e-6)


def test_a_host_collective_is_its_measured_fit_and_an_unmeasured_one_a_ring_over_the_link(host):
    link = link_for(host, 2)
    assert all_reduce(2, 1e6, link) == pytest.approx(300e-6 + 1e6 / 1e9)
    assert all_reduce(1, 1e6, link) == 0.0
    # over 3 ranks the ring's 2 steps and (n-1)/n of the buffer, against 2 ranks' 1 step and 1/2
    assert all_reduce(3, 1e6, link) == pytest.approx(2 * 300e-6 + 1e6 * (2 / 3) / (1 / 2) / 1e9)
    # no reduce_scatter row: the ring over the [p2p] link (100 us, 2 GB/s)
    assert reduce_scatter(2, 1e6, link) == pytest.approx(100e-6 + 1e6 / 2 / 2e9)
    assert reduce_scatter(2, 1e6, Link(100e-6, 2e9)) == pytest.approx(reduce_scatter(2, 1e6, link))


def test_a_collective_in_the_compute_stream_costs_its_fit_beside_compute(host):
    # HOST's all-reduce: 300 us + bytes / 1 GB/s alone, 900 us + bytes / 0.5 GB/s beside compute;
    # in the stream the runtime's copy before it and mean after it too: 4 MB through HOST's add
    # rows (786432 B in 25 us, 201326592 B in 33 ms, linear between)
    alone, beside = 300e-6 + 1e6 / 1e9, 900e-6 + 1e6 / 0.5e9
    copies = 25e-6 + (4e6 - 786432) / (201326592 - 786432) * (0.033 - 25e-6)
    assert all_reduce(2, 1e6, link_for(host, 2, ranks=1)) == pytest.approx(alone)     # (a core to spare)
    assert all_reduce(2, 1e6, link_for(host, 2, ranks=2)) == pytest.approx(beside + copies)    # every core taken
    # per candidate, as the planner asks: programs of 1 and 2 ranks
    both = link_for(host, 2, ranks=np.array([[1], [2]]))
    assert list(all_reduce(2, 1e6, both)[:, 0]) == pytest.approx([alone, beside + copies])
    # never less than alone (a beside fit under it is the noise of a quieter minute)
    quiet = {**FIGURES, "beside": [(("all_reduce", 2), [(1000, fig(1e-6)), (10**7, fig(2e-3))])]}
    quiet_host = parse_platform(render("quiet", "ratc calibrate", FACTS, quiet), "quiet.toml")
    assert all_reduce(2, 1e6, link_for(quiet_host, 2, ranks=2)) == pytest.approx(alone + copies)
    # a DSP machine's links run beside its compute
    mt = load_platform("mt3000")
    assert all_reduce(8, 1e6, link_for(mt, 8, ranks=8)) == pytest.approx(all_reduce(8, 1e6, link_for(mt, 8)))


def test_a_host_platform_gets_the_host_profile_and_an_fp32_recipe(host):
    from ratc.frontend.presets import trace_preset
    from ratc.planner.search import Planner

    assert isinstance(load_exec_profile(host, "kernel-vm"), HostExecProfile)
    planner = Planner(trace_preset("tiny", 64), host)
    assert planner.elem == 4 and planner.recipe.grad_bytes == 4


def test_a_host_counts_vm_cycles_at_a_nominal_gigahertz(host):
    assert host.cycles_per_second == 1e9
    mt3000 = load_platform("mt3000")
    assert mt3000.cycles_per_second == mt3000.dsp.clock


def test_plan_on_a_host_profile_succeeds_and_is_deterministic(host_file, capsys):
    argv = ["plan", "--preset", "tiny", "--clusters", "2", "--global-batch", "4", "--platform", host_file]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    assert "plan for tiny on 2 x made-up clusters" in first


def test_compile_on_a_host_profile_writes_the_same_program_twice_and_the_vm_runs_it(host_file, tmp_path, capsys):
    plan = "P=2,D=1,Z=0,b=1,A=2,FSR,deadline"
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        assert main(["compile", EXAMPLE, "--preset", "tiny", "--platform", host_file, "--plan", plan,
                     "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err
    files = sorted(p.name for p in outs[0].iterdir())
    for name in files:
        if name != "manifest.json":         # it names its own directory
            assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    assert json.loads((outs[0] / "manifest.json").read_text())["meta"]["exec_profile"] == "host"
    run = tmp_path / "run.json"
    assert main(["run", str(outs[0]), "--json", "-o", str(run)]) == 0
    sim = json.loads(run.read_text())
    # the VM agrees with the planner (Eq. 12) on a host program, as on a DSP one
    assert sim["results"]["step_time_s"] == pytest.approx(sim["predicted_step_time_s"], rel=0.05)


def test_measure_on_a_host_program_compares_with_this_machine_without_a_note(tmp_path, capfd, calibrated):
    (profile, _), out, js = calibrated[0], tmp_path / "prog", tmp_path / "m.json"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--platform", str(profile),
                 "--plan", "P=2,D=1,Z=0,b=1,A=2,Full,deadline", "--no-run", "-o", str(out)]) == 0
    capfd.readouterr()
    assert main(["launch", str(out), "--measure", "1", "--measure-json", str(js)]) == 0
    printed = capfd.readouterr().out
    assert "step time: measured" in printed and "note:" not in printed
    got = json.loads(js.read_text())
    assert got["predicts_this_machine"] and got["platform"] == profile.stem     # (the profile is named for its file)
    assert got["step_time_s"]["planner"] > 0 and got["step_time_s"]["vm"] > 0


def _decoder_layer():
    from ratc.frontend.presets import trace_preset

    return trace_preset("tiny", 64).layers[0]


def test_a_unit_pays_its_task_and_each_parameter_once_per_micro_batch(host):
    layer = _decoder_layer()
    params = len(layer.params)
    assert params == 9 and not layer.frozen     # 7 projections and 2 norm weights
    # the one-operator task less its operator, each parameter, and the executor's loop after the
    # task: 30 - 2 + 9 x 10 + 6 us forward, 60 - 3 + 9 x 4 + 20 us backward (tests/test_host_platform.py's FIGURES)
    tasks = host.sharing.tasks.median   # a lone rank's interpreter work, slowed by the machine's other load
    # and its gradient's bytes (test_a_backward_pays_its_gradients_bytes_...)
    grad = HostExecProfile(host).gradient_time(layer)
    fwd, bwd = tasks * (28e-6 + params * 10e-6 + 6e-6), tasks * (57e-6 + params * 4e-6 + 20e-6) + grad
    assert HostExecProfile(host).unit_overhead(layer) == pytest.approx((fwd, bwd))
    # a micro-batch of 4 sequences is one task: per sequence, a quarter
    assert HostExecProfile(host).for_program(1, 4).unit_overhead(layer) == pytest.approx((fwd / 4, bwd / 4))


def test_the_loop_after_a_backward_releases_what_its_forward_saved_per_sequence(host):
    layer = _decoder_layer()
    prof = HostExecProfile(host)
    tasks = host.sharing.tasks.median
    base = prof.unit_overhead(layer)
    # 50 KB of fp16 saved per sequence is 100 KB in the host's fp32: 1 us at 100 GB/s, for each
    # sequence of a micro-batch (not shared by them as the task's fixed costs are)
    got = prof.unit_overhead(layer, 50e3, 2)
    assert got[0] == base[0] and got[1] == pytest.approx(base[1] + tasks * 1e-6)
    four = prof.for_program(1, 4)
    assert four.unit_overhead(layer, 50e3, 2)[1] == pytest.approx(four.unit_overhead(layer)[1] + tasks * 1e-6)
    # the planner passes the unit's saved bytes: a tiny layer's Backward pays their release, 2 x
    # its fp16 saved bytes at 100 GB/s, over a host whose release is free
    from ratc.frontend.presets import trace_preset
    from ratc.planner.opcost import unit_cost
    model = trace_preset("tiny", 64)
    free = {**FIGURES, "compute": {**FIGURES["compute"], "release_bandwidth": fig(1e30)}}
    free_host = parse_platform(render("free", "ratc calibrate", FACTS, free), "free.toml")
    paid, unpaid = (unit_cost(layer, model, HostExecProfile(h), h, 1, True) for h in (host, free_host))
    assert paid.fwd == unpaid.fwd
    assert paid.bwd - unpaid.bwd == pytest.approx(tasks * 2 * paid.saved_bytes / 100e9)
    assert paid.saved_bytes > 100e3


def test_a_backward_pays_its_gradients_bytes_flattened_accumulated_and_an_embeddings_dense_table(host):
    from ratc.frontend.presets import trace_preset

    prof, load = HostExecProfile(host), host.sharing.load.median
    model = trace_preset("tiny", 64)
    # tiny's embedding, 512 x 128 = 65536 elements: the dense table zero-filled (4 B) and the
    # flat gradient concatenated (8 B), 786432 B, and accumulated (12 B), 786432 B: HOST's
    # smaller add row twice (25 us each; it measured no copy)
    assert prof.gradient_time(model.pre) == pytest.approx(2 * load * 25e-6)
    # tiny's decoder layer, 181504 elements and no table: 8 B and 12 B an element, each between
    # HOST's add rows (786432 B in 25 us, 201326592 B in 33 ms), linear in bytes
    layer = _decoder_layer()
    assert layer.param_count == 181504
    between = lambda x: 25e-6 + (x - 786432) * (0.033 - 25e-6) / (201326592 - 786432)   # noqa: E731
    assert prof.gradient_time(layer) == pytest.approx(load * (between(8 * 181504) + between(12 * 181504)))


def test_each_operator_pays_the_measured_operator_cost_forward_and_backward(host):
    prof = HostExecProfile(host)
    layer = _decoder_layer()
    norm = next(op for op in layer.ops if op.kind == "norm")
    add = next(op for op in layer.ops if op.name == "add")
    load, tasks = host.sharing.load.median, host.sharing.tasks.median
    moved = lambda op: (op.bytes_read + op.bytes_written) * 4 / 2   # f16 trace   # noqa: E731
    for op, operators in ((norm, 8), (add, 1)):
        fwd, _, bwd, _ = prof.op_times(op, 1, 2)
        # its bytes as an add's streaming (in cache: 25 us per 786432 B), and its operators
        assert fwd == pytest.approx(load * moved(op) * 25e-6 / 786432 + tasks * operators * 2e-6)
        assert bwd == pytest.approx(load * 2 * moved(op) * 25e-6 / 786432 + tasks * operators * 3e-6)


def test_a_micro_batch_of_b_runs_b_times_the_work_but_its_fixed_costs_once(host):
    layer = _decoder_layer()
    q = next(op for op in layer.ops if op.name == "self_attn.q_proj")
    one, four = HostExecProfile(host), HostExecProfile(host).for_program(1, 4)
    (m, n, k), load, tasks = q.gemm, host.sharing.load.median, host.sharing.tasks.median
    # per sequence: the micro-batch's GEMM of 4 x m rows over 4, and a quarter of its 2 operators
    assert four.op_times(q, 1, 2)[0] == pytest.approx(one.gemm_time(4 * m, n, k) / 4 + tasks * 2 * 2e-6 / 4)
    assert one.op_times(q, 1, 2)[0] == pytest.approx(load * m * n * k / 20e9 + tasks * 2 * 2e-6)   # nearest 64^3
    total = lambda prof, b: b * sum(prof.op_times(op, 1, 2)[0] for op in layer.ops)       # noqa: E731
    fixed = sum(tasks * 2e-6 * {"matmul": 2, "norm": 8, "rope": 1, "attention": 3}.get(op.kind, 1) for op in layer.ops)
    # b = 4 saves three of the four fixed costs (its GEMMs also run at the larger shapes' rates)
    assert total(one, 4) - total(four, 4) >= 3 * fixed * 0.99


def test_the_update_is_priced_from_its_measured_rows_and_streams_like_an_add_where_not_measured(host):
    from ratc.planner.state_chain import state_costs
    from ratc.step.rules import streamed_seconds

    recipe = HostExecProfile(host).recipe
    load = host.sharing.load.median
    # HOST measured no update: its rows are the add's, slowed by the load
    assert recipe.update_rows == ((786432, load * 25e-6), (201326592, load * 0.033))
    link = Link(1e-4, 1e9)
    for elements in (1000, 2e6, 1e8):
        cost = state_costs(1, 0, elements, 0, 1, link, link, 6e9, recipe)
        assert cost.update == pytest.approx(streamed_seconds(recipe.update_rows, 80 * elements))
    # between the rows, linear in bytes; beyond them at the nearer row's rate
    assert streamed_seconds(((100, 1.0), (300, 5.0)), 200) == pytest.approx(3.0)
    assert streamed_seconds(((100, 1.0), (300, 5.0)), 50) == pytest.approx(0.5)
    assert list(streamed_seconds(((100, 1.0), (300, 5.0)), [600, 0])) == pytest.approx([10.0, 0.0])
    # through every row: numpy's piecewise-linear interpolation between them
    rows = ((100, 1.0), (200, 1.5), (300, 5.0))
    assert list(streamed_seconds(rows, [150, 250])) == pytest.approx(list(np.interp([150, 250], *zip(*rows))))


def test_the_planner_makes_a_host_unit_table_per_micro_batch_size_and_a_dsp_one_once(host):
    from ratc.frontend.presets import trace_preset
    from ratc.planner.search import Planner

    model = trace_preset("tiny", 64)
    planner = Planner(model, host)
    one, four = planner.units(1, 1, 1).units, planner.units(1, 1, 4).units
    layer, load = model.layers[0], host.sharing.load.median
    # a micro-batch of 4 pays the decoder unit's task and parameter costs once, not 4 times
    over = HostExecProfile(host).unit_overhead(layer)
    assert 4 * one[1].fwd - 4 * four[1].fwd > 3 * over[0] * 0.99
    assert 4 * one[1].bwd - 4 * four[1].bwd > 3 * over[1] * 0.99
    assert over[0] > 0 and load > 1
    dsp = Planner(model, load_platform("mt3000"))
    assert dsp.units(1, 1, 4) is dsp.units(1, 1, 1)


def test_a_hosts_updates_wait_for_their_syncs_and_delay_the_backwards_after_them():
    from ratc.planner.stream_update import in_stream_tail

    # One stage, two units: Backward(1) of the last micro-batch ends 3 s before the stage's
    # last, Backward(0), which takes 3 s. Syncs of 1 s (unit 0) and 2 s (unit 1), updates of
    # 4 s and 6 s. By hand: sync(1) ends at -1, update(1) runs -1..5 (2 s waited), Backward(0)
    # 5..8, sync(0) 8..9, update(0) 9..13 (1 s waited): the stage ends 13 s late, 3 of them waiting.
    a = lambda *x: np.array(x, dtype=float).reshape(1, 1, -1)     # noqa: E731
    zero = np.zeros((1, 1))
    total, comm, upd = in_stream_tail(a(0, -3), a(1, 2), a(4, 6), a(0, 0), zero, a(0, 1), True)
    assert (total[0, 0], comm[0, 0], upd[0, 0]) == pytest.approx((13.0, 3.0, 10.0))
    # a prefetch of 5 s after each update (ZeRO-1, 2) shares the link with the syncs: unit 1's
    # runs 5..10, so sync(0) 10..11, update(0) 11..15 (3 s waited), unit 0's prefetch 15..20,
    # and the next step's Forward(0) needs that view at once
    total, comm, upd = in_stream_tail(a(0, -3), a(1, 2), a(4, 6), a(5, 5), zero, a(0, 1), True)
    assert (total[0, 0], comm[0, 0], upd[0, 0]) == pytest.approx((20.0, 5.0, 10.0))


def test_a_later_stages_updates_hold_up_the_stages_before_it_on_a_host_under_1f1b():
    from ratc.planner.stream_update import in_stream_tail

    # Two stages of one unit each, no syncs; updates of 2 s (stage 0) and 3 s (stage 1). Stage 1
    # sends its gradient after its update: stage 0's last Backward ends 3 s late, then its own
    # update: 5 s. Stage 1's own 3 s fall in its window of 10 s (stage 0 still draining).
    shape = (1, 2, 1)
    total, comm, upd = in_stream_tail(np.zeros(shape), np.zeros(shape), np.array([2.0, 3.0]).reshape(shape),
                                      np.zeros(shape), np.array([[0.0, 10.0]]), np.zeros(shape) + 10.0, True)
    assert list(total[0]) == pytest.approx([5.0, 0.0])
    assert list(upd[0]) == pytest.approx([5.0, 0.0]) and list(comm[0]) == pytest.approx([0.0, 0.0])
    # a zero-bubble schedule sends the gradient from stage 1's I task, before its update: stage 0
    # pays its own 2 s only
    total, _, _ = in_stream_tail(np.zeros(shape), np.zeros(shape), np.array([2.0, 3.0]).reshape(shape),
                                 np.zeros(shape), np.array([[0.0, 10.0]]), np.zeros(shape) + 10.0, True, False)
    assert list(total[0]) == pytest.approx([2.0, 0.0])


def test_a_hosts_vm_runs_each_update_in_the_compute_stream(host_file, tmp_path):
    out, trace = tmp_path / "prog", tmp_path / "trace.json"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--platform", host_file, "--plan",
                 "P=1,D=1,Z=0,b=1,A=2,Full,deadline", "--no-run", "-o", str(out)]) == 0
    assert main(["run", str(out), "--trace", str(trace)]) == 0
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    stream = sorted((e for e in events if e["tid"] == 0), key=lambda e: e["ts"])
    assert any(e["cat"] == "update" for e in events)
    # every update is on the compute stream, and nothing on it overlaps: the thread runs one at a time
    assert all(e["tid"] == 0 for e in events if e["cat"] == "update")
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-6 for a, b in zip(stream, stream[1:]))
    # on a DSP platform the update runs on the DDR engine, beside the compute (the old layout)
    assert not load_platform("mt3000").updates_in_compute_stream


def test_a_hosts_collectives_run_in_the_compute_stream_once_its_ranks_take_every_core(host):
    # the made-up host has 2 cores and one thread per rank
    assert host.collectives_in_compute_stream(2) and host.collectives_in_compute_stream(4)
    assert not host.collectives_in_compute_stream(1)
    assert list(host.collectives_in_compute_stream(np.array([[1], [2]]))[:, 0]) == [False, True]
    assert not load_platform("mt3000").collectives_in_compute_stream(1024)


def test_a_sync_and_prefetch_in_the_compute_stream_delay_what_follows_them():
    from ratc.planner.stream_update import in_stream_tail

    # One stage, two units as in the update test above (Backward(1) ends 3 s before the
    # stage's last, syncs 1 s and 2 s, updates 4 s and 6 s), with prefetches of 5 s, all in
    # the thread: sync(1) -3..-1, update(1) -1..5, prefetch(1) 5..10, Backward(0) 10..13, sync(0)
    # 13..14, update(0) 14..18, prefetch(0) 18..23: 23 s late, 2 + 5 + 1 + 5 of them on messages.
    a = lambda *x: np.array(x, dtype=float).reshape(1, 1, -1)     # noqa: E731
    zero = np.zeros((1, 1))
    total, comm, upd = in_stream_tail(a(0, -3), a(1, 2), a(4, 6), a(5, 5), zero, a(0, 1), True,
                                      inline=np.ones((1, 1), dtype=bool))
    assert (total[0, 0], comm[0, 0], upd[0, 0]) == pytest.approx((23.0, 13.0, 10.0))


def test_the_runtime_s_copies_around_a_collective_are_priced_per_byte_of_its_buffer_or_shard(host):
    from ratc.planner.collectives import handled

    link = link_for(host, 2, ranks=2)

    def copy(nbytes):       # HOST's add rows, as its copies stream (no copy row)
        return 25e-6 * nbytes / 786432 if nbytes <= 786432 else \
            25e-6 + (nbytes - 786432) / (201326592 - 786432) * (0.033 - 25e-6)
    # a gather's copy out of its buffer (2 B a byte); a reduce-scatter's mean and add (5 B a shard byte)
    assert handled(link, "all_gather", 2, 1e6) == pytest.approx(copy(2e6))
    assert handled(link, "reduce_scatter", 2, 1e6) == pytest.approx(copy(5 * 1e6 / 2))
    assert handled(link, "all_reduce", 1, 1e6) == 0.0       # one rank: no collective, no copy


def test_a_stage_hand_off_on_a_host_whose_ranks_take_every_core_costs_its_exchange_beside_compute(host):
    # HOST's [p2p]: 100 us + bytes / 2 GB/s alone; 2 ms + bytes / 1 GB/s exchanged beside compute
    alone, beside = 100e-6 + 32768 / 2e9, 2e-3 + 32768 / 1e9
    assert link_for(host, 2, ranks=1).send(32768) == pytest.approx(alone)      # (a core to spare)
    assert link_for(host, 2, ranks=2).send(32768) == pytest.approx(beside)     # every core taken
    both = link_for(host, 2, ranks=np.array([[1], [2]]))
    assert list(both.send(32768)[:, 0]) == pytest.approx([alone, beside])
    # a DSP machine's links: the message alone
    mt = load_platform("mt3000")
    assert link_for(mt, 2, ranks=8).send(32768) == pytest.approx(Link(mt.network.intra_node_latency,
                                                                      mt.network.intra_node_bandwidth).send(32768))


def test_a_hosts_pipeline_hands_off_beside_compute_in_the_planner_and_the_vm_alike(host_file, tmp_path):
    out, trace, run = tmp_path / "prog", tmp_path / "trace.json", tmp_path / "run.json"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--platform", host_file, "--plan",
                 "P=2,D=1,Z=0,b=1,A=4,Full,deadline", "--no-run", "-o", str(out)]) == 0
    assert main(["run", str(out), "--trace", str(trace), "--json", "-o", str(run)]) == 0
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    sends = [e for e in events if e["cat"] == "send" and e["name"].startswith(("0SEND", "1SEND"))]
    # tiny's hidden stream, 64 x 128 fp32 = 32 KB a hand-off: 2 ms + 32 KB at 1 GB/s (us in the trace)
    # (two a micro-batch, four micro-batches a step, every simulated step)
    assert sends and len(sends) % 8 == 0 and all(e["dur"] == pytest.approx((2e-3 + 32768 / 1e9) * 1e6) for e in sends)
    sim = json.loads(run.read_text())
    assert sim["results"]["step_time_s"] == pytest.approx(sim["predicted_step_time_s"], rel=0.005)


@pytest.mark.parametrize("plan", ["P=1,D=2,Z=2,b=1,A=4,Full,deadline", "P=1,D=2,Z=3,b=1,A=4,FSR,deadline",
                                  "P=1,D=2,Z=1,b=2,A=2,Ckpt,deadline"])
def test_a_hosts_vm_runs_its_collectives_in_the_compute_stream_and_the_planner_agrees(host_file, tmp_path, plan):
    out, trace, run = tmp_path / "prog", tmp_path / "trace.json", tmp_path / "run.json"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--platform", host_file, "--plan", plan,
                 "--no-run", "-o", str(out)]) == 0
    assert main(["run", str(out), "--trace", str(trace), "--json", "-o", str(run)]) == 0
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    comm = [e for e in events if e["cat"] in ("grad_sync", "prefetch", "gather")]
    assert comm and all(e["tid"] == 0 for e in comm)
    stream = sorted((e for e in events if e["tid"] == 0), key=lambda e: e["ts"])
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-6 for a, b in zip(stream, stream[1:]))
    # the planner prices the thread's work as the VM runs it
    sim = json.loads(run.read_text())
    assert sim["results"]["step_time_s"] == pytest.approx(sim["predicted_step_time_s"], rel=0.005)


def test_a_fixed_cost_is_read_at_the_bytes_a_step_moves_between_two_runs_of_a_task(host):
    # HOST: task_forward 30 us warm, 45 us after 1 MiB, 120 us after 64 MiB read between calls
    def at(evicted):
        return dataclasses.replace(HostExecProfile(host), evicted=evicted).fixed("task_forward")
    assert at(0) == pytest.approx(30e-6) and at(2**20) == pytest.approx(45e-6) and at(2**26) == pytest.approx(120e-6)
    # linear in bytes up to the first row; in log-bytes between rows (8 MiB: half way from 1 to 64 MiB)
    assert at(2**19) == pytest.approx(37.5e-6)
    assert at(2**23) == pytest.approx(45e-6 + 0.5 * 75e-6)
    # nothing more to evict past the last row
    assert at(2**30) == pytest.approx(120e-6)
    assert dataclasses.replace(HostExecProfile(host), evicted=2**26).fixed("parameter_backward") == pytest.approx(8e-6)


def test_a_task_s_eviction_is_what_every_rank_s_share_of_the_model_moves_per_micro_batch(host):
    from ratc.planner.host_exec import STEP_TRAFFIC

    # the weight read forward (4 B) and backward (4), its gradient written (4), flattened (8), accumulated (12)
    assert STEP_TRAFFIC == 32
    assert HostExecProfile(host).for_program(1, 1, params=1000).evicted == 32_000
    # two ranks each move their share through the one last-level cache in the same interval
    assert HostExecProfile(host).for_program(2, 1, params=1000).evicted == 64_000
    prof = HostExecProfile(host)
    assert prof.for_program(1, 1) is prof and prof.for_program(1, 1, params=1000) is not prof


def test_ranks_sharing_the_last_level_cache_see_each_other_s_eviction(host):
    from ratc.frontend.presets import trace_preset
    from ratc.planner.search import Planner

    model = trace_preset("tiny", 64)
    planner = Planner(model, host)
    share = model.param_count
    # tiny's 0.86 M parameters move 27.5 MB a micro-batch on one rank; two pipeline stages move
    # half each, through the same cache in the same interval: 27.5 MB again; two replicas twice it
    stages2, replicas2 = (planner.units(1, 2, 1, pipeline=pipeline).units for pipeline in (2, 1))
    # by hand: 32 B a parameter, in log-bytes between HOST's 1 MiB (45 us) and 64 MiB (120 us) rows
    for ranks, params in ((1, share), (2, share / 2), (2, share)):
        evicted = 32 * params * ranks
        assert 2**20 < evicted < 2**26
        assert HostExecProfile(host).for_program(ranks, 1, params).fixed("task_forward") == pytest.approx(
            45e-6 + 75e-6 * math.log(evicted / 2**20) / math.log(64))
    layer = model.layers[0]
    fixed = [HostExecProfile(host).for_program(r, 1, p)._fixed for r, p in ((1, share), (2, share / 2))]
    assert fixed[0] == pytest.approx(fixed[1])
    # two replicas, each moving the whole model: colder than two stages, their tasks' fixed costs higher
    two = HostExecProfile(host).for_program(2, 1, share).unit_overhead(layer)
    half = HostExecProfile(host).for_program(2, 1, share / 2).unit_overhead(layer)
    assert two[0] > half[0] and two[1] > half[1]
    # (its operators' fixed costs grow with the eviction too)
    assert replicas2[1].fwd - stages2[1].fwd >= 0.999 * (two[0] - half[0]) > 0
    # a P = 2 program's stages are built on the units of a rank holding half the model
    half = stages2
    stages = planner.stages(2, 1, "time", 2, 1)
    assert list(stages.fwd) == pytest.approx([sum(u.fwd for u in half[s:e]) for s, e in stages.ranges])
