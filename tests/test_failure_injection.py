"""`ratc run --fail-at`: the checkpoint save and read-back as system-VM tasks, and a failure
injected into a run of checkpointed steps, against hand-computed lost work and restarts."""

import json
from pathlib import Path

import pytest

from ratc.cli.main import main
from ratc.lifecycle.actions import parse
from ratc.planner.failures import (checkpoint_cost, daly_interval, failure_spec, steps_between_checkpoints,
                                   system_mtbf)
from ratc.planner.search import Planner
from ratc.platform import load_platform
from ratc.program_check import open_program
from ratc.vm.system.checkpoint import measure_checkpoint, shared_transfer, stage_state_bytes
from ratc.vm.system.failure import position

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")
CONFIG = "P=2,D=2,Z=1,b=1,A=4,FSR,deadline"
MT3000 = load_platform("mt3000")
SPEC = failure_spec(MT3000)


@pytest.fixture(scope="module")
def tiny_program(tmp_path_factory):
    out = tmp_path_factory.mktemp("failat") / "tiny"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--plan", CONFIG, "--exec-profile", "paper-table5",
                 "--no-run", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def program(tiny_program):
    return open_program(str(tiny_program))


def fail_at(capsys, program_dir, *args):
    assert main(["run", str(program_dir), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_shared_storage_gives_writers_equal_shares_until_the_smallest_finish():
    # one cluster of 2 bytes, one of 1, 1 B/s ports, 1.5 B/s storage: 0.75 B/s each until
    # the small one is done at 4/3 s, then the other alone at its port's 1 B/s
    assert shared_transfer([2.0, 1.0], [1, 1], 1.0, 1.5) == pytest.approx([1 + 4 / 3, 4 / 3])
    # ports bind: each at its own bandwidth
    assert shared_transfer([6.0, 3.0], [2, 2], 1.0, 100.0) == pytest.approx([6.0, 3.0])
    # storage binds throughout: all bytes at the storage's bandwidth
    assert shared_transfer([5.0, 5.0], [4, 4], 1.0, 2.0) == pytest.approx([20.0, 20.0])


def test_a_programs_checkpoint_is_the_planners_bytes_split_by_stage_and_zero_shard(program):
    """What the VM saves per stage (its life.opt state) is 12 B per trainable parameter of the
    stage, as ratc.planner.failures counts them; each cluster writes and holds half (D = 2)."""
    planner = Planner(program.profile, MT3000)
    cand = open_program_config(program)
    trainable = planner.stages(cand.P, cand.T, cand.balance).trainable
    assert stage_state_bytes(program.module) == pytest.approx([12 * n for n in trainable])
    times = measure_checkpoint(program.module, MT3000, SPEC)
    model = checkpoint_cost(trainable, cand, SPEC)
    assert max(times.written) == pytest.approx(model.written_bytes)
    assert max(times.held) == pytest.approx(model.held_bytes)
    assert times.written == pytest.approx([12 * n / 2 + 8 for n in trainable])


@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_each_zero_stage_saves_its_shard_and_reads_back_what_it_holds(Z):
    """Under every ZeRO stage the program's state is 12 B per trainable parameter of each
    stage; the two replicas split its write, and each reads back its shard (ZeRO 0: all)."""
    from ratc.frontend.presets import trace_preset
    from ratc.step.config import parse_config
    from ratc.vm.system.driver import compile_candidate

    profile = trace_preset("tiny", 64)
    module = compile_candidate(profile, parse_config(f"P=2,D=2,Z={Z},b=1,A=4,FSR,deadline"), MT3000)
    trainable = Planner(profile, MT3000).stages(2, 1, "time").trainable
    assert stage_state_bytes(module) == pytest.approx([12 * n for n in trainable])
    times = measure_checkpoint(module, MT3000, SPEC)
    assert times.written == pytest.approx([12 * n / 2 + 8 for n in trainable])
    assert times.held == pytest.approx([12 * n / (1 if Z == 0 else 2) + 8 for n in trainable])
    assert times.read == pytest.approx(max(times.held) / 3.7e9, abs=2 / MT3000.dsp.clock)


def open_program_config(program):
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan

    return Plan.from_ir(find_plan(program.module)).config


def test_the_save_starts_when_every_cluster_has_finished_the_step_and_takes_the_shared_transfer(program):
    times = measure_checkpoint(program.module, MT3000, SPEC)
    tl, tasks = times.timeline, times.timeline.program.tasks
    saves = [i for i, t in enumerate(tasks) if t.kind == "checkpoint"]
    assert [tasks[i].name for i in saves] == ["0SAVE", "1SAVE"]
    step = [i for i, t in enumerate(tasks) if t.kind != "checkpoint" and t.name != "SAVE_BEGIN"]
    step_end = max(tl.end[i] for i in step)
    assert all(tl.start[i] == step_end for i in saves)
    assert max(tl.end) == max(tl.end[i] for i in saves) > step_end
    # 4 clusters x 3.7 GB/s < 2 TB/s: each writes at its port's bandwidth
    assert not times.storage_binds
    assert times.write == pytest.approx(max(times.written) / 3.7e9, abs=2 / MT3000.dsp.clock)
    assert times.read == pytest.approx(max(times.held) / 3.7e9, abs=2 / MT3000.dsp.clock)
    # a storage slower than the four ports: it binds, and the save takes the whole checkpoint at its pace
    slow = failure_spec(MT3000.with_overrides(storage_bandwidth="4GB/s"))
    times = measure_checkpoint(program.module, MT3000, slow)
    assert times.storage_binds and "the storage binds (4 x 3.70 GB/s > 4.00 GB/s)" in times.limit()
    assert times.write == pytest.approx(times.total_bytes / 4e9, rel=1e-6)


@pytest.mark.parametrize("at,expected", [
    (0.0, (0, 0.0, "step", 1, 0.0)),
    (25.0, (0, 0.0, "step", 3, 5.0)),          # two steps of 10 s done, 5 s into the third
    (31.0, (0, 0.0, "checkpoint", 3, 1.0)),    # 1 s into the save after step 3
    (32.0, (3, 32.0, "step", 4, 0.0)),         # the first checkpoint complete
    (70.0, (6, 64.0, "step", 7, 6.0)),
])
def test_a_failure_strikes_where_the_checkpointed_run_is(at, expected):
    """Every 3 steps of 10 s a save of 2 s: checkpoints complete at 32 s, 64 s, ..."""
    assert position(at, 3, 10.0, 2.0) == pytest.approx(expected)


def test_fail_at_loses_the_hand_computed_work_of_a_tiny_program(tiny_program, capsys):
    plain = fail_at(capsys, tiny_program, "--fail-at", "3:0s", "--checkpoint-every", "5")["failure"]
    step, write, read = plain["step_time_s"], plain["checkpoint_write_s"], plain["checkpoint_read_s"]
    segment = 5 * step + write
    # two checkpoints complete (after steps 5 and 10), then 3 steps and half of step 14
    at = 2 * segment + 3.5 * step
    f = fail_at(capsys, tiny_program, "--fail-at", f"3:{at!r}s", "--checkpoint-every", "5")["failure"]
    assert (f["cluster"], f["stage"], f["replica"]) == (3, 1, 1)
    assert (f["during"], f["failed_step"], f["last_checkpoint_step"], f["steps_lost"]) == ("step", 14, 10, 3)
    assert f["lost_work_s"] == pytest.approx(3.5 * step)
    assert f["restart_s"] == pytest.approx(600.0 + read)
    assert f["back_at_s"] == pytest.approx(at + 600.0 + read + 3.5 * step)
    # what it cut short, by task name (ratc.lifecycle.actions): stage 1's tasks
    assert f["running"] and {parse(r.split(" (")[0]).stage for r in f["running"]} == {1}, f["running"]
    # during the save after step 10: that checkpoint is lost, so the work since the one after step 5
    at = segment + 5 * step + write / 2
    f = fail_at(capsys, tiny_program, "--fail-at", f"0:{at!r}s", "--checkpoint-every", "5")["failure"]
    assert (f["during"], f["failed_step"], f["last_checkpoint_step"], f["steps_lost"]) == ("checkpoint", 10, 5, 5)
    assert f["lost_work_s"] == pytest.approx(5 * step + write / 2)
    assert f["running"] == ["0SAVE (tx)"]
    # before the first checkpoint completes there is nothing to read back
    assert (plain["last_checkpoint_step"], plain["read_back_s"], plain["lost_work_s"]) == (0, 0.0, 0.0)


def test_fail_at_checkpoints_at_dalys_interval_on_the_vms_times_by_default(tiny_program, capsys):
    out = fail_at(capsys, tiny_program, "--fail-at", "2:2h")
    assert set(out) == {"config", "results", "failure"}
    f = out["failure"]
    assert set(f) == {
        "cluster", "stage", "replica", "at_s", "checkpoint_every_steps", "checkpoint_every_from", "step_time_s",
        "checkpoint_write_s", "checkpoint_read_s", "checkpoint_bytes", "checkpoint_bytes_per_cluster_by_stage",
        "restart_read_bytes_per_cluster_by_stage", "checkpoint_write_s_by_stage", "checkpoint_limit",
        "last_checkpoint_step", "last_checkpoint_at_s", "during", "failed_step", "into_s", "running", "steps_lost",
        "lost_work_s", "relaunch_s", "read_back_s", "restart_s", "back_at_s", "system_mtbf_s",
        "expected_lost_work_s", "expected_goodput"}
    assert f["step_time_s"] == out["results"]["step_time_s"]
    mtbf = system_mtbf(SPEC.cluster_mtbf, 4)
    assert f["system_mtbf_s"] == pytest.approx(mtbf)
    restart = SPEC.relaunch_time + f["checkpoint_read_s"]
    assert f["checkpoint_every_from"] == "Daly"
    assert f["checkpoint_every_steps"] == steps_between_checkpoints(
        daly_interval(f["checkpoint_write_s"], mtbf), f["step_time_s"], f["checkpoint_write_s"], restart, mtbf)


def test_fail_at_text_names_the_task_cut_short_and_is_deterministic(tiny_program, capsys):
    args = ["run", str(tiny_program), "--fail-at", "1:95s", "--checkpoint-every", "40"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == text
    running = fail_at(capsys, tiny_program, *args[2:])["failure"]["running"]
    assert f": cluster 1 running {', '.join(running)}\n" in text if running else "cluster 1 idle" in text
    assert text.startswith(f"tiny on 4 clusters, {CONFIG}: step time ")
    assert "failure of cluster 1 (stage 0, replica 1) at 95.000 s (1.6 min):" in text
    for label in ("checkpoints     every 40 steps (--checkpoint-every)", "save ", "strikes ", "lost work ", "restart ",
                  "back at ", "expected "):
        assert "\n  " + label in text


def test_fail_at_traces_the_save_after_the_step_on_each_clusters_transmit_port(tiny_program, tmp_path, capsys):
    trace = tmp_path / "save.json"
    assert main(["run", str(tiny_program), "--fail-at", "0:1s", "--trace", str(trace)]) == 0
    capsys.readouterr()
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    saves = [e for e in events if e["cat"] == "checkpoint"]
    assert sorted(e["name"] for e in saves) == ["0SAVE", "1SAVE"]
    assert all(e["tid"] == 2 for e in saves)              # the tx track
    step_end = max(e["ts"] + e["dur"] for e in events if e["cat"] != "checkpoint")
    assert all(e["ts"] == pytest.approx(step_end) for e in saves)


@pytest.mark.parametrize("args,message", [
    (["--fail-at", "4:1s"], "--fail-at: cluster 4 is not one of the 4 clusters of P=2,D=2,Z=1"),
    (["--fail-at", "one:1s"], "--fail-at expects CLUSTER:TIME"),
    (["--fail-at", "1:90"], "--fail-at 1:90: expected a time in h, min, s, ms, us or ns"),
    (["--fail-at", "1:-5s"], "the time must be finite and not negative"),
    (["--checkpoint-every", "3"], "--checkpoint-every applies only with --fail-at"),
    (["--fail-at", "1:1s", "--checkpoint-every", "0"], "--checkpoint-every must be at least 1"),
    (["--fail-at", "1:1s", "--kernel", "0:F0"], "--fail-at applies only to the simulation"),
    (["--fail-at", "1:1s", "--critical-path"], "--critical-path reports the step alone"),
])
def test_fail_at_refuses_bad_arguments_with_what_and_where(tiny_program, capsys, args, message):
    assert main(["run", str(tiny_program), *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_fail_at_refuses_a_platform_without_a_failure_model(tiny_program, tmp_path, capsys):
    from ratc.platform.loader import PROFILE_DIR

    text = (PROFILE_DIR / "mt3000.toml").read_text()
    plain = tmp_path / "plain.toml"
    plain.write_text(text[:text.index("[failures]")])
    assert main(["run", str(tiny_program), "--platform", str(plain), "--fail-at", "0:1s"]) == 1
    err = capsys.readouterr().err
    assert f"({plain}) has no [failures] table" in err and "Traceback" not in err

