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


def _profile(tmp_path, **changes):
    """mt3000.toml with `key = value` lines replaced."""
    from ratc.platform.loader import PROFILE_DIR

    lines = []
    for line in (PROFILE_DIR / "mt3000.toml").read_text().splitlines():
        key = line.split("=")[0].strip()
        lines.append(f"{key} = {changes[key]}" if key in changes else line)
    path = tmp_path / "odd.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("key, value, message", [
    ("dsps", "1000000", r"\[cluster\]\.dsps: must be at most 4096, got 1000000"),
    ("vector_lanes", "65536", r"\[vliw\]\.vector_lanes: must be at most 1024"),
    ("barrier_latency", "10000000000", r"\[vliw\]\.barrier_latency: must be at most 1e\+06"),
    ("am_size", '"1TiB"', r"\[dsp\]\.am_size: must be at most"),
])
def test_platform_values_outside_the_schema_ranges_are_refused_on_load(tmp_path, key, value, message):
    from ratc.platform import load_platform
    from ratc.platform.loader import PlatformError

    with pytest.raises(PlatformError, match=message):
        load_platform(_profile(tmp_path, **{key: value}))


@pytest.mark.parametrize("changes, message", [
    ({"vector_registers": "5"}, r"vector_registers is 5, but a GEMM micro-tile needs vmac_rows \+ 2 = 6"),
    ({"quad_registers": "1"}, r"quad_registers is 1, but a GEMM micro-tile needs at least 2"),
])
def test_kernel_on_a_platform_without_registers_for_a_micro_tile_is_a_platform_error(tmp_path, capsys,
                                                                                    changes, message):
    # tiling.default_groups raised a bare ValueError (max() of nothing) for these
    import re

    assert main(["kernel", "gemm", "64", "64", "64", "--platform", _profile(tmp_path, **changes)]) == 1
    err = _error(capsys)
    assert re.search(message, err) and "odd.toml" in err


def test_sequence_lengths_above_the_limit_are_refused_before_tracing(capsys):
    assert main(["plan", "--preset", "tiny", "--clusters", "8", "--global-batch", "64",
                 "--seq-len", "1000000000000"]) == 1
    err = _error(capsys)
    assert "--seq-len: sequence length 1,000,000,000,000 exceeds the limit of 1,048,576" in err
    assert "$RATC_MAX_SEQ_LEN" in err


def test_a_model_file_whose_input_spec_asks_for_a_huge_sequence_is_refused_naming_the_file(tmp_path, capsys):
    from ratc.frontend.presets import example_model

    path = tmp_path / "long.py"
    path.write_text(example_model().read_text().replace('seq_len=config.get("seq_len", DEFAULT_SEQ_LEN)',
                                                             'seq_len=10**12'))
    assert '10**12' in path.read_text()
    assert main(["compile", str(path), "--emit", "graph"]) == 1
    err = _error(capsys)
    assert "long.py: input_spec: sequence length" in err and "$RATC_MAX_SEQ_LEN" in err


@pytest.mark.parametrize("command", [
    ["plan", "--preset", "tiny", "--global-batch", "64", "--clusters", "1000000000"],
    ["compile", "--preset", "tiny", "--clusters", "1000000000"],
    ["plan", "--preset", "tiny", "--global-batch", "64", "--min-clusters", "--max-clusters", "1000000000"],
])
def test_cluster_counts_above_the_limit_are_refused_before_any_planning(command, capsys):
    assert main(command) == 1
    err = _error(capsys)
    assert "exceeds the limit of 65,536 (set $RATC_MAX_CLUSTERS to raise it)" in err


def test_the_planner_api_refuses_cluster_counts_above_the_limit(monkeypatch):
    from ratc.planner.search import Planner

    monkeypatch.setenv("RATC_MAX_CLUSTERS", "16")
    with pytest.raises(RatcError, match=r"cluster count 32 exceeds the limit of 16"):
        Planner.plan(object.__new__(Planner), 32, 64)


def test_train_refuses_a_micro_batch_whose_activations_exceed_memory_naming_both(monkeypatch, capsys):
    from ratc.frontend.presets import example_model
    from ratc.vm.functional import session as session_mod

    monkeypatch.setattr(session_mod, "machine_bytes", lambda: 8 * 10**9)
    # tiny's parameters fit in 8 GB many times over; a million sequences' activations do not
    assert main(["train", str(example_model()), "--preset", "tiny", "--steps", "1",
                 "--micro-batch-size", "1000000"]) == 1
    err = _error(capsys)
    assert "global batch of 4000000 sequences (M=4 x b=1000000 x D=1)" in err
    assert "of saved activations" in err and "more than this machine's 8.00 GB" in err


def test_train_activation_estimate_grows_with_the_global_batch():
    from ratc.frontend.presets import example_model
    from ratc.vm.functional.session import TrainConfig, activation_bytes

    one = activation_bytes(TrainConfig(model=str(example_model()), M=1, b=1))
    assert one > 0
    assert activation_bytes(TrainConfig(model=str(example_model()), M=4, b=2, D=2)) == 16 * one


def test_every_limit_is_documented_with_its_default():
    from pathlib import Path

    from ratc.limits import ALL, _show

    doc = (Path(__file__).resolve().parent.parent / "docs" / "reliability.md").read_text()
    for limit in ALL:
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{limit.env}` |")), None)
        assert row is not None, limit.env
        default = _show(limit.default, limit.unit).replace(".00 ", " ")
        assert f"| {default} |" in row, (row, default)
