"""CPython's cyclic garbage collector while ratc builds large object graphs: paused, or lazier."""

from __future__ import annotations

import contextlib
import gc


# Collect the young generation every 200,000 allocations instead of 700 (as mypy does):
# for a process that builds millions of long-lived objects, the `ratc` command and the tests.
LAZY_THRESHOLDS = (200_000, 30, 30)


_FREEZE_SURVIVORS = [False]


def freeze_after_pauses() -> None:
    """From now on, what a pause leaves alive goes to the collector's permanent generation.

    The collector counts allocations while paused, so its first collection after a pause
    scans everything the pause made and kept: the whole parsed program, the VM's tasks, the
    timeline (0.2 s each, 6 % of a `ratc run`), to find them alive and move them on. In a
    short-lived process (the `ratc` command, which exits without freeing them) they live to
    the end anyway, so the scan is skipped (gc.freeze). The cost: cyclic garbage a pause
    made is kept to the end too -- the few ops a pass erases. Tests, which build thousands
    of modules in one process, keep the default.
    """
    _FREEZE_SURVIVORS[0] = True


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
            if _FREEZE_SURVIVORS[0]:
                gc.freeze()
            gc.enable()
