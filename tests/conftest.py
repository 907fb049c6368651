"""Shared test setup: put tests/ on the path, register the test dialect once, a lazier GC, and a
time estimate beside the progress on a terminal."""

import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import testdialect  # noqa: E402,F401  (registers the 'test' dialect)

from ratc.gcpause import LAZY_THRESHOLDS  # noqa: E402

import os  # noqa: E402
import tempfile  # noqa: E402

# Kernel timings are cached on disk (ratc.codegen.kernel_cache); tests use a fresh cache of
# their own instead of the user's ~/.cache/ratc, unless one is set explicitly.
os.environ.setdefault("RATC_CACHE_DIR", tempfile.mkdtemp(prefix="ratc-test-cache-"))

# As the `ratc` command does (ratc.cli.main.run): the suite builds large long-lived IR and
# VM programs, which CPython's default thresholds re-scan for a fifth of its run time.
gc.set_threshold(*LAZY_THRESHOLDS)


import pytest  # noqa: E402
import torch  # noqa: E402

import suite_progress  # noqa: E402


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    suite_progress.install(config)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread (as `ratc train` and each `ratc launch` rank run): deterministic,
    and fast on a shared 2-core machine, where two threads' barriers wait on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def calibrated(tmp_path_factory):
    """Two quick calibrations of this machine, one after the other, through the command
    ([(profile path, seconds)]; ~20 s each: the suite's tests that need a measured host share them)."""
    import time

    from ratc.cli.main import main

    out = []
    for i in (1, 2):
        path = tmp_path_factory.mktemp("calibrate") / f"host{i}.toml"
        start = time.monotonic()
        assert main(["calibrate", "-o", str(path), "--quick", "--ranks", "2", "--threads", "1"]) == 0
        out.append((path, time.monotonic() - start))
    return out
