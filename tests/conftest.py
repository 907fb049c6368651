"""Shared test setup: put tests/ on the path and register the test dialect once."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import testdialect  # noqa: E402,F401  (registers the 'test' dialect)

import os  # noqa: E402
import tempfile  # noqa: E402

# Kernel timings are cached on disk (ratc.codegen.kernel_cache); tests use a fresh cache of
# their own instead of the user's ~/.cache/ratc, unless one is set explicitly.
os.environ.setdefault("RATC_CACHE_DIR", tempfile.mkdtemp(prefix="ratc-test-cache-"))
