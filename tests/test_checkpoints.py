"""Checkpoints: saved by `ratc launch` (DCP, each rank its own shards) or `ratc train`,
resumed bit for bit, at another shape, by the other executor; damaged ones refused; a save
killed at any point never replaces the last complete one.

Oracles: the uninterrupted run of the same program (bitwise), and, for a resume at another
shape, the one-process executor at that shape started in memory from the same state.
"""

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ratc.cli.main import main
from ratc.dist.launch import launch
from ratc.dist.worker import RunConfig, Stopped
from ratc.errors import RatcError
from ratc.vm.functional import checkpoint as ckpt
from ratc.vm.functional.session import Session, TrainConfig, compile_for

pytestmark = pytest.mark.usefixtures("one_thread")

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")
DEADLINE_S = 240
PRESET, Z = "tiny-tied", 3        # uneven ZeRO-3 shards, and a tied segment of its own


def _cfg(P=2, D=2, M=2):
    return TrainConfig(model=EXAMPLE, preset=PRESET, P=P, D=D, Z=Z, M=M, b=1, reference=False)


def _identity(session):
    return ckpt.identity_of(session.executor, session.preset, session.seq_len, session.cfg.seed, session.cfg.opt.lr)


def _run(cfg, steps, first=0, path=None):
    """(losses, flat parameters) of the one-process executor, from `path` if given."""
    s = Session(cfg)
    if path is not None:
        ckpt.restore(s.executor, path)
    return [s.step(i)[0] for i in range(first, steps)], s.executor.parameters()


def _unsharded(results, module_cfg):
    """Each unit's flat parameters from the ranks' shards (the one-process layout)."""
    s = Session(module_cfg)
    return [s.executor.state[0][u].unshard(torch.cat([r.shards[u] for r in results if u in r.shards]))
            for u in range(len(s.units.units))]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A 4-step P=2, D=2 launch saving after steps 2 and 4: (losses, parameters, checkpoint root)."""
    root = tmp_path_factory.mktemp("ckpt")
    results = launch(compile_for(_cfg()), RunConfig(model=EXAMPLE, preset=PRESET, steps=4, checkpoint_dir=str(root),
                                                    checkpoint_every=2), 2, 2, deadline_s=DEADLINE_S)
    return results[0].losses, _unsharded(results, _cfg()), root


def test_each_rank_saves_its_own_shards_into_one_checkpoint_per_step(saved):
    _, _, root = saved
    assert sorted(p.name for p in root.iterdir()) == ["step-00000002", "step-00000004"]
    found = ckpt.find(root)
    assert (found.step, found.data_position, found.config) == (4, 16, "P=2,D=2,Z=3,b=1,A=2,FSR,deadline")
    assert sorted(p.name for p in found.path.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp",
                                                            "__2_0.distcp", "__3_0.distcp", "checkpoint.json"]


def test_launch_checkpoint_resumes_in_one_process_bit_for_bit(saved):
    losses, params, root = saved
    again, final = _run(_cfg(), 4, 2, ckpt.find(root / "step-00000002").path)
    assert again == losses[2:]
    assert all(torch.equal(a, b) for a, b in zip(final, params))


def test_train_checkpoint_resumes_under_launch_bit_for_bit(saved, tmp_path):
    losses, params, _ = saved
    s = Session(_cfg())
    for i in range(2):
        s.step(i)
    ckpt.save_local(s.executor, tmp_path, 2, _identity(s), "one process")
    results = launch(compile_for(_cfg()), RunConfig(model=EXAMPLE, preset=PRESET, steps=4,
                                                    resume=str(tmp_path / "step-00000002"), first_step=2),
                     2, 2, deadline_s=DEADLINE_S)
    assert results[0].first_step == 2 and results[0].losses == losses[2:]
    assert all(torch.equal(a, b) for a, b in zip(_unsharded(results, _cfg()), params))


def test_under_zero_3_the_ranks_of_a_stage_read_its_state_once_between_them(saved, tmp_path, monkeypatch):
    """Each rank reads its shard, not whole tensors to cut: over the 4 ranks (2 stages, 2
    replicas each) every element of the checkpoint is read once (a whole read: twice)."""
    import torch.distributed.checkpoint as dcp

    _, _, root = saved
    path = root / "step-00000002"
    real_load = dcp.load

    def counting_load(state, *args, **kwargs):
        local = sum((v.to_local() if hasattr(v, "to_local") else v).numel() for v in state.values())
        (tmp_path / f"read-{os.getpid()}").write_text(str(local))
        return real_load(state, *args, **kwargs)

    monkeypatch.setattr(dcp, "load", counting_load)      # (the forked ranks inherit it)
    launch(compile_for(_cfg()), RunConfig(model=EXAMPLE, preset=PRESET, steps=3, resume=str(path), first_step=2),
           2, 2, deadline_s=DEADLINE_S)
    saved = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    step_counts = sum(key.endswith(".adam_step") for key in saved)     # (one number each, on both replicas)
    reads = [int(f.read_text()) for f in tmp_path.glob("read-*")]
    assert len(reads) == 4 and sum(reads) == sum(m.size.numel() for m in saved.values()) + step_counts


def _resumes_as_uninterrupted(saved, module, cfg, step: int) -> None:
    """The last complete checkpoint under cfg.checkpoint_dir is after `step` steps, and the
    launch resumed from it ends as the uninterrupted run did."""
    losses, params, _ = saved
    found = ckpt.find(cfg.checkpoint_dir)
    assert found.step == step
    results = launch(module, dataclasses.replace(cfg, resume=str(found.path), first_step=step), 2, 2,
                     deadline_s=DEADLINE_S)
    assert results[0].losses == losses[step:]
    assert all(torch.equal(a, b) for a, b in zip(_unsharded(results, _cfg()), params))


@pytest.mark.parametrize("kill", ["in step 3", "saving step 3"])
def test_a_rank_killed_mid_run_resumes_from_the_last_checkpoint_bit_for_bit(saved, tmp_path, monkeypatch, kill):
    """Rank 0 is SIGKILLed after step 3's loss (before its save), or while it completes the
    checkpoint of step 3 (the ranks forked after the patch inherit it): the job fails, the
    checkpoint of step 2 stands, and resuming from it gives the uninterrupted run."""
    die = lambda *a: os.kill(os.getpid(), signal.SIGKILL)      # noqa: E731
    on_step = (lambda i, *a: die() if i == 2 else None) if kill == "in step 3" else None
    if kill == "saving step 3":
        complete = ckpt.write_manifest
        monkeypatch.setattr(ckpt, "write_manifest", lambda d, step, *a: die() if step == 3 else complete(d, step, *a))
    cfg = RunConfig(model=EXAMPLE, preset=PRESET, steps=4, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    module = compile_for(_cfg())
    with pytest.raises(RatcError, match=r"rank 0 \(stage 0, replica 0\) was killed by SIGKILL"):
        launch(module, cfg, 2, 2, on_step=on_step, deadline_s=DEADLINE_S)
    monkeypatch.undo()
    _resumes_as_uninterrupted(saved, module, cfg, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000001", "step-00000002", "step-00000003",
                                                         "step-00000004"]     # the dead save's leftovers gone


def test_on_sigterm_the_ranks_finish_the_step_save_and_stop(saved, tmp_path):
    """Rank 0 gets SIGTERM after step 2: every rank learns it with step 3's losses, saves step
    3 and stops; resuming from it gives the uninterrupted run."""
    cfg = RunConfig(model=EXAMPLE, preset=PRESET, steps=4, checkpoint_dir=str(tmp_path))
    module = compile_for(_cfg())
    term = lambda i, *a: os.kill(os.getpid(), signal.SIGTERM) if i == 1 else None      # noqa: E731
    with pytest.raises(Stopped, match="the ranks stopped on SIGTERM, each after saving its part of a checkpoint"):
        launch(module, cfg, 2, 2, on_step=term, deadline_s=DEADLINE_S)
    _resumes_as_uninterrupted(saved, module, cfg, 3)


@pytest.mark.parametrize("P,D,M", [(1, 2, 2), (2, 1, 4)])
def test_a_checkpoint_resumes_at_another_shape_as_a_run_started_in_memory_from_its_state(saved, P, D, M):
    losses, _, root = saved
    old = Session(_cfg())               # the saved state, rebuilt in memory by the same 2 steps
    for i in range(2):
        old.step(i)
    new = Session(_cfg(P, D, M))
    ckpt.apply_state(new.executor, ckpt.local_state(old.executor))
    oracle = [new.step(i)[0] for i in (2, 3)]
    results = launch(compile_for(_cfg(P, D, M)), RunConfig(model=EXAMPLE, preset=PRESET, steps=4,
                                                          resume=str(root / "step-00000002"), first_step=2),
                     P, D, deadline_s=DEADLINE_S)
    assert results[0].losses == oracle
    assert all(torch.equal(a, b) for a, b in zip(_unsharded(results, _cfg(P, D, M)), new.executor.parameters()))
    # (another layout sums in another order: the same training to rounding)
    assert oracle == pytest.approx(losses[2:], rel=1e-5)


# ---- damaged, foreign and interrupted checkpoints (one process) -----------------------------------

@pytest.fixture
def one_saved(tmp_path):
    """A tiny P=1, D=2 one-process run saved after steps 1 and 2; (session config, root)."""
    cfg = TrainConfig(model=EXAMPLE, preset="tiny", P=1, D=2, Z=1, M=2, b=1, reference=False)
    s = Session(cfg)
    for i in range(2):
        s.step(i)
        ckpt.save_local(s.executor, tmp_path, i + 1, _identity(s), "P=1,D=2")
    return cfg, tmp_path


def _edit(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    elif how == "truncate":
        path.write_bytes(bytes(data[:len(data) // 2]))
    else:
        path.unlink()


@pytest.mark.parametrize("how,message", [
    ("flip", "its sha256 differs from the manifest's"),
    ("truncate", "its sha256 differs from the manifest's"),
    ("delete", "which is missing"),
])
def test_a_damaged_checkpoint_is_refused_naming_the_file(one_saved, how, message):
    _, root = one_saved
    _edit(root / "step-00000002" / "__0_0.distcp", how)
    with pytest.raises(ckpt.CheckpointError, match=message):
        ckpt.find(root)


def test_a_checkpoint_of_another_training_is_refused_saying_what_differs(one_saved):
    _, root = one_saved
    other = Session(TrainConfig(model=EXAMPLE, preset="tiny", P=1, D=1, Z=0, M=2, b=1, seed=7, reference=False))
    with pytest.raises(ckpt.CheckpointError, match=r"global batch 4 \(this run: 2\); data seed 0 \(this run: 7\)"):
        ckpt.check_fits(ckpt.find(root), _identity(other))


def test_a_manifest_that_is_not_one_is_refused(one_saved):
    _, root = one_saved
    (root / "step-00000002" / "checkpoint.json").write_text("{\"format\": \"something\"}")
    with pytest.raises(ckpt.CheckpointError, match="not a ratc checkpoint manifest"):
        ckpt.find(root / "step-00000002")


# A saver in a fresh interpreter (a forked one would inherit the test process's torch
# threads), SIGKILLed as it enters `kill_in`: here once DCP wrote every tensor file, before
# the manifest and the rename (`local_state`, before anything is written, behaves alike).
_SAVER = """
import os, signal, sys
from ratc.vm.functional import checkpoint as ckpt
from ratc.vm.functional.session import Session, TrainConfig
s = Session(TrainConfig(model=sys.argv[1], preset="tiny", P=1, D=2, Z=1, M=2, b=1, reference=False))
setattr(ckpt, sys.argv[3], lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL))
ckpt.save_local(s.executor, sys.argv[2], 3, ckpt.identity_of(s.executor, s.preset, s.seq_len, 0, 1e-3), "killed")
"""


@pytest.mark.parametrize("kill_in", ["write_manifest"])
def test_a_save_killed_midway_leaves_the_last_complete_checkpoint(one_saved, kill_in):
    cfg, root = one_saved
    s = Session(cfg)
    saver = subprocess.run([sys.executable, "-c", _SAVER, EXAMPLE, str(root), kill_in], timeout=120,
                           capture_output=True, text=True)
    assert saver.returncode == -signal.SIGKILL, saver.stderr
    assert ckpt.find(root).step == 2                       # the last complete one stands
    assert any(".ratc-tmp-" in p.name for p in root.iterdir())      # the dead saver's leftovers
    ckpt.save_local(s.executor, root, 3, _identity(s), "again")     # the next save removes them
    assert sorted(p.name for p in root.iterdir()) == ["step-00000001", "step-00000002", "step-00000003"]


def test_a_save_never_replaces_a_directory_ratc_did_not_write(one_saved):
    cfg, root = one_saved
    mine = root / "step-00000005"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ckpt.CheckpointError, match="is not a ratc checkpoint"):
        ckpt.save_local(Session(cfg).executor, root, 5, _identity(Session(cfg)), "x")
    assert (mine / "notes.txt").read_text() == "mine"


def test_train_resumes_its_own_checkpoint_with_the_losses_of_the_uninterrupted_run(tmp_path, capsys):
    base = [EXAMPLE, "--preset", "tiny", "--pp", "2", "--dp", "1", "--zero", "0", "--micro-batches", "2",
            "--micro-batch-size", "1", "--no-reference"]
    assert main(["train", *base, "--steps", "3", "--checkpoint-dir", str(tmp_path / "c"), "--checkpoint-every", "1",
                 "--csv", str(tmp_path / "a.csv")]) == 0
    assert main(["train", *base, "--steps", "3", "--resume", str(tmp_path / "c" / "step-00000001"),
                 "--csv", str(tmp_path / "b.csv")]) == 0
    a, b = ((tmp_path / n).read_text().splitlines() for n in ("a.csv", "b.csv"))
    assert b[1:] == a[2:]          # steps 1 and 2, numbered as in the uninterrupted run
    assert "resuming at step 1" in capsys.readouterr().err


@pytest.mark.parametrize("extra,message", [
    (["--checkpoint-every", "2"], "--checkpoint-every N needs --checkpoint-dir DIR"),
    (["--resume", "{ckpt}"], "the checkpoint is after step 2; --steps 2 leaves nothing to run"),
    (["--resume", "{missing}"], "no such checkpoint directory"),
])
def test_checkpoint_options_are_checked_before_training(one_saved, tmp_path, capsys, extra, message):
    _, root = one_saved
    extra = [e.format(ckpt=root, missing=tmp_path / "none") for e in extra]
    argv = ["train", EXAMPLE, "--preset", "tiny", "--dp", "2", "--zero", "1", "--micro-batches", "2",
            "--micro-batch-size", "1", "--no-reference", "--steps", "2", *extra]
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_ratc_launch_on_sigterm_has_its_ranks_save_then_exits_143(tmp_path):
    """SIGTERM to `ratc launch` (a scheduler ending the job) reaches the ranks, which finish
    the step, save it and stop; the launcher exits 143 leaving a complete checkpoint."""
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--plan", "P=1,D=2,Z=1,b=1,A=2,FSR,deadline", "--no-run",
                 "-o", str(tmp_path / "prog")]) == 0
    job = subprocess.Popen([sys.executable, "-m", "ratc", "launch", str(tmp_path / "prog"), "--steps", "1000",
                            "--checkpoint-dir", str(tmp_path / "ckpt")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().startswith("step    0")
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=120)
    finally:
        job.kill()
    assert job.returncode == 143, err
    found = ckpt.find(tmp_path / "ckpt")
    assert 1 <= found.step < 1000 and f"stopped by SIGTERM after step {found.step}" in err
