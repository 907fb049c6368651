"""CPython's cyclic garbage collector while ratc builds large object graphs: paused, or lazier."""

from __future__ import annotations

import contextlib
import gc


# Collect the young generation every 200,000 allocations instead of 700 (as mypy does):
# for a process that builds millions of long-lived objects, the `ratc` command and the tests.
LAZY_THRESHOLDS = (200_000, 30, 30)


@contextlib.contextmanager
def gc_paused():
    """No cyclic collection inside (a nested pause leaves it to the outermost).

    Parsing, the passes, VM translation and simulation make hundreds of thousands of small
    long-lived objects and little cyclic garbage: each collection re-scans all of them and
    frees next to nothing, which cost a sixth to a third of those phases. Whatever cyclic
    garbage they do make (erased ops) is collected after the pause.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
