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
    from ratc.codegen.gemm import generate_gemm
    from ratc.platform import load_platform

    kernel = generate_gemm(load_platform("mt3000"), 40, 70, 30)
    assert int(_field(report, "Cycles")) == kernel.cycles      # the file runs as the kernel it was written from
    # a .rasm file does not say which MACs are padding: the report says it counts them all
    assert _field(report, "MACs (useful)") == _field(report, "MACs (executed)") == str(kernel.stats().executed_macs)
    assert "(as executed: a .rasm file does not mark padding)" in report
    # and its compulsory DDR traffic is its declared DDR arrays, A[40x30], B[30x70], C[40x70] in f16,
    # the kernel's own figure here (a GEMM has no scratch arrays)
    assert "compulsory 12.20 KB" in report and kernel.min_ddr_bytes == 2 * (40 * 30 + 30 * 70 + 40 * 70)
    assert main(["asm", str(path), "-o", str(tmp_path / "again.rasm")]) == 0
    assert (tmp_path / "again.rasm").read_text() == path.read_text()


def _field(report: str, name: str) -> str:
    lines = [line for line in report.splitlines() if line.startswith(name + ":")]
    assert len(lines) == 1, report
    return lines[0].split(":", 1)[1].split()[0]


def test_kernel_runs_report_the_same_cycles_in_both_modes(capsys):
    from ratc.codegen.gemm import generate_gemm
    from ratc.platform import load_platform

    assert main(["kernel", "gemm", "33", "65", "17", "--run", "--mode", "full", "--random-inputs", "3"]) == 0
    full = capsys.readouterr().out
    assert main(["kernel", "gemm", "33", "65", "17", "--run"]) == 0
    timing = capsys.readouterr().out
    kernel = generate_gemm(load_platform("mt3000"), 33, 65, 17)
    assert int(_field(full, "Cycles")) == int(_field(timing, "Cycles")) == kernel.cycles
    assert int(_field(full, "MACs (useful)")) == 33 * 65 * 17 == kernel.macs
    assert "does not mark padding" not in full


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


def test_tile_options_are_checked_against_the_kernel(capsys):
    """A GEMM option on an attention kernel, and a 0 for a tile size, are refused by name."""
    for argv, message in [
        (["attention-backward", "2", "128", "64", "--tile", "md=32"], "--tile: unknown option 'md' (attn_bwd kernels take br, bc)"),
        (["gemm", "40", "70", "30", "--tile", "br=4"], "--tile: unknown option 'br' (gemm kernels take gm, gn, md"),
        (["attention-backward", "2", "128", "64", "--tile", "br=0"], "br=0 must be a positive integer"),
        (["attention-backward", "2", "128", "64", "--tile", "bc=0"], "bc=0 must be a positive integer"),
        (["gemm", "4", "4", "4", "--kv-heads", "2"], "--kv-heads applies to attention kernels"),
        (["gemm", "4", "4", "4", "--random-inputs", "1"], "--random-inputs fills the inputs of a run"),
    ]:
        assert main(["kernel", *argv]) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_input_and_save_files_are_checked_and_saves_are_atomic(tmp_path, capsys):
    """--input takes numeric .npy arrays only (never unpickles), --save names DDR buffers and
    needs the full mode, all checked before the run; the saved array is the VM's result."""
    import numpy as np

    kernel = tmp_path / "g.rasm"
    assert main(["kernel", "gemm", "40", "70", "30", "-o", str(kernel)]) == 0
    a, b = np.random.default_rng(0).standard_normal((40, 30)), np.random.default_rng(1).standard_normal((30, 70))
    np.save(tmp_path / "A.npy", a)
    np.save(tmp_path / "B.npy", b)
    np.save(tmp_path / "obj.npy", np.array([{"x": 1}], dtype=object))
    (tmp_path / "text.npy").write_text("not an array")
    run = ["asm", str(kernel), "--run", "--input", f"A={tmp_path / 'A.npy'}", "--input", f"B={tmp_path / 'B.npy'}"]
    for extra, message in [
        (["--input", f"A={tmp_path / 'obj.npy'}"], "is not a .npy array file"),
        (["--input", f"A={tmp_path / 'text.npy'}"], "is not a .npy array file"),
        (["--input", f"A={tmp_path / 'none.npy'}"], "none.npy: no such file"),
        (["--save", f"C={tmp_path / 'c.npy'}", "--save", f"Z={tmp_path / 'z.npy'}"], "the kernel has no DDR buffer 'Z'"),
        (["--save", f"C={tmp_path / 'c.npy'}", "--mode", "timing"], "needs --mode full"),
        (["--random-inputs", "-1"], "must be a non-negative seed"),
    ]:
        assert main(run + extra) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
        assert not (tmp_path / "c.npy").exists(), "nothing is written when the command fails"
    assert main(run + ["--save", f"C={tmp_path / 'c'}"]) == 0
    c = np.load(tmp_path / "c.npy")           # numpy's naming: .npy appended
    assert np.allclose(c, a.astype(np.float16).astype(np.float32) @ b.astype(np.float16).astype(np.float32),
                       rtol=2e-2, atol=2e-2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
