"""Outputs that appear whole or not at all: a file written beside and renamed over its target,
and a directory replaced whole, recoverable after its writer is killed at any instant.

A directory writer builds the new directory as a sibling `.NAME.ratc-tmp-XXXXXXXX`, holding an
exclusive `flock` on it while it lives, so anyone can tell a dead writer's leftovers from
a live writer's work in progress. The swap runs under an exclusive `flock` on the parent
directory: on Linux it is one `renameat2(RENAME_EXCHANGE)`, so the target holds the old
directory or the new one at every instant; elsewhere it is two renames, the old directory
moving to `.NAME.ratc-old-XXXXXXXX` first. `recover(target)` (which every swap runs first)
finishes or rolls back a swap whose writer died between the two renames and removes the
temporaries of dead writers; it never touches a name without ratc's tags.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

TMP_TAG = ".ratc-tmp-"
OLD_TAG = ".ratc-old-"
LOCK_TIMEOUT_S = 60.0       # a swap holds the parent's lock for milliseconds


def write_file(path: Path, data: str | bytes) -> None:
    """Write a regular file via a temporary sibling and rename (a symlink is followed and kept);
    OSError leaves nothing behind."""
    if path.is_symlink():
        path = path.resolve()      # replace what the link points to, and keep the link
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))   # UTF-8 whatever the locale
        os.chmod(tmp, 0o666 & ~_umask())     # mkstemp makes it private (0600); as open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


class SwapError(OSError):
    """The parent directory stayed locked past LOCK_TIMEOUT_S."""


def _open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@contextmanager
def parent_lock(parent: Path):
    """Hold an exclusive flock on a directory (the swap's critical section)."""
    fd = _open_dir(parent)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while not _try_lock(fd):
            if time.monotonic() > deadline:
                raise SwapError(errno.ETIMEDOUT, f"{parent} stayed locked by another ratc process "
                                                 f"for {LOCK_TIMEOUT_S:.0f} s")
            time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def _tagged(target: Path, tag: str) -> list[Path]:
    prefix = f".{target.name}{tag}"
    try:
        return sorted(p for p in target.parent.iterdir() if p.name.startswith(prefix))
    except FileNotFoundError:
        return []


def _dead(path: Path) -> bool:
    """Whether no live writer holds the lock on a staging directory."""
    try:
        fd = _open_dir(path)
    except OSError:
        return not path.is_symlink() and path.exists()   # (a file with our tag: a dead writer's too)
    try:
        return _try_lock(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _suffix(path: Path, target: Path, tag: str) -> str:
    return path.name[len(f".{target.name}{tag}"):]


def _recover_locked(target: Path) -> str | None:
    """recover() with the parent's lock held."""
    olds = _tagged(target, OLD_TAG)       # only a swapper holding the lock makes these: all dead
    tmps = {_suffix(p, target, TMP_TAG): p for p in _tagged(target, TMP_TAG) if _dead(p)}
    done = None
    if olds and not os.path.lexists(target):
        old = olds.pop()
        new = tmps.pop(_suffix(old, target, OLD_TAG), None)
        if new is not None:
            # The old directory moves aside only once the new one is complete: finish the swap.
            os.replace(new, target)
            olds.append(old)
            done = "finished"
        else:
            os.replace(old, target)
            done = "rolled back"
    for path in [*olds, *tmps.values()]:
        _remove(path)
    return done


def recover(target: str | Path) -> str | None:
    """Finish or roll back a swap into `target` interrupted by its writer's death, and remove
    dead writers' temporaries; returns 'finished', 'rolled back' or None."""
    target = Path(target)
    if not target.parent.is_dir():
        return None
    with parent_lock(target.parent):
        return _recover_locked(target)


class Staging:
    """A new directory under construction beside `target`, locked while its writer lives."""

    def __init__(self, target: Path):
        self.target = target
        with parent_lock(target.parent):      # a recovery never sees it unlocked
            self.path = Path(tempfile.mkdtemp(prefix=f".{target.name}{TMP_TAG}", dir=target.parent))
            self._fd = _open_dir(self.path)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.chmod(self.path, 0o777 & ~_umask())    # mkdtemp makes it private (0700); as mkdir() would

    def swap_in(self, check=None) -> None:
        """Make the staged directory the target; `check(target)` runs first, under the lock,
        and may raise to refuse replacing what is there."""
        with parent_lock(self.target.parent):
            _recover_locked(self.target)
            if check is not None:
                check(self.target)
            if not os.path.lexists(self.target):
                os.rename(self.path, self.target)
            elif not _exchange(self.path, self.target):
                old = self.target.with_name(f".{self.target.name}{OLD_TAG}{_suffix(self.path, self.target, TMP_TAG)}")
                os.rename(self.target, old)
                os.rename(self.path, self.target)
                self.path = old
            _remove(self.path)      # the old directory, under the staging name or the old one

    def discard(self) -> None:
        """Remove the staged directory (the write failed or was interrupted)."""
        _remove(self.path)

    def close(self) -> None:
        os.close(self._fd)


@contextmanager
def staged(target: Path):
    """A Staging for `target` for the block to fill and swap in: discarded if the block
    raises (the target keeps what it held), its lock released either way."""
    staging = Staging(target)
    try:
        yield staging
    except BaseException:
        staging.discard()
        raise
    finally:
        staging.close()


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    fn = getattr(_libc(), "renameat2", None)
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


@lru_cache(maxsize=1)
def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
