"""What an input path that is not a readable regular file is, for the error that refuses it."""

from __future__ import annotations

import errno
import json
import os
import stat


def not_a_file(path: str) -> str | None:
    """None for a regular file (or a link to one); else why `path` cannot be read as a file:
    missing, a directory, a FIFO, a device, a socket, a dangling link or a symlink loop."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"{path}: a symbolic link to {os.readlink(path)!r}, which does not exist"
        return f"{path}: no such file"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{path}: a symbolic link loop"
        return f"{path}: cannot read ({exc.strerror})"
    except ValueError:          # an embedded NUL
        return f"{path!r}: not a valid file name"
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"{path}: is {kind}, not a file"


def json_value(text: str):
    """json.loads, where JSON nested past the interpreter's recursion limit is a ValueError
    like any other malformed text (json raises RecursionError for it)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("arrays or objects nested too deeply") from None
