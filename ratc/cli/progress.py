"""A status line on stderr for the long phases of a command, on terminals only."""

from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def phase(text: str, enabled: bool = True):
    """Show `text` while the block runs (cleared after it); yields a function that replaces it.

    Nothing is written when stderr is not a terminal (pipes, CI, tests), so logs and
    captured output stay exactly as without it, nor when not `enabled` (the block itself
    writes to stderr, e.g. IR dumps, which a status line would break into).
    """
    from ratc.io import progress_shown

    if not enabled or not progress_shown():
        yield lambda desc=None, refresh=True: None
        return
    from tqdm import tqdm

    bar = tqdm(total=None, desc=text, bar_format="{desc} ...", leave=False, disable=None,
               file=sys.stderr)
    try:
        yield bar.set_description_str
    finally:
        bar.close()
