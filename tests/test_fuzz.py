"""Fuzz sample (hypothesis, derandomized): mutated inputs of every parser and loader end in
success or a RatcError naming the file or place, never another exception or a hang.

The targets are tests/fuzz_targets.py's; benchmarks/fuzz.py runs 10 000 cases of each, every
one in a forked child bounded in time and memory. Here a few run in process, each within a
10 s hypothesis deadline.
"""

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_targets

SAMPLE = settings(max_examples=60, derandomize=True, deadline=timedelta(seconds=10), database=None,
                  suppress_health_check=[HealthCheck.too_slow])
SEEDS = st.integers(0, 2 ** 32 - 1)


@pytest.fixture(scope="session")
def fuzz_env(tmp_path_factory):
    """The tiny compiled program (RATC_CACHE_DIR is the suite's own, see conftest) and its texts."""
    root = tmp_path_factory.mktemp("fuzz")
    fuzz_targets.compile_tiny_program(root / "tiny")
    return fuzz_targets.make_env(root / "tiny", root / "cases")


def _holds(target: str, seed: int, env) -> None:
    case = fuzz_targets.make_case(target, seed, env)
    try:
        fuzz_targets.run_case(case)
    except fuzz_targets.Failure as exc:
        pytest.fail(f"{case.what[:500]}\n{exc}\nreproduce: {fuzz_targets.reproducer(target, seed)}", pytrace=False)


# What each target's cases must do (a target added to fuzz_targets.TARGETS needs its line here).
HOLDS = {
    "ir": "edited IR text parses and verifies or fails with a located error",
    "platform": "an edited platform TOML loads or fails naming the profile",
    "manifest": "an edited program manifest loads or fails naming the program",
    "kernels-json": "an edited kernels.json reads or fails naming the file",
    "rasm": "edited .rasm assembles or fails with a located error",
    "hf-config": "an edited HF config passes its checks or fails naming the file",
    "cli": "odd CLI sizes and options end in a result or a one-line error",
    "program-dir": "an edited, rehashed program directory runs or fails without a traceback",
}


@pytest.mark.parametrize("target", sorted(HOLDS))
@SAMPLE
@given(seed=SEEDS)
def test_fuzzed_inputs_end_in_success_or_a_located_ratc_error(fuzz_env, target, seed):
    _holds(target, seed, fuzz_env)


def test_every_fuzz_target_has_a_sample_test():
    """A target added to fuzz_targets.TARGETS without a test here would run only in the benchmark."""
    assert set(fuzz_targets.TARGETS) == set(HOLDS)


def test_a_case_ending_in_an_unexpected_exception_is_a_failure():
    """The harness itself: a traceback, and a RatcError naming no place, are findings."""
    from ratc.errors import RatcError

    def boom():
        raise KeyError("x")

    def vague():
        raise RatcError("something is wrong")

    with pytest.raises(fuzz_targets.Failure, match="KeyError"):
        fuzz_targets.run_case(fuzz_targets.Case("boom", boom, ("f.ir",)))
    with pytest.raises(fuzz_targets.Failure, match="does not name f.ir"):
        fuzz_targets.run_case(fuzz_targets.Case("vague", vague, ("f.ir",)))
    assert fuzz_targets.run_case(fuzz_targets.Case("fine", lambda: None, ("f.ir",))) == "ok"


def test_a_seed_always_makes_the_same_case(fuzz_env):
    """(target, seed) is the reproducer the benchmark prints."""
    for target in fuzz_targets.TARGETS:
        assert fuzz_targets.make_case(target, 17, fuzz_env).what == fuzz_targets.make_case(target, 17, fuzz_env).what


def test_the_benchmark_stops_a_case_over_its_time_or_memory_limit(monkeypatch):
    """benchmarks/fuzz.py runs each case in a forked child bounded in time and address space."""
    import sys
    import time
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import fuzz

    cases = {"slow": lambda rng, env: fuzz_targets.Case("slow", lambda: time.sleep(30)),
             "hog": lambda rng, env: fuzz_targets.Case("hog", lambda: bytearray(3 << 30)),
             "fine": lambda rng, env: fuzz_targets.Case("fine", lambda: None)}
    monkeypatch.setattr(fuzz_targets, "TARGETS", {**fuzz_targets.TARGETS, **cases})
    start = time.monotonic()
    assert fuzz.run_bounded("slow", 0, None, 1.0, 2 << 30) == ("failure", "over the time limit (1 s)")
    assert time.monotonic() - start < 5
    assert fuzz.run_bounded("hog", 0, None, 10.0, 2 << 30) == ("failure", "MemoryError: over the memory limit")
    assert fuzz.run_bounded("fine", 0, None, 10.0, 2 << 30) == ("ok", "")
    sys.modules.pop("fuzz", None)
