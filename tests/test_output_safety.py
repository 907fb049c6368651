"""Outputs never destroy a user's data: only ratc programs are replaced, no output is an
input, and a replacement killed at any instant leaves the old program or the new one."""

import json
import os
import random
import shutil
import signal
import sys
import time

import pytest

from ratc.atomic import OLD_TAG, TMP_TAG, Staging, recover
from ratc.cli.main import main
from ratc.program import MANIFEST, ProgramError, load_program, record_derived, write_program

FILES = {"program.ir": "module {\n}\n", "kernels/gemm_2x2x2_f16.rasm": "; kernel\n", "plan.json": b"{}"}
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "llama.py")


def leftovers(parent):
    """ratc's temporaries beside a target (and the old ones' names, .NAME.old / .NAME.XXXX)."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def compile_tiny(*extra):
    return main(["compile", "--preset", "tiny", "--clusters", "2", "--no-run", *extra])


def test_compile_refuses_to_replace_a_non_program_directory(tmp_path, capsys):
    """A user's project directory holding a manifest.json of its own is not a ratc program."""
    project = tmp_path / "project"
    project.mkdir()
    (project / MANIFEST).write_text('{"name": "my-app", "version": "1.0"}')
    (project / "main.py").write_text("print('hello')\n")
    assert compile_tiny("-o", str(project)) == 1
    assert "is not a ratc program directory (not a ratc manifest.json)" in capsys.readouterr().err
    assert sorted(p.name for p in project.iterdir()) == ["main.py", MANIFEST]
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    with pytest.raises(ProgramError, match="is not a ratc program directory \\(no manifest.json\\)"):
        write_program(plain, FILES)
    assert (plain / "notes.txt").read_text() == "mine" and leftovers(tmp_path) == []


def test_recompiling_refuses_a_program_directory_holding_files_the_user_added(tmp_path, capsys):
    out = write_program(tmp_path / "prog", FILES)
    (out / "notes.txt").write_text("my notes")
    (out / "kernels" / "mine.rasm").write_text("; mine")
    (out / "results").mkdir()
    with pytest.raises(ProgramError, match=r"holds files ratc did not write \(kernels/mine.rasm, notes.txt, results/\)"):
        write_program(out, FILES)
    assert compile_tiny("-o", str(out)) == 1
    assert "notes.txt" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "my notes" and load_program(out).text("program.ir") == FILES["program.ir"]


def test_a_link_inside_a_program_directory_is_not_ratcs(tmp_path):
    out = write_program(tmp_path / "prog", FILES)
    (out / "link").symlink_to(tmp_path)
    with pytest.raises(ProgramError, match=r"did not write \(link\)"):
        write_program(out, FILES)


def test_report_files_are_recorded_as_derived_so_recompiling_replaces_them(tmp_path):
    out = write_program(tmp_path / "prog", FILES)
    record_derived(out, [out / "report.html", out / "memory.png", tmp_path / "elsewhere.html"])
    (out / "report.html").write_text("<html>")
    (out / "memory.png").write_bytes(b"png")
    assert json.loads((out / MANIFEST).read_text())["derived"] == ["memory.png", "report.html"]
    load_program(out)                                   # derived files are not program files
    write_program(out, FILES)
    assert not (out / "report.html").exists()


@pytest.mark.parametrize("how", ["same name", "hard link", "symlink"])
def test_an_output_may_never_be_an_input(tmp_path, capsys, how):
    model = tmp_path / "model.py"
    shutil.copy(EXAMPLE, model)
    before = model.read_bytes()
    target = {"same name": model, "hard link": tmp_path / "hard.py", "symlink": tmp_path / "soft.py"}[how]
    if how == "hard link":
        os.link(model, target)
    elif how == "symlink":
        target.symlink_to(model)
    assert main(["compile", str(model), "--preset", "tiny", "--emit=graph", "-o", str(target)]) == 1
    assert "is an input of this command" in capsys.readouterr().err
    assert model.read_bytes() == before


def test_no_output_replaces_a_bundled_example_or_an_hf_config(tmp_path, capsys):
    example = os.path.realpath(EXAMPLE)
    before = open(example, "rb").read()
    assert main(["compile", "--preset", "tiny", "--emit=graph", "-o", example]) == 1
    assert open(example, "rb").read() == before
    config = tmp_path / "config.json"
    shutil.copy(os.path.join(os.path.dirname(EXAMPLE), "hf", "qwen2.json"), config)
    assert main(["plan", "--hf-config", str(config), "--clusters", "2", "--global-batch", "2", "-o", str(config)]) == 1
    assert "is an input of this command" in capsys.readouterr().err
    ir = tmp_path / "x.ir"
    ir.write_text("module {\n}\n")
    assert main(["opt", str(ir), "-p", "verify", "-o", str(ir)]) == 1


def test_a_program_directory_holding_the_model_file_is_not_replaced(tmp_path, capsys):
    out = write_program(tmp_path / "prog", FILES)
    model = out / "model.py"
    shutil.copy(EXAMPLE, model)
    assert main(["compile", str(model), "--preset", "tiny", "--clusters", "2", "--no-run", "-o", str(out)]) == 1
    assert "holds an input of this command" in capsys.readouterr().err
    assert model.is_file()


def test_compile_through_a_symlink_keeps_the_link(tmp_path):
    real = write_program(tmp_path / "real", FILES)
    link = tmp_path / "link"
    link.symlink_to(real)
    write_program(link, {"program.ir": "module @b {\n}\n"})
    assert link.is_symlink() and load_program(real).text("program.ir") == "module @b {\n}\n"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(ProgramError, match="a symbolic link that leads nowhere"):
        write_program(loop, FILES)


def test_the_current_directory_is_never_replaced(tmp_path, monkeypatch):
    out = write_program(tmp_path / "prog", FILES)
    monkeypatch.chdir(out / "kernels")
    with pytest.raises(ProgramError, match="is \\(or holds\\) the current directory"):
        write_program(out, FILES)


def test_an_interrupted_swap_is_finished_when_the_new_program_is_complete(tmp_path):
    """Killed between its two renames (where renameat2 cannot exchange), a writer leaves no
    target: the next run moves the complete new program in."""
    out = write_program(tmp_path / "prog", FILES)
    new = write_program(tmp_path / f".prog{TMP_TAG}abc123", {"program.ir": "module @new {\n}\n"})
    os.rename(out, tmp_path / f".prog{OLD_TAG}abc123")
    assert recover(out) == "finished"
    assert load_program(out).text("program.ir") == "module @new {\n}\n"
    assert leftovers(tmp_path) == [] and not new.exists()


def test_an_interrupted_swap_without_its_new_program_is_rolled_back(tmp_path):
    out = write_program(tmp_path / "prog", FILES)
    os.rename(out, tmp_path / f".prog{OLD_TAG}abc123")
    assert recover(out) == "rolled back"
    assert load_program(out).text("program.ir") == FILES["program.ir"] and leftovers(tmp_path) == []


def test_dead_writers_temporaries_are_removed_and_a_live_writers_kept(tmp_path):
    out = write_program(tmp_path / "prog", FILES)
    (tmp_path / f".prog{TMP_TAG}dead01").mkdir()
    (tmp_path / ".prog.mine").mkdir()                   # no ratc tag: never touched
    live = Staging(out)
    try:
        assert recover(out) is None
        assert leftovers(tmp_path) == sorted([".prog.mine", live.path.name])
    finally:
        live.discard()
        live.close()


def test_writes_into_one_directory_from_two_processes_stay_whole(tmp_path):
    out = tmp_path / "prog"
    pids = []
    for tag in "ab":
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                for i in range(20):
                    write_program(out, {"program.ir": f"module @{tag}{i} {{\n}}\n", "pad.bin": os.urandom(50_000)})
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    assert all(os.waitpid(pid, 0)[1] == 0 for pid in pids)
    assert load_program(out).text("program.ir").startswith("module @") and leftovers(tmp_path) == []


def _killed_writer(target, files, signum, delay, force_two_renames):
    """Fork a writer of `files` into `target`, send it `signum` after `delay` seconds, and
    return its exit status."""
    pid = os.fork()
    if pid == 0:
        from ratc.cli.main import _terminate_as_interrupt

        if force_two_renames:
            import ratc.atomic
            ratc.atomic._exchange = lambda a, b: False
        code = 0
        try:
            with _terminate_as_interrupt():
                write_program(target, files)
        except KeyboardInterrupt:
            code = 143
        os._exit(code)
    time.sleep(delay)
    os.kill(pid, signum)
    return os.waitpid(pid, 0)[1]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_killed_at_random_instants_a_write_leaves_the_old_or_the_new_program(tmp_path, signum):
    """10 writes each killed at a random instant (the full count: benchmarks/kill_compile.py)."""
    rng = random.Random(signum)
    old = {f"kernels/k{i}.rasm": f"; old {i}\n" * 2000 for i in range(40)}
    new = {f"kernels/k{i}.rasm": f"; new {i}\n" * 2000 for i in range(40)}
    target = tmp_path / "prog"
    start = time.perf_counter()
    write_program(target, old)
    duration = time.perf_counter() - start
    for trial in range(10):
        _killed_writer(target, new, signum, rng.uniform(0, 2 * duration), force_two_renames=trial % 2 == 1)
        recover(target)     # what the next run does first
        got = load_program(target).files
        assert got in ({k: v.encode() for k, v in old.items()}, {k: v.encode() for k, v in new.items()})
        assert leftovers(tmp_path) == []
        write_program(target, old)


def test_killed_between_the_two_renames_the_next_run_finishes_the_swap(tmp_path):
    """The instant random kills rarely hit: the old program moved aside, the new one not yet in."""
    target = write_program(tmp_path / "prog", FILES)
    pid = os.fork()
    if pid == 0:
        import ratc.atomic

        ratc.atomic._exchange = lambda a, b: False
        real_rename = os.rename

        def rename_then_die(src, dst):
            real_rename(src, dst)
            if OLD_TAG in str(dst):
                os.kill(os.getpid(), signal.SIGKILL)
        os.rename = rename_then_die
        write_program(target, {"program.ir": "module @new {\n}\n"})
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == signal.SIGKILL
    assert not target.exists()
    write_program(tmp_path / "other", FILES)            # another target's write leaves it alone
    assert not target.exists()
    assert recover(target) == "finished"
    assert load_program(target).text("program.ir") == "module @new {\n}\n" and leftovers(tmp_path) == []


def test_sigterm_ends_a_command_with_143_and_its_cleanup(tmp_path):
    """As on Ctrl-C, the half-built program is removed and the old one stays."""
    out = write_program(tmp_path / "prog", FILES)
    ready, done = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        import ratc.atomic

        def wait_for_the_signal(*args, **kw):
            os.write(ready[1], b"x")
            time.sleep(60)
        ratc.atomic.Staging.swap_in = wait_for_the_signal
        sys.stderr = os.fdopen(done[1], "w")
        code = compile_tiny("-o", str(out))
        sys.stderr.flush()
        os._exit(code)
    status = None
    try:
        assert os.read(ready[0], 1) == b"x"
        os.kill(pid, signal.SIGTERM)
        status = os.waitpid(pid, 0)[1]
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 143
    assert b"ratc: terminated" in os.read(done[0], 1 << 16)
    assert load_program(out).files["program.ir"] == FILES["program.ir"].encode() and leftovers(tmp_path) == []
