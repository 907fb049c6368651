"""`ratc asm` and `ratc kernel`: canonical output, runs with reports, errors without tracebacks."""

from ratc.cli.main import main

BAD = ".kernel x\n.dsps 1\n.buffer am B f16 [64]\n{ vld v0, B[r1+8] }\n"


def test_kernel_gemm_writes_rasm_that_asm_runs_with_a_report(tmp_path, capsys):
    path = tmp_path / "g.rasm"
    assert main(["kernel", "gemm", "40", "70", "30", "-o", str(path)]) == 0
    assert main(["asm", str(path), "--run", "--random-inputs", "1"]) == 0
    report = capsys.readouterr().out
    for field in ("Cycles:", "IPC:", "MAC utilization:", "DDR bytes:", "Roofline:", "VMAC", "SBR"):
        assert field in report
    assert main(["asm", str(path), "-o", str(tmp_path / "again.rasm")]) == 0
    assert (tmp_path / "again.rasm").read_text() == path.read_text()


def test_kernel_runs_report_the_same_cycles_in_both_modes(capsys):
    main(["kernel", "gemm", "33", "65", "17", "--run", "--mode", "full", "--random-inputs", "3"])
    full = capsys.readouterr().out
    main(["kernel", "gemm", "33", "65", "17", "--run"])
    timing = capsys.readouterr().out
    assert [l for l in full.splitlines() if l.startswith("Cycles")] == \
           [l for l in timing.splitlines() if l.startswith("Cycles")]


def test_faults_and_bad_options_exit_1_with_one_message(tmp_path, capsys):
    path = tmp_path / "bad.rasm"
    path.write_text(BAD)
    assert main(["asm", str(path), "--run"]) == 1
    err = capsys.readouterr().err
    assert "bundle @0" in err and "outside buffer B" in err and "Traceback" not in err
    path.write_text(BAD.replace("}", ""))
    assert main(["asm", str(path)]) == 1
    assert f"{path}:4:19: error: unexpected end of input" in capsys.readouterr().err
    assert main(["kernel", "gemm", "8", "8", "8", "--tile", "kt=oops"]) == 1
    assert "expected NAME=INTEGER" in capsys.readouterr().err
