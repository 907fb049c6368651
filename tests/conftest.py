"""Shared test setup: put tests/ on the path and register the test dialect once."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import testdialect  # noqa: E402,F401  (registers the 'test' dialect)
