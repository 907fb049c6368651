"""Program directories: manifest hashes, atomic replacement and tamper detection."""

import hashlib
import json
import sys

import pytest

from ratc.program import MANIFEST, ProgramError, load_program, write_program

FILES = {"program.ir": "module {\n}\n", "kernels/gemm_2x2x2_f16.rasm": "; kernel\n", "plan.json": b"{}"}


def test_round_trip_and_manifest_hashes(tmp_path):
    out = write_program(tmp_path / "prog", FILES, meta={"model": "tiny"})
    manifest = json.loads((out / MANIFEST).read_text())
    for rel, content in FILES.items():
        data = content.encode() if isinstance(content, str) else content
        assert manifest["files"][rel] == hashlib.sha256(data).hexdigest()
    prog = load_program(out)
    assert prog.text("program.ir") == FILES["program.ir"]
    assert prog.names("kernels/") == ["kernels/gemm_2x2x2_f16.rasm"]
    assert prog.meta == {"model": "tiny"}


def test_edited_file_is_refused(tmp_path):
    out = write_program(tmp_path / "prog", FILES)
    (out / "kernels" / "gemm_2x2x2_f16.rasm").write_text("; kernel\n  vmac\n")
    with pytest.raises(ProgramError, match="gemm_2x2x2_f16.rasm: content does not match the manifest"):
        load_program(out)


def test_missing_file_is_refused(tmp_path):
    out = write_program(tmp_path / "prog", FILES)
    (out / "plan.json").unlink()
    with pytest.raises(ProgramError, match="'plan.json' listed in the manifest is missing"):
        load_program(out)


def test_not_a_program(tmp_path):
    with pytest.raises(ProgramError, match="no such program directory"):
        load_program(tmp_path / "nothing")
    (tmp_path / "dir").mkdir()
    with pytest.raises(ProgramError, match="no manifest.json"):
        load_program(tmp_path / "dir")


def test_rewrite_replaces_whole_directory_and_protects_foreign_dirs(tmp_path):
    out = write_program(tmp_path / "prog", FILES)
    write_program(out, {"program.ir": "module @b {\n}\n"})
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == [MANIFEST, "program.ir"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ProgramError, match="not a ratc program directory"):
        write_program(foreign, FILES)
    assert (foreign / "notes.txt").read_text() == "keep me"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary left behind"


def test_written_files_get_ordinary_permissions(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        out = write_program(tmp_path / "prog", FILES)
    finally:
        os.umask(umask)
    assert os.stat(out).st_mode & 0o777 == 0o755
    assert os.stat(out / "program.ir").st_mode & 0o777 == 0o644


def test_outputs_the_system_refuses_are_user_errors(tmp_path):
    """A file or a directory in the way is a clear OutputError / ProgramError naming it, and
    nothing half-written is left behind."""
    from ratc.io import write_atomic
    from ratc.errors import OutputError

    blocker = tmp_path / "afile"
    blocker.write_text("mine")
    with pytest.raises(ProgramError, match="afile: exists and is not a directory"):
        write_program(blocker, FILES)
    with pytest.raises(OutputError, match=f"cannot write {blocker}/sub: {blocker} is not a directory"):
        write_program(blocker / "sub", FILES)
    with pytest.raises(OutputError, match=f"cannot write {tmp_path}: it is a directory"):
        write_atomic(tmp_path, "text")
    with pytest.raises(OutputError, match=f"{blocker} is not a directory"):
        write_atomic(blocker / "x.txt", "text")
    assert blocker.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"], "no temporary left behind"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc, where nothing can be created")
def test_a_place_nothing_can_be_created_is_a_user_error():
    """/proc refuses new files even to root: the OS's reason reaches the user."""
    from ratc.io import write_atomic
    from ratc.errors import OutputError

    with pytest.raises(OutputError, match="cannot write /proc/ratc-test/x.txt: No such file or directory"):
        write_atomic("/proc/ratc-test/x.txt", "text")
    with pytest.raises(OutputError, match="cannot write /proc/ratc-prog: No such file or directory"):
        write_program("/proc/ratc-prog", FILES)


def test_writing_to_a_device_fifo_or_symlink_keeps_it(tmp_path):
    """-o /dev/null writes into the device (renaming a file over it would replace it, as root);
    a FIFO gets the bytes; a symlink keeps pointing at the file it names, which gets the text."""
    import os
    import stat
    import threading

    from ratc.io import write_atomic

    write_atomic("/dev/null", "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(10)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old")
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
