"""Program directories: manifest hashes, atomic replacement and tamper detection."""

import hashlib
import json

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
