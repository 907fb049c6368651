"""`ratc opt` end to end: instrumentation, dumps, stdin, and pass-by-pass reproducibility."""

import io
import re
import sys
from pathlib import Path

from ratc.cli.main import main

GOLDEN = Path(__file__).parent / "golden" / "ir"
PIPELINE = "cse,verify{symbols=true},dce"


def strip_comments(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("//"))


def test_one_go_equals_pass_by_pass_on_dumped_files(tmp_path, capsys):
    src = GOLDEN / "cse_dce.ir"
    final = tmp_path / "final.ir"
    dumps = tmp_path / "dumps"
    assert main(["opt", str(src), "-p", PIPELINE, "-o", str(final), "--dump-dir", str(dumps)]) == 0
    files = sorted(dumps.glob("*_after_*.ir"))
    assert [f.name for f in files] == ["01_after_cse.ir", "02_after_verify.ir", "03_after_dce.ir"]
    previous = src
    for f, step in zip(files, PIPELINE.split(",")):
        out = tmp_path / f"step_{f.name}"
        assert main(["opt", str(previous), "-p", step, "-o", str(out)]) == 0
        assert out.read_text() == strip_comments(f.read_text())
        previous = out
    assert previous.read_text() == final.read_text()


def test_dump_header_is_greppable_and_reproduces(tmp_path):
    src = GOLDEN / "cse_dce.ir"
    dumps = tmp_path / "d"
    assert main(["opt", str(src), "-p", "cse,dce", "--dump-dir", str(dumps), "-o", str(tmp_path / "o.ir")]) == 0
    first, second = (dumps / "02_after_dce.ir").read_text().splitlines()[:2]
    assert first == "// -----// IR Dump After dce (dce) //----- //"
    assert second == f"// reproduce: ratc opt {src} -p 'cse,dce'"
    # The input is dumped too, so the whole chain can be replayed from the directory.
    assert (dumps / "00_input.ir").exists()
    # A second run into the same directory leaves only its own dumps.
    (dumps / "notes.txt").write_text("mine")
    assert main(["opt", str(src), "-p", "dce", "--dump-dir", str(dumps), "-o", str(tmp_path / "o.ir")]) == 0
    assert sorted(p.name for p in dumps.iterdir()) == ["00_input.ir", "01_after_dce.ir", "notes.txt"]


def test_dumps_of_stdin_replay_from_the_dumped_input(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO((GOLDEN / "cse_dce.ir").read_text()))
    dumps = tmp_path / "d"
    assert main(["opt", "-", "-p", "cse", "--dump-dir", str(dumps), "-o", str(tmp_path / "o.ir")]) == 0
    assert (dumps / "01_after_cse.ir").read_text().splitlines()[1] == \
        f"// reproduce: ratc opt {dumps / '00_input.ir'} -p 'cse'"


def test_a_directory_is_not_an_input(tmp_path, capsys):
    assert main(["opt", str(tmp_path), "-p", "cse"]) == 1
    assert f"{tmp_path}: is a directory, not a file" in capsys.readouterr().err


def test_print_ir_flags(capsys):
    src = str(GOLDEN / "cse_dce.ir")
    assert main(["opt", src, "-p", "cse,verify,dce", "--print-ir-after-change", "-o", "/dev/null"]) == 0
    err = capsys.readouterr().err
    # verify never changes the IR, so only cse and dce are printed.
    assert re.findall(r"IR Dump After (\S+)", err) == ["cse", "dce"]

    assert main(["opt", src, "-p", "cse,verify", "--print-ir-after-all", "--print-ir-before=verify",
                 "-o", "/dev/null"]) == 0
    err = capsys.readouterr().err
    assert re.findall(r"IR Dump (Before|After) (\S+)", err) == [("After", "cse"), ("Before", "verify"),
                                                                 ("After", "verify")]
    assert "(verify{symbols=true})" in err


def test_time_passes_table(capsys):
    assert main(["opt", str(GOLDEN / "cse_dce.ir"), "-p", "cse,dce", "--time-passes", "-o", "/dev/null"]) == 0
    err = capsys.readouterr().err
    assert "Pass execution timing report" in err
    assert re.search(r"\d+\.\d+ s\s+\d+\.\d%\s+cse", err) and re.search(r"Total", err)


def test_progress_hook_sees_each_pass_before_it_runs():
    from ratc.ir import parse_module
    from ratc.passes import PassManager, parse_pipeline
    from ratc.passes.manager import Instrumentation

    seen = []
    module = parse_module((GOLDEN / "cse_dce.ir").read_text())
    ops = lambda: len(list(module.walk()))    # noqa: E731
    before = ops()
    inst = Instrumentation(progress=lambda i, n, p: seen.append((i, n, p.name, ops())))
    PassManager(parse_pipeline("cse,dce"), instrumentation=inst).run(module)
    # called before each pass: cse merges ops after the first call, dce erases after the second
    assert seen == [(1, 2, "cse", before), (2, 2, "dce", seen[1][3])]
    assert before > seen[1][3] > ops()


def test_stdin_and_stdout(monkeypatch, capsys):
    text = (GOLDEN / "dce_chain.ir").read_text()
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["opt", "-", "-p", "dce"]) == 0
    assert capsys.readouterr().out == (GOLDEN / "dce_chain.ir.expected").read_text()


def test_print_after_failure_shows_the_ir(tmp_path, capsys):
    # A dangling symbol passes with --no-verify until the explicit verify pass fails.
    bad = tmp_path / "bad.ir"
    bad.write_text("module {\n  test.call {callee = @ghost}\n}\n")
    assert main(["opt", str(bad), "-p", "verify", "--no-verify", "--print-ir-after-failure"]) == 1
    err = capsys.readouterr().err
    assert "IR Dump After Failed verify" in err
    assert "pass failed 'verify{symbols=true}'" in err
    assert "undefined symbol '@ghost'" in err


def test_no_verify_skips_the_verifier(tmp_path, capsys):
    bad = tmp_path / "bad.ir"
    bad.write_text("module {\n  test.call {callee = @ghost}\n}\n")
    assert main(["opt", str(bad), "-p", "dce", "--no-verify"]) == 0
    assert main(["opt", str(bad), "-p", "dce"]) == 1


def test_passes_lists_every_pass(capsys):
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    for name in ("cse", "dce", "verify"):
        assert re.search(rf"^{name}  -  \S", out, re.M)
    assert "symbols=bool (default true)" in out


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.startswith("ratc ")


def test_print_ir_names_must_be_passes(capsys):
    """--print-ir-before/after with a name that is no pass is a usage error, not silence."""
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["opt", str(GOLDEN / "cse_dce.ir"), "-p", "cse", "--print-ir-after", "cse,csee"])
    assert exc.value.code == 1 and "unknown pass 'csee' (passes: " in capsys.readouterr().err
