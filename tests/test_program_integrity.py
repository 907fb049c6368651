"""A program directory whose manifest was regenerated after an edit is still refused when
its content is not what ratc writes: one loader (ratc.program_check) for run, report and train."""

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from ratc.cli.main import main
from ratc.program import ProgramError, load_program
from ratc.program_check import MAX_CLUSTERS, MAX_TASK_SECONDS, open_program

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "llama.py")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """tiny compiled for 4 clusters (kernel-vm: it has kernels), written once per module."""
    out = tmp_path_factory.mktemp("integrity") / "prog"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--clusters", "4", "--global-batch", "8",
                 "--no-run", "-o", str(out)]) == 0
    return out


def _rehash(copy: Path) -> None:
    """Regenerate the manifest's hashes, as a hostile or careless edit would."""
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"] = {rel: hashlib.sha256((copy / rel).read_bytes()).hexdigest() for rel in manifest["files"]}
    (copy / "manifest.json").write_text(json.dumps(manifest))


def _edited(program: Path, tmp_path: Path, name: str, edit) -> Path:
    """A copy of the program with one file edited and the manifest regenerated."""
    copy = tmp_path / "edited"
    shutil.copytree(program, copy)
    path = copy / name
    text = path.read_text()
    new = edit(text)
    assert new != text, "the edit must change the file"
    path.write_text(new)
    _rehash(copy)
    return copy


def _refused(copy: Path, capsys, *commands) -> str:
    """Each command refuses the program with one message, no traceback; that message."""
    errs = []
    for argv in commands or (["run", str(copy)],):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") in (1, 3), err    # (a located error adds its line and caret)
        errs.append(err)
    assert len(set(errs)) == 1, errs
    return errs[0]


def _rasm(program: Path, name: str) -> str:
    return (program / "kernels" / f"{name}.rasm").read_text()


def test_the_compiled_program_passes_every_check(program):
    checked = open_program(program)
    assert checked.profile.name == "tiny" and checked.kernel_table["kernels"]
    assert {op.name for op in checked.module.body.ops} >= {"life.plan", "life.kernel", "life.pipeline"}


def test_run_and_report_refuse_a_truncated_rasm_at_its_line(program, tmp_path, capsys):
    name = "kernels/gemm_64x32x64_f16.rasm"
    copy = _edited(program, tmp_path, name, lambda t: t[: len(t) // 2])
    err = _refused(copy, capsys, ["run", str(copy)], ["report", str(copy)])
    assert re.match(rf"{re.escape(str(copy / name))}:\d+:\d+: error: ", err), err


def test_a_rasm_that_assembles_but_takes_other_cycles_is_refused(program, tmp_path, capsys):
    other = _rasm(program, "gemm_64x64x32_f16")         # a valid kernel, of another shape
    copy = _edited(program, tmp_path, "kernels/gemm_64x32x64_f16.rasm", lambda t: other)
    err = _refused(copy, capsys)
    assert "gemm_64x32x64_f16.rasm: runs for 1563 cycles, but kernels.json and program.ir say 2078" in err


def test_edited_kernel_cycles_are_refused_where_they_disagree(program, tmp_path, capsys):
    # kernels.json alone: it must be what program.ir's kernels say
    table = json.loads((program / "kernels.json").read_text())
    i = next(i for i, e in enumerate(table["kernels"]) if e["kernel"] == "gemm_64x32x64_f16")

    def cycles(t, value=10 ** 9):
        data = json.loads(t)
        data["kernels"][i]["cycles"] = value
        data["kernels"][i]["seconds"] = value / data["clock_hz"]
        return json.dumps(data)

    copy = _edited(program, tmp_path, "kernels.json", cycles)
    assert f"kernels.json: kernels[{i}].cycles is 1000000000, but program.ir says 2078" in _refused(copy, capsys)
    # program.ir's life.kernel too: its tasks' cycles are then not its kernels'
    shutil.rmtree(copy)
    copy = _edited(program, tmp_path, "program.ir",
                   lambda t: t.replace("life.kernel @gemm_64x32x64_f16 {cycles = 2078,",
                                       "life.kernel @gemm_64x32x64_f16 {cycles = 1000000000,"))
    (copy / "kernels.json").write_text(cycles((copy / "kernels.json").read_text()))
    _rehash(copy)
    err = _refused(copy, capsys)
    assert "program.ir:" in err and "cycles = " in err and "but its kernel calls and other work take" in err


def test_a_step_of_1e17_seconds_is_refused_with_the_field_named(program, tmp_path, capsys):
    # a task's duration edited with its cycles (consistently at the clock), and D
    copy = _edited(program, tmp_path, "program.ir", lambda t: re.sub(r"dur = [0-9.e+-]+", "dur = 1.4e17", t, count=1))
    err = _refused(copy, capsys)
    assert "program.ir:" in err and f"dur = 1.4e+17 s is out of range (0..{MAX_TASK_SECONDS:g} s)" in err
    shutil.rmtree(copy)
    copy = _edited(program, tmp_path, "program.ir", lambda t: re.sub(r"(life.plan @plan \{A = \d+, )D = \d+",
                                                                    r"\1D = 1000000000000", t))
    err = _refused(copy, capsys)
    assert f"life.plan D = 1000000000000 is out of range (1..{MAX_CLUSTERS})" in err


def test_a_plan_that_is_not_meta_config_is_refused(program, tmp_path, capsys):
    def other_config(t):
        m = json.loads(t)
        m["meta"]["config"] = m["meta"]["config"].replace("D=4", "D=2")
        return json.dumps(m)

    copy = _edited(program, tmp_path, "manifest.json", other_config)
    err = _refused(copy, capsys)
    assert "manifest.json: meta.config" in err and "has D=2, but the life.plan of program.ir has D=4" in err


def test_another_models_model_ir_is_refused(program, tmp_path, capsys, monkeypatch):
    # a model of the same name and sequence length, half as wide
    (tmp_path / "llama_base.py").write_text(Path(EXAMPLE).read_text())
    (tmp_path / "narrow.py").write_text(
        "from llama_base import build_model, input_spec  # noqa\n"
        "PRESETS = {'tiny': dict(layers=4, hidden=64, heads=4, kv_heads=2, ffn=172, vocab=512, seq_len=64)}\n")
    monkeypatch.delitem(sys.modules, "llama_base", raising=False)
    other = tmp_path / "narrow.ir"
    assert main(["compile", str(tmp_path / "narrow.py"), "--emit=graph", "-o", str(other)]) == 0
    sys.modules.pop("llama_base", None)
    capsys.readouterr()
    copy = _edited(program, tmp_path, "model.ir", lambda t: other.read_text())
    err = _refused(copy, capsys, ["run", str(copy)], ["report", str(copy)])
    assert "model.ir: layer 'layers[0:4]' (8192 input bytes per sequence)" in err and "model.ir is another model's" in err
    # ... and one of another sequence length
    shutil.rmtree(copy)
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--seq-len", "32", "--emit=graph", "-o", str(other)]) == 0
    capsys.readouterr()
    copy = _edited(program, tmp_path, "model.ir", lambda t: other.read_text())
    assert "model 'tiny' at sequence length 32, but the plan is for 'tiny' at 64" in _refused(copy, capsys)


@pytest.mark.parametrize("field, value, message", [
    ("mac_utilization", 1.5, "kernels[0].mac_utilization: 1.5 is not in [0, 1]"),
    ("cycles", 0, "kernels[0].cycles: 0 is not an integer in 1.."),
    ("cycles", 2.5, "kernels[0].cycles: 2.5 is not an integer in 1.."),
    ("cycles", 2 ** 60, "kernels[0].cycles: 1152921504606846976 is not an integer in 1.."),
    ("seconds", float("nan"), "kernels[0].seconds: nan is not in (0,"),
    ("calls_per_step", {"0": -1}, "kernels[0].calls_per_step['0']: -1 is not an integer in 0.."),
    ("calls_per_step", {"0": 1.5}, "kernels[0].calls_per_step['0']: 1.5 is not an integer in 0.."),
])
def test_report_and_run_refuse_a_kernels_json_out_of_its_schema_alike(program, tmp_path, capsys, field, value,
                                                                       message):
    def edit(t):
        data = json.loads(t)
        data["kernels"][0][field] = value
        return json.dumps(data)

    copy = _edited(program, tmp_path, "kernels.json", edit)
    err = _refused(copy, capsys, ["run", str(copy)], ["report", str(copy)])
    assert f"kernels.json: malformed kernel table: {message}" in err


def test_a_rasm_no_kernel_calls_is_refused(program, tmp_path, capsys):
    copy = tmp_path / "extra"
    shutil.copytree(program, copy)
    (copy / "kernels" / "gemm_1x1x1_f16.rasm").write_text(_rasm(program, "gemm_64x32x64_f16"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["kernels/gemm_1x1x1_f16.rasm"] = ""
    (copy / "manifest.json").write_text(json.dumps(manifest))
    _rehash(copy)
    assert "gemm_1x1x1_f16.rasm: no kernel of kernels.json is called so" in _refused(copy, capsys)


def _listing(program: Path, tmp_path: Path, rel: str, make) -> Path:
    """A copy of the program with `rel` made by make(path) and listed in a regenerated manifest."""
    copy = tmp_path / "listed"
    shutil.copytree(program, copy)
    make(copy / rel)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"][rel] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_a_symlink_listed_in_the_manifest_is_refused_not_followed(program, tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text("not the program's\n")
    copy = _listing(program, tmp_path, "secret.txt", lambda p: p.symlink_to(secret))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["secret.txt"] = hashlib.sha256(secret.read_bytes()).hexdigest()    # as if regenerated
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ProgramError, match=r"secret.txt: is a symbolic link; a program directory holds regular"):
        load_program(copy)
    assert "is a symbolic link" in _refused(copy, capsys, ["run", str(copy)], ["report", str(copy)])


def test_a_symlinked_folder_inside_the_program_is_refused(program, tmp_path):
    copy = tmp_path / "linked"
    shutil.copytree(program, copy)
    shutil.move(copy / "kernels", tmp_path / "kernels-elsewhere")
    (copy / "kernels").symlink_to(tmp_path / "kernels-elsewhere")
    with pytest.raises(ProgramError, match=r"linked/kernels: is a symbolic link"):
        load_program(copy)


def test_a_symlinked_manifest_is_refused(program, tmp_path):
    copy = tmp_path / "linked"
    shutil.copytree(program, copy)
    shutil.move(copy / "manifest.json", tmp_path / "manifest.json")
    (copy / "manifest.json").symlink_to(tmp_path / "manifest.json")
    with pytest.raises(ProgramError, match=r"manifest.json: is a symbolic link"):
        load_program(copy)


def test_a_fifo_or_directory_listed_in_the_manifest_is_refused_without_blocking(program, tmp_path):
    copy = _listing(program, tmp_path, "pipe", lambda p: os.mkfifo(p))
    with pytest.raises(ProgramError, match=r"pipe: is not a regular file"):
        load_program(copy)          # (opening a FIFO to read it would wait for a writer)
    shutil.rmtree(copy)
    copy = _listing(program, tmp_path, "folder", lambda p: p.mkdir())
    with pytest.raises(ProgramError, match=r"folder: is a directory"):
        load_program(copy)


def test_a_program_directory_reached_through_a_symlink_is_read(program, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(program)        # the directory itself may be a link (`-o` naming one keeps it)
    assert open_program(link).profile.name == "tiny"


def test_train_reads_a_program_directory_through_the_same_loader(program, tmp_path, capsys):
    assert main(["train", EXAMPLE, "--preset", "tiny", "--steps", "1", "--no-reference", "--program",
                 str(program)]) == 0
    assert "P=1 D=4 Z=2" in capsys.readouterr().out
    copy = _edited(program, tmp_path, "program.ir", lambda t: re.sub(r"dur = [0-9.e+-]+", "dur = 1.4e17", t, count=1))
    err = _refused(copy, capsys, ["run", str(copy)],
                   ["train", EXAMPLE, "--preset", "tiny", "--steps", "1", "--program", str(copy)])
    assert "dur = 1.4e+17 s is out of range" in err


def test_train_checks_a_single_program_file_for_ranges_too(tmp_path, capsys):
    prog = tmp_path / "step.ir"
    assert main(["train", EXAMPLE, "--preset", "tiny", "--steps", "1", "--no-reference",
                 "--emit-program", str(prog)]) == 0
    prog.write_text(re.sub(r"dur = [0-9.e+-]+", "dur = 1.4e17", prog.read_text(), count=1))
    capsys.readouterr()
    assert main(["train", EXAMPLE, "--preset", "tiny", "--steps", "1", "--program", str(prog)]) == 1
    err = capsys.readouterr().err
    assert f"{prog}:" in err and "dur = 1.4e+17 s is out of range" in err
