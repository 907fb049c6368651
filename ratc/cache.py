"""Where ratc keeps its on-disk caches (kernel timings, traced models), and writing to them."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path


def cache_root() -> Path | None:
    """$RATC_CACHE_DIR (default $XDG_CACHE_HOME/ratc or ~/.cache/ratc), or None when it is
    set to off / 0 / none / empty (no caching)."""
    root = os.environ.get("RATC_CACHE_DIR")
    if root is not None and root.strip().lower() in ("", "off", "0", "none"):
        return None
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = Path(base) / "ratc"
    return Path(root)


def sources_version(patterns: tuple[str, ...]) -> str:
    """A hash of the ratc sources matching the glob patterns (relative to the package)."""
    pkg = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(p for pattern in patterns for p in pkg.glob(pattern)):
        h.update(path.relative_to(pkg).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


class Damaged(Exception):
    """A cache entry that exists but cannot be trusted (the reason is its message)."""


def read_entry(path: Path) -> str | None:
    """A cache entry's text, None when there is none; Damaged when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise Damaged("not UTF-8 text") from None
    except OSError as exc:
        raise Damaged(exc.strerror or type(exc).__name__) from None


def write_quietly(path: Path | None, data: str) -> None:
    """Write a cache file atomically; a cache that cannot be written is skipped, never an error."""
    if path is None:
        return
    from ratc.io import write_atomic
    from ratc.errors import OutputError

    try:
        write_atomic(path, data)
    except OutputError:
        pass


def content_digest(payload) -> str:
    """The sha256 of a cache entry's payload (text as is, anything else as sorted JSON)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, sort_keys=True)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


def warn_damaged(what: str, path: Path, reason: str, action: str = "regenerating") -> None:
    """Say on stderr that a cache entry was found damaged and is being made again."""
    print(f"ratc: warning: {what} {path} is damaged ({reason}); {action}", file=sys.stderr)


def read_record(path: Path, key: dict, fields: tuple[str, ...]) -> dict | None:
    """A JSON cache record {key, *fields, sha256} written by write_record for `key`; None when
    there is none; Damaged when it cannot be trusted (not JSON, its hash or key wrong)."""
    text = read_entry(path)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        raise Damaged("not JSON; truncated?") from None
    if not isinstance(record, dict) or not {"key", *fields, "sha256"} <= record.keys():
        raise Damaged(f"expected an object with key, {', '.join(fields)} and sha256")
    if record["sha256"] != content_digest({k: v for k, v in record.items() if k != "sha256"}):
        raise Damaged("content hash mismatch; edited or truncated?")
    if record["key"] != json.loads(json.dumps(key)):
        raise Damaged("it was written for another key")
    return record


def write_record(path: Path | None, record: dict) -> None:
    """Keep a JSON cache record with the sha256 of all of it (as JSON reads it back: tuples
    become lists), atomically; a cache that cannot be written is skipped."""
    record = json.loads(json.dumps(record))
    record["sha256"] = content_digest(record)
    write_quietly(path, json.dumps(record) + "\n")
