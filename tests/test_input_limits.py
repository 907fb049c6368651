"""Sizes are checked before the work: each documented limit refuses with its name and override."""

import pytest

from ratc.cli.main import main
from ratc.errors import RatcError


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_kernel_full_mode_refuses_a_gemm_whose_buffers_exceed_the_memory_limit_before_generating(capsys):
    # 100000^3 allocated 18.6 GiB and died; now refused from the shape alone, at once
    assert main(["kernel", "gemm", "100000", "100000", "100000", "--run", "--mode", "full"]) == 1
    err = _error(capsys)
    assert "60.00 GB exceeds the limit of 4.00 GB" in err and "$RATC_MAX_KERNEL_BYTES" in err
    assert "--mode timing" in err


def test_kernel_full_mode_refuses_a_run_above_the_step_limit(monkeypatch, capsys):
    monkeypatch.setenv("RATC_MAX_KERNEL_STEPS", "1000")
    assert main(["kernel", "gemm", "64", "64", "64", "--run", "--mode", "full"]) == 1
    err = _error(capsys)
    assert "bundles to execute (all DSPs)" in err and "$RATC_MAX_KERNEL_STEPS" in err
    # the timing mode executes nothing and stays available
    assert main(["kernel", "gemm", "64", "64", "64", "--run"]) == 0


def test_asm_full_run_checks_the_limits_before_allocating_random_inputs(tmp_path, monkeypatch, capsys):
    path = tmp_path / "g.rasm"
    assert main(["kernel", "gemm", "40", "70", "30", "-o", str(path)]) == 0
    monkeypatch.setenv("RATC_MAX_KERNEL_BYTES", "1KB")
    assert main(["asm", str(path), "--run", "--random-inputs", "1"]) == 1
    assert "$RATC_MAX_KERNEL_BYTES" in _error(capsys)


def test_a_limit_override_of_zero_or_garbage_is_refused(monkeypatch):
    from ratc.limits import MAX_KERNEL_STEPS

    monkeypatch.setenv("RATC_MAX_KERNEL_STEPS", "0")
    with pytest.raises(RatcError, match=r"\$RATC_MAX_KERNEL_STEPS must be positive"):
        MAX_KERNEL_STEPS.value()
    monkeypatch.setenv("RATC_MAX_KERNEL_STEPS", "1e9")
    with pytest.raises(RatcError, match=r"\$RATC_MAX_KERNEL_STEPS must be a whole number"):
        MAX_KERNEL_STEPS.value()
