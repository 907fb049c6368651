"""The distributed runtime: compiled programs on torch.distributed (gloo), one process per rank.

Oracle: the one-process functional executor (itself checked against plain PyTorch training
in test_functional.py) on the same program, seeds and data, equal bit for bit at D <= 2.
The full matrix is `benchmarks/bench_dist.py`; these run a representative subset.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ratc.cli.main import main
from ratc.dist import source
from ratc.dist.launch import launch
from ratc.dist.worker import RunConfig
from ratc.errors import RatcError
from ratc.ir import print_module
from ratc.lifecycle.lowering import find_pipeline
from ratc.program import write_program
from ratc.vm.functional.session import Session, TrainConfig, compile_for, parameter_deviation, relative_deviation
from ratc.vm.functional.units import flat_params

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")
STEPS = 2
DEADLINE_S = 240        # no test waits longer for its ranks (each wait inside is bounded too)


def one_process(cfg: TrainConfig, module, steps: int = STEPS):
    """Losses and final flat parameters of the one-process executor on the program."""
    s = Session(cfg, module=module)
    return [s.step(i)[0] for i in range(steps)], s.executor.parameters()


def assembled(results, unit: int, n: int, Z: int) -> torch.Tensor:
    """A unit's full flat parameters from the ranks' shards (stage order, replica order)."""
    shards = [r.shards[unit] for r in results if unit in r.shards]
    return torch.cat(shards)[:n] if Z >= 1 else shards[0]


@pytest.mark.parametrize("P,D,Z,act,state_pipeline,keep", [
    (2, 2, 1, "fsr", True, ""),         # 4 ranks: every transfer and collective kind but the all-reduce
    (2, 2, 3, "ckpt", False, ""),       # ZeRO-3 gathers, bulk state chain
    (1, 2, 0, "full", True, ""),        # all-reduce GradSync
    (1, 1, 0, "full", True, ""),        # one replica: its GradSync hands on the gradient itself
])
def test_launch_equals_the_one_process_executor_bit_for_bit(P, D, Z, act, state_pipeline, keep):
    cfg = TrainConfig(model=EXAMPLE, P=P, D=D, Z=Z, act=act, state_pipeline=state_pipeline, M=2, b=1,
                      reference=False, keep=keep)
    module = compile_for(cfg)
    results = launch(module, RunConfig(model=EXAMPLE, preset="tiny", steps=STEPS, timeout_s=60), P, D,
                     deadline_s=DEADLINE_S)
    losses, params = one_process(cfg, module)
    assert [r.losses for r in results] == [losses] * (P * D)      # every rank reports the step's loss
    for u, full in enumerate(params):
        assert torch.equal(assembled(results, u, full.numel(), Z), full), f"unit {u}"


@pytest.mark.parametrize("kw", [
    # (interleaved Ckpt's 20 steps are the executor's: tests/test_interleaved_training.py;
    # the runtime's transport is the same for it as for interleaved FSR below)
    dict(act="fsr", Z=2, M=2, keep="2s1l1f"),        # selective, whole-layer and full-save layers (issue 31)
    dict(act="ckpt", Z=2, M=3, v=2, sched="zbv"),    # ZB-V: I and W; rank 1 hands over to itself (issue 31)
    dict(act="fsr", Z=1, M=4, v=2),                  # interleaved FSR: each chunk's Recovers co-run
    dict(act="fsr", Z=2, M=4, v=2, sched="zb1p", corun="w"),   # ZB1P + FSR: Recovers in W slots too
], ids=["selective", "zbv", "interleaved-fsr-v2", "zb1p-fsr-corun-w"])
def test_two_ranks_train_as_pytorch_over_20_steps(kw):
    """Oracle: plain PyTorch on the same batches; every step's loss and the final weights within
    1e-5, and equal bit for bit to the one-process executor's."""
    steps = 20
    cfg = TrainConfig(model=EXAMPLE, P=2, D=1, b=1, **kw)
    module = compile_for(cfg)
    results = launch(module, RunConfig(model=EXAMPLE, preset="tiny", steps=steps, timeout_s=60), 2, 1,
                     deadline_s=DEADLINE_S)
    s = Session(cfg, module=module)
    pairs = [s.step(i) for i in range(steps)]
    assert [r.losses for r in results] == [[ours for ours, _ in pairs]] * 2
    # each rank holds the state of its own chunks' units only (a message names its peer's)
    assert [sorted(r.shards) for r in results] == [s.attributes["units"] for s in find_pipeline(module).region.ops]
    assert max(relative_deviation(ours, ref) for ours, (_, ref) in zip(results[0].losses, pairs)) <= 1e-5
    ours = [assembled(results, u, full.numel(), cfg.Z) for u, full in enumerate(s.executor.parameters())]
    assert all(torch.equal(a, b) for a, b in zip(ours, s.executor.parameters()))
    reference = [flat_params(u, s.reference.model) for u in s.units.units]
    assert parameter_deviation(ours, reference) <= 1e-5


def _program_dir(tmp_path, cfg: TrainConfig) -> Path:
    """A program directory for `cfg` recording its model file, as `ratc compile` writes one."""
    return write_program(tmp_path / "prog", {"program.ir": print_module(compile_for(cfg))},
                         {"model_source": source.record(cfg.model, cfg.preset, 64)})


def test_a_dead_rank_ends_the_job_naming_it(tmp_path):
    """Rank 0 dies by SIGKILL after its first step: the job fails at once, not after the timeout."""
    cfg = TrainConfig(model=EXAMPLE, P=2, D=1, Z=0, M=2, b=1, reference=False)

    def die(*step):
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(RatcError, match=r"rank 0 \(stage 0, replica 0\) was killed by SIGKILL; the other ranks were ended"):
        launch(compile_for(cfg), RunConfig(model=EXAMPLE, preset="tiny", steps=5, timeout_s=50), 2, 1, on_step=die,
               deadline_s=DEADLINE_S)
    assert time.monotonic() - start < 40


def test_a_job_past_its_deadline_is_ended():
    cfg = TrainConfig(model=EXAMPLE, P=1, D=2, Z=0, M=2, b=1, reference=False)

    def stall(*step):
        time.sleep(60)
    start = time.monotonic()
    with pytest.raises(RatcError, match="the job did not finish within 2 s; its ranks were ended"):
        launch(compile_for(cfg), RunConfig(model=EXAMPLE, preset="tiny", steps=2), 1, 2, on_step=stall, deadline_s=2)
    assert time.monotonic() - start < 30


def test_a_wait_past_the_timeout_names_the_op_the_rank_and_the_peer(capfd):
    """Rank 0 stalls after step 0; rank 1's next wait on it expires and ends the job."""
    cfg = TrainConfig(model=EXAMPLE, P=2, D=1, Z=0, M=2, b=1, reference=False)

    def stall(*step):
        time.sleep(30)
    start = time.monotonic()
    with pytest.raises(RatcError, match=r"rank 1 \(stage 1, replica 0\) exited with status 1"):
        launch(compile_for(cfg), RunConfig(model=EXAMPLE, preset="tiny", steps=3, timeout_s=3), 2, 1, on_step=stall,
               deadline_s=DEADLINE_S)
    assert time.monotonic() - start < 25
    err = capfd.readouterr().err
    assert "rank 1 (stage 1, replica 0): " in err and "did not complete within 3 s waiting for rank 0 (stage 0, replica 0)" in err


def test_a_program_records_its_model_and_refuses_a_changed_file(tmp_path, capsys):
    model = tmp_path / "model.py"
    shutil.copy(EXAMPLE, model)
    cfg = TrainConfig(model=str(model), P=1, D=1, M=2, b=1)
    prog = _program_dir(tmp_path, cfg)
    model.write_text(model.read_text() + "\n# edited\n")
    assert main(["launch", str(prog), "--steps", "1"]) == 1
    err = capsys.readouterr().err
    assert f"{model}: sha256 {source.file_sha256(model)} differs from the file the program was compiled from" in err
    assert source.file_sha256(EXAMPLE) in err and "--model" in err


def test_a_program_with_tensor_parallelism_is_refused(tmp_path, capsys):
    out = tmp_path / "tp"
    assert main(["compile", "--preset", "tiny", "--plan", "P=1,D=1,T=2,Z=0,b=1,A=2,Full", "--no-run",
                 "-o", str(out)]) == 0
    assert main(["launch", str(out)]) == 1
    assert "T=2; the runtime executes no tensor parallelism" in capsys.readouterr().err


def test_torchrun_runs_a_program_compiled_by_ratc_compile_unchanged(tmp_path):
    """`ratc compile` -> `torchrun -m ratc.dist` -> the same losses as `ratc launch` and the executor."""
    out = tmp_path / "prog"
    assert main(["compile", "--preset", "tiny", "--plan", "P=2,D=1,Z=1,b=1,A=2,FSR,deadline", "--no-run",
                 "-o", str(out)]) == 0
    csv = tmp_path / "losses.csv"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "-m", "ratc.dist", str(out), "--steps", "2", "--timeout", "60", "--csv", str(csv)],
                          capture_output=True, text=True, timeout=240, env=env)
    # (a rank's own last words come before torchrun's summary of the failure: keep both)
    assert proc.returncode == 0, proc.stderr[:3000] + "\n...\n" + proc.stderr[-2000:]
    assert "Warning" not in proc.stderr          # torch's current collective APIs only
    got = [float(line.split(",")[1]) for line in csv.read_text().splitlines()[1:]]
    cfg = TrainConfig(model=EXAMPLE, P=2, D=1, Z=1, M=2, b=1, reference=False)
    from ratc.program_check import open_program
    module = open_program(out).module
    assert got == one_process(cfg, module)[0]


def _swap_two_grad_syncs_on_rank_1(monkeypatch):
    """A test-only fault: rank 1 issues the GradSyncs of units 4 and 3 (same size) swapped."""
    from ratc.dist.transport import DistTransport
    from ratc.lifecycle.lowering import find_pipeline
    from ratc.vm.functional.executor import FunctionalExecutor

    original = FunctionalExecutor.__init__

    def init(self, module, units, init_params, opt, transport=None, *rest):
        if isinstance(transport, DistTransport) and transport.mesh.rank == 1:
            ops = find_pipeline(module).region.ops[0].region.ops
            i, j = (next(k for k, op in enumerate(ops) if op.name == "life.grad_sync" and op.attributes["unit"] == u)
                    for u in (4, 3))
            ops[i], ops[j] = ops[j], ops[i]
        original(self, module, units, init_params, opt, transport, *rest)
    monkeypatch.setattr(FunctionalExecutor, "__init__", init)


def test_check_collectives_stops_a_reordered_schedule_naming_the_op(monkeypatch, capfd):
    cfg = TrainConfig(model=EXAMPLE, P=1, D=2, Z=0, act="full", state_pipeline=False, M=2, b=1, reference=False)
    module = compile_for(cfg)
    _swap_two_grad_syncs_on_rank_1(monkeypatch)
    run = RunConfig(model=EXAMPLE, preset="tiny", steps=STEPS, timeout_s=60)
    # without the check, gloo pairs unit 4's gradient with unit 3's: the run ends, with wrong numbers
    results = launch(module, run, 1, 2, deadline_s=DEADLINE_S)
    assert results[0].losses[0] == one_process(cfg, module, steps=1)[0][0]    # (step 0's loss comes before)
    assert results[0].losses[1] != one_process(cfg, module)[0][1]
    with pytest.raises(RatcError, match=r"rank \d \(stage 0, replica \d\) exited with status 1"):
        launch(module, RunConfig(**{**run.__dict__, "check_collectives": True}), 1, 2, deadline_s=DEADLINE_S)
    err = capfd.readouterr().err
    assert "collective #2 of the step differs across the replicas at " in err
    assert "rank 0 (stage 0, replica 0) issues all-reduce of unit 4" in err
    assert "rank 1 (stage 0, replica 1) issues all-reduce of unit 3" in err


def test_the_real_trace_has_the_vms_layout_and_task_names(tmp_path, capfd):
    """`ratc launch --trace` and `ratc run --trace` of one program: valid Chrome JSON, one
    process per rank with compute / waits / send / receive / collectives tracks, the VM's names."""
    import json
    import re

    out = tmp_path / "prog"
    assert main(["compile", "--preset", "tiny", "--plan", "P=2,D=2,Z=1,b=1,A=2,FSR,deadline", "--no-run",
                 "-o", str(out)]) == 0
    real, sim, csv = tmp_path / "real.json", tmp_path / "sim.json", tmp_path / "steps.csv"
    plot = tmp_path / "loss.png"
    assert main(["launch", str(out), "--steps", "2", "--trace", str(real), "--csv", str(csv), "--plot", str(plot)]) == 0
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert main(["run", str(out), "--trace", str(sim)]) == 0
    printed = capfd.readouterr().out
    assert re.search(r"step    1  loss \d\.\d+ .* tokens/s  exposed comm .* ms \(", printed)
    events = json.loads(real.read_text())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {pid for pid, _ in names} == {0, 1, 2, 3}
    assert {n for (pid, _), n in names.items() if pid == 0} == {"compute", "waits", "send", "receive", "collectives"}
    slices = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    vm = [e for e in json.loads(sim.read_text())["traceEvents"] if e["ph"] == "X"]

    def named(trace, kinds):
        return {re.sub(r"#\d+$", "", e["name"]) for e in trace if e["cat"] in kinds}
    compute = {"forward", "backward", "recover", "update"}
    assert named(slices, compute) == named(vm, compute)
    assert named(slices, {"grad_sync", "prefetch"}) == named(vm, {"grad_sync", "prefetch"})
    assert {n for n in named(slices, {"send"}) if "SEND" in n} == named(vm, {"send"})
    # every slice (a wait too) is a task name; its args hold the long form, the VM's for the same task
    from ratc.lifecycle.actions import parse
    long = {e["name"]: e["args"]["description"] for e in vm}
    for e in slices:
        a = parse(e["name"].removeprefix("wait "))
        assert f"on stage {a.stage}" in e["args"]["description"], e
        assert a.mb is None or f"micro-batch {a.mb}" in e["args"]["description"], e
        assert e["args"]["description"] == long.get(e["name"], e["args"]["description"]), e
        assert e["args"]["description"].startswith("Wait for the ") == e["name"].startswith("wait "), e
    assert any(e["name"] in long for e in slices)
    rows = csv.read_text().splitlines()
    assert rows[0] == "step,loss,seconds,exposed_comm_seconds" and len(rows) == 3


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_nccl_on_two_gpus_trains_as_the_one_process_executor(tmp_path):
    """The NCCL path (`ratc launch --backend nccl` starts torchrun): one GPU per rank,
    device-resident tensors. GPU kernels round differently from the CPU's, so the
    comparison is to 1e-4 rather than bit for bit."""
    cfg = TrainConfig(model=EXAMPLE, P=2, D=1, Z=1, act="fsr", M=2, b=1, reference=False)
    prog = _program_dir(tmp_path, cfg)
    csv = tmp_path / "steps.csv"
    assert main(["launch", str(prog), "--backend", "nccl", "--steps", str(STEPS), "--csv", str(csv)]) == 0
    got = [float(line.split(",")[1]) for line in csv.read_text().splitlines()[1:]]
    losses, _ = one_process(cfg, compile_for(cfg))
    assert max(abs(a - b) / abs(b) for a, b in zip(got, losses)) < 1e-4
