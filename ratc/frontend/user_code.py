"""Running a model file's code: its prints kept off ratc's stdout, its working directory undone."""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def user_code():
    """Around code of a model file (import, input_spec, build_model, its forward while traced).

    What it prints goes to stderr: ratc's stdout may be an output (`--emit=graph`, `--json`).
    A directory it changes into is left again afterwards, so that paths ratc resolves later
    (a default output directory, a platform file) mean what they meant on the command line.
    """
    try:
        cwd = os.getcwd()
    except OSError:                 # the working directory was removed: nothing to restore
        cwd = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if cwd is not None:
            with contextlib.suppress(OSError):
                if os.getcwd() != cwd:
                    os.chdir(cwd)
