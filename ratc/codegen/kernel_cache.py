"""An on-disk cache of kernel timings, keyed by platform, shape, tile options and code version.

Timing a generated kernel on the kernel VM takes 0.05-0.2 s; planning a 7B model profiles
dozens of shapes, so `ratc compile` keeps each result as one small JSON file under
$RATC_CACHE_DIR (default $XDG_CACHE_HOME/ratc or ~/.cache/ratc) in kernels/. The key
includes a hash of the code generator's and the timing model's sources, so editing either
starts a fresh cache instead of reading stale cycles. RATC_CACHE_DIR=off disables it.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from ratc.cache import cache_root, sources_version, write_quietly

# Sources whose edits may change what a kernel is, its text or its cycles: the whole code
# generator and the kernel VM's timing model (hashing all of them needs no list to keep up).
_VERSIONED = ("codegen/*.py", "codegen/*.lark", "vm/kernel_timing.py")


def cache_dir() -> Path | None:
    """The kernel cache directory, or None when caching is off."""
    root = cache_root()
    return None if root is None else root / "kernels"


@lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of the generator and timing-model sources."""
    return sources_version(_VERSIONED)


def _path(key, suffix: str = ".json") -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    digest = hashlib.sha256(json.dumps([code_version(), key], sort_keys=True).encode()).hexdigest()
    return root / digest[:2] / f"{digest}{suffix}"


def load(key) -> dict | None:
    """The cached entry for key, or None (missing, unreadable or from another key)."""
    path = _path(key)
    if path is None or not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != json.loads(json.dumps(key)):
        return None
    return record.get("entry")


def store(key, entry: dict) -> None:
    """Keep an entry; a cache that cannot be written is skipped, never an error."""
    write_quietly(_path(key), json.dumps({"key": key, "entry": entry}, sort_keys=True) + "\n")


def load_text(key) -> str | None:
    """A kernel's cached .rasm text (its first line names the key), or None."""
    path = _path(key, ".rasm")
    if path is None or not path.is_file():
        return None
    try:
        head, _, text = path.read_text().partition("\n")
    except (OSError, UnicodeDecodeError):
        return None
    return text if head == "; " + json.dumps(key, sort_keys=True) else None


def store_text(key, text: str) -> None:
    """Keep a kernel's .rasm text."""
    write_quietly(_path(key, ".rasm"), "; " + json.dumps(key, sort_keys=True) + "\n" + text)
