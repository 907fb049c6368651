"""Pausing CPython's cyclic garbage collector while ratc builds large object graphs."""

from __future__ import annotations

import contextlib
import gc


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
