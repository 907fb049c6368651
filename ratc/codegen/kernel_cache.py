"""An on-disk cache of kernel timings, keyed by platform, shape, tile options and code version.

Timing a generated kernel on the kernel VM takes 0.05-0.2 s; planning a 7B model profiles
dozens of shapes, so `ratc compile` keeps each result as one small JSON file under
$RATC_CACHE_DIR (default $XDG_CACHE_HOME/ratc or ~/.cache/ratc) in kernels/. The key
includes a hash of the code generator's and the timing model's sources, so editing either
starts a fresh cache instead of reading stale cycles. RATC_CACHE_DIR=off disables it.

Each entry holds the sha256 of its payload (the timing entry, or the .rasm text after its
header line): a truncated or edited entry is never used; it is reported on stderr and
generated again, which replaces it.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path

from ratc.cache import Damaged, cache_root, content_digest, read_entry, sources_version, warn_damaged, write_quietly
from ratc.units import in_range

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


def _check_entry(entry) -> None:
    """The fields a timing entry holds, in their ranges (Damaged if not): cycles always;
    seconds and MAC utilization where it has them (exec_profile's entries; a timed .rasm
    text's has cycles alone)."""
    if not isinstance(entry, dict):
        raise Damaged("its entry is not an object")
    if type(entry.get("cycles")) is not int or entry["cycles"] < 1:
        raise Damaged(f"cycles {entry.get('cycles')!r} is not a positive integer")
    for field, low, high in (("seconds", 0.0, math.inf), ("mac_utilization", 0.0, 1.0)):
        if field in entry and (not in_range(entry[field], low, high) or (field == "seconds" and entry[field] <= 0)):
            raise Damaged(f"{field} {entry.get(field)!r} is out of range")


def _load(path: Path, key) -> dict | None:
    text = read_entry(path)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        raise Damaged("not JSON; truncated?") from None
    if not isinstance(record, dict) or not {"key", "entry", "sha256"} <= record.keys():
        raise Damaged("expected an object with 'key', 'entry' and 'sha256'")
    if record["key"] != json.loads(json.dumps(key)):
        raise Damaged("it was written for another key")
    if record["sha256"] != content_digest(record["entry"]):
        raise Damaged("content hash mismatch")
    _check_entry(record["entry"])
    return record["entry"]


def load(key) -> dict | None:
    """The cached entry for key, or None: missing, or damaged (warned about on stderr; the
    caller regenerates it and store() replaces the damaged file)."""
    path = _path(key)
    if path is None:
        return None
    try:
        return _load(path, key)
    except Damaged as exc:
        warn_damaged("kernel cache entry", path, str(exc))
        return None


def store(key, entry: dict) -> None:
    """Keep an entry with its content hash; a cache that cannot be written is skipped, never an error."""
    record = {"key": key, "entry": entry, "sha256": content_digest(entry)}
    write_quietly(_path(key), json.dumps(record, sort_keys=True) + "\n")


def _load_text(path: Path, key) -> str | None:
    raw = read_entry(path)
    if raw is None:
        return None
    head, newline, text = raw.partition("\n")
    try:
        header = json.loads(head[2:]) if head.startswith("; ") and newline else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or not {"key", "sha256"} <= header.keys():
        raise Damaged("no '; {key, sha256}' header line; truncated?")
    if header["key"] != json.loads(json.dumps(key)):
        raise Damaged("it was written for another key")
    if header["sha256"] != content_digest(text):
        raise Damaged("content hash mismatch; truncated or edited?")
    return text


def load_text(key) -> str | None:
    """A kernel's cached .rasm text, or None: missing, or damaged (warned about on stderr;
    the caller regenerates it). Its first line is a comment naming the key and the text's hash."""
    path = _path(key, ".rasm")
    if path is None:
        return None
    try:
        return _load_text(path, key)
    except Damaged as exc:
        warn_damaged("kernel cache entry", path, str(exc))
        return None


def store_text(key, text: str) -> None:
    """Keep a kernel's .rasm text after a header line with its key and content hash."""
    header = json.dumps({"key": key, "sha256": content_digest(text)}, sort_keys=True)
    write_quietly(_path(key, ".rasm"), "; " + header + "\n" + text)


def _timed_key(text: str, platform) -> list:
    from ratc.codegen.tiling import platform_key

    return ["timed-rasm", list(platform_key(platform)), content_digest(text)]


def remember_text_cycles(text: str, platform, cycles: int) -> None:
    """Keep the cycles the code generator timed a kernel's text at, so that opening the
    program it is written into need not time it again (the text's hash is the key: any
    other text is timed)."""
    store(_timed_key(text, platform), {"cycles": int(cycles)})


def text_cycles(text: str, platform, where: str) -> int:
    """Cycles of a .rasm kernel text on the kernel VM's timing mode (assembling it first). A
    timing is kept under the text's sha256, so an unchanged program's kernels are timed once
    (or never, on the machine that generated them)."""
    from ratc.codegen.assembler import assemble
    from ratc.vm.kernel_timing import run_timing

    key = _timed_key(text, platform)
    entry = load(key)
    if entry is not None:
        return entry["cycles"]
    cycles = run_timing(assemble(text, platform, filename=where), platform)
    if cycles >= 1:
        store(key, {"cycles": cycles})
    return cycles
