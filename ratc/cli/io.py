"""Reading inputs and writing outputs atomically for the CLI."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ratc.errors import OutputError, RatcError


def read_input(path: str) -> tuple[str, str]:
    """Return (display name, text) of a file, or of stdin for '-'."""
    if path == "-":
        return "<stdin>", sys.stdin.read()
    from ratc.input_files import not_a_file

    p = Path(path)
    problem = not_a_file(path)
    if problem:
        raise RatcError(problem)
    try:
        return path, p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RatcError(f"{path}: not a UTF-8 text file") from None


def check_output(path: str | Path, flag: str | None = None) -> None:
    """Raise OutputError unless `path` names a file that can be written: not empty, not a
    directory, no file where a parent directory must be, not a file of a ratc program.
    Cheap, so callers with long work ahead check before it."""
    if not str(path):
        raise OutputError(f"{flag or 'the output'} needs a file name, got ''")
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory (give a file name)")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputError(f"cannot write {path}: {blocker} is not a directory")
    # A program directory's files are hash-checked: overwriting one breaks the program.
    from ratc.program import refuse_own_file
    refuse_own_file(path, flag or "the output")


def write_atomic(path: str | Path, data: str | bytes, flag: str | None = None) -> None:
    """Write a file via a temporary sibling and rename, so readers never see half of it.
    Failures raise OutputError (naming `flag`, the option that gave the path) and leave
    nothing behind."""
    check_output(path, flag)
    path = Path(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    if path.exists() and not path.is_file():
        # a device (/dev/null), a FIFO or a socket: write into it; renaming over it would
        # replace it with a file (as root, even /dev/null)
        try:
            with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
                fh.write(data)
        except OSError as exc:
            raise OutputError.refused(path, exc) from None
        return
    if path.is_symlink():
        path = path.resolve()      # replace what the link points to, and keep the link
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise OutputError.refused(path, exc) from None
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            fh.write(data)
        # mkstemp makes the file private (0600); give it the permissions open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError.refused(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def report_written(path: str | Path, what: str) -> None:
    """Say on stderr (stdout may carry data) what a flag wrote, as compile and diagram do:
    'wrote PATH: WHAT'."""
    print(f"wrote {path}: {what}", file=sys.stderr)


def to_file(path: str | None) -> bool:
    """Whether an output path names a file (None and '-' are stdout)."""
    return path not in (None, "-")


def write_output(path: str | None, text: str) -> None:
    """Write text to a file atomically, or to stdout when path is None or '-'."""
    if path in (None, "-"):
        sys.stdout.write(text)
    else:
        write_atomic(path, text, "-o")
