"""Reading inputs and writing outputs: atomic writes, and no output that is an input."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from ratc.atomic import write_file
from ratc.errors import OutputError, RatcError


def progress_shown() -> bool:
    """Whether progress bars show: only on a terminal (tqdm's rule for disable=None, asked
    before importing tqdm, which costs a command that shows none 30 ms)."""
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read a block at a time (checkpoint shards are large)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


# The files this command reads (resolved path, (device, inode)): an output may never be one.
_INPUTS: dict[str, tuple[int, int] | None] = {}


def note_input(path: str | Path | None) -> None:
    """Remember a file or directory the command reads, so that no output replaces it."""
    if path in (None, "-") or not os.path.exists(path):
        return
    st = os.stat(path)
    _INPUTS[os.path.realpath(path)] = (st.st_dev, st.st_ino)


def note_inputs(args) -> None:
    """Remember the inputs a parsed command line names (model file, HF config, IR or .rasm
    file, platform TOML, program directory, training program)."""
    _INPUTS.clear()
    for name in ("model", "hf_config", "file", "program", "platform", "outdir"):
        value = getattr(args, name, None)
        # (--platform is a profile's name or a file; compile's output is `output`, not `outdir`)
        if isinstance(value, (str, Path)) and (name != "platform" or os.path.isfile(value)):
            note_input(value)


def refuse_input(path: str | Path, flag: str | None = None) -> None:
    """Raise OutputError if writing `path` would replace an input of this command: the same
    file by name, through a link or by inode, or a directory that holds one."""
    real = os.path.realpath(path)
    try:
        st = os.stat(path)
        inode = (st.st_dev, st.st_ino)
    except OSError:
        inode = None
    for source, source_inode in _INPUTS.items():
        if real == source or (inode is not None and inode == source_inode) \
                or (os.path.isdir(path) and source.startswith(real.rstrip(os.sep) + os.sep)):
            what = "is" if real == source or inode == source_inode else "holds"
            raise OutputError(f"{flag or 'the output'} {path} {what} an input of this command ({source}); "
                              "choose another output")


def check_output(path: str | Path, flag: str | None = None) -> None:
    """Raise OutputError unless `path` names a file that can be written: not empty, not a
    directory, no file where a parent directory must be, not a file of a ratc program.
    Cheap, so callers with long work ahead check before it."""
    if not str(path):
        raise OutputError(f"{flag or 'the output'} needs a file name, got ''")
    refuse_input(path, flag)
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
    if path.exists() and not path.is_file():
        # a device (/dev/null), a FIFO or a socket: write into it; renaming over it would
        # replace it with a file (as root, even /dev/null)
        try:
            with open(path, "wb") as fh:
                fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))
        except OSError as exc:
            raise OutputError.refused(path, exc) from None
        return
    try:
        write_file(path, data)
    except OSError as exc:
        raise OutputError.refused(path, exc) from None


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
