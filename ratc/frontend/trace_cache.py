"""An on-disk cache of traced models, so that compiling an unchanged model again skips PyTorch.

Tracing imports torch, and torch._dynamo (which the meta device's Python references pull
in), and runs the model's forward on the meta device: 3-5 s of every `ratc compile` or
`ratc plan`. A profile's graph IR (ratc.ir.dialects.graph) is an exact serialization of it,
so the cache keeps that text and the profile's meta under $RATC_CACHE_DIR/traces/ (see
ratc.cache; RATC_CACHE_DIR=off disables it).

An entry is keyed by everything a trace reads that ratc can name before running it: the
model file's path and bytes (or the Hugging Face config), the import search path
(sys.path, so PYTHONPATH too), the preset, sequence length and tracer, the torch /
transformers versions, and the sources of ratc's frontend and IR. It also lists, with its
hash, each local file the trace read (anything outside the Python installation: modules the
model file imported, a config it opened), and is used only while all of them are
unchanged; when the trace opened a path relative to the working directory, only from that
directory. Reads are seen through an audit hook (PEP 578) on Python's "open" event.

What the hook cannot see is not in the key: environment variables the model reads, and
existence checks (os.path.exists) it branches on; and packages of the Python
installation other than torch and transformers are named by no version. A model file
that depends on those needs RATC_CACHE_DIR=off.

An entry holds the sha256 of the rest of it, and its graph must parse and verify: a
damaged entry (edited, truncated, unparseable) is reported on stderr and the model traced
again, never used and never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import sysconfig
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from ratc.cache import Damaged, cache_root, read_record, sources_version, warn_damaged, write_record
from ratc.errors import RatcError

# What a profile is made of: the tracer and cost formulas, and the IR that stores it.
_VERSIONED = ("frontend/*.py", "ir/*.py", "ir/*.lark", "ir/dialects/*.py")


@lru_cache(maxsize=1)
def _versions() -> dict:
    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    from ratc import __version__
    return {"ratc": __version__, "sources": sources_version(_VERSIONED), "torch": version("torch"),
            "transformers": version("transformers")}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def model_file_key(path: str, preset: str | None, seq_len: int | None, method: str) -> dict | None:
    """The key of a model file's trace, or None when the file cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    # The path and the search path decide what the file's imports resolve to: a copy of it
    # elsewhere, or another PYTHONPATH, may import other modules under the same names.
    return {"kind": "model-file", "file": _digest(data), "path": str(Path(path).resolve()),
            "search_path": [_search_entry(p) for p in sys.path],
            "preset": preset, "seq_len": seq_len, "method": method, **_versions()}


def _search_entry(entry: str) -> str:
    """A sys.path entry as imports read it: '' and relative folders from the working
    directory; anything else (absolute, or a path hook's marker such as an editable
    install's) as written."""
    if entry == "":
        return os.getcwd()
    if not os.path.isabs(entry) and os.path.isdir(entry):
        return os.path.abspath(entry)
    return entry


def hf_config_key(config: dict, seq_len: int, name: str | None) -> dict:
    """The key of a Hugging Face config's trace."""
    return {"kind": "hf-config", "config": _digest(json.dumps(config, sort_keys=True).encode()),
            "seq_len": seq_len, "name": name, **_versions()}


def _path(key: dict) -> Path | None:
    root = cache_root()
    if root is None:
        return None
    digest = _digest(json.dumps(key, sort_keys=True).encode())
    return root / "traces" / digest[:2] / f"{digest}.json"


def load(key: dict | None, source: str):
    """The cached ModelProfile for key (meta["source"] set to `source`), or None: missing,
    or a local file its trace read has changed since (or another working directory), or
    damaged: warned about on stderr and traced again (store() then replaces it)."""
    path = _path(key) if key is not None else None
    if path is None:
        return None
    try:
        return _load(path, key, source)
    except Damaged as exc:
        warn_damaged("trace cache entry", path, str(exc), "tracing the model again")
        return None


# What a record holds besides its hash; the hash covers all of it.
_FIELDS = ("key", "deps", "meta", "graph")


def _load(path: Path, key: dict, source: str):
    record = read_record(path, key, _FIELDS[1:])
    if record is None:
        return None
    if not isinstance(record["deps"], dict) or not isinstance(record["meta"], dict) \
            or not isinstance(record["graph"], str) or not isinstance(record.get("cwd", ""), str):
        raise Damaged("'deps' and 'meta' must be objects, 'graph' and 'cwd' text")
    # Legitimately stale rather than damaged: another working directory, or a file the
    # trace read has changed since.
    if record.get("cwd") not in (None, os.getcwd()) or \
            any(_file_digest(f) != d for f, d in record["deps"].items()):
        return None
    from ratc.ir import parse_module, verify
    from ratc.frontend.graph_ir import profile_from_module

    try:
        module = parse_module(record["graph"], str(path))
        verify(module)
        profile = profile_from_module(module)
        profile.meta.update(record["meta"], source=source)
    except (KeyError, TypeError, ValueError) as exc:
        # (a graph that verifies can still lack what a profile reads; a cache entry is never an error)
        raise Damaged(f"its graph is not a model profile: {type(exc).__name__}: {exc}") from None
    except RatcError as exc:
        raise Damaged(f"its graph does not load: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise Damaged("its graph is nested too deeply") from None
    return profile


def store(key: dict | None, profile, deps: list, cwd: str | None = None) -> None:
    """Keep a traced profile with the hashes of the local files its trace read (and the
    working directory, when it read a path relative to it), and the sha256 of all of it."""
    path = _path(key) if key is not None else None
    if path is None:
        return
    from ratc.ir import print_module
    from ratc.frontend.graph_ir import module_from_profile

    meta = {k: v for k, v in profile.meta.items() if k != "source"}
    digests = {str(f): _file_digest(f) for f in sorted(set(deps))}
    if None in digests.values():
        return
    record = {"key": key, "deps": digests, "meta": meta, "graph": print_module(module_from_profile(profile))}
    if cwd is not None:
        record["cwd"] = cwd
    write_record(path, record)


def _file_digest(path) -> str | None:
    try:
        return _digest(Path(path).read_bytes())
    except OSError:
        return None


# Not the model's: the Python installation (torch reads thousands of its own files), and
# the kernel's virtual files (torch reads /proc/self/maps, different in every process).
_INSTALLED = tuple(str(Path(p).resolve()) + "/" for name in ("stdlib", "platstdlib", "purelib", "platlib")
                   if (p := sysconfig.get_paths().get(name))) + ("/proc/", "/sys/", "/dev/")
_reads: list | None = None       # the paths opened while a recording() runs
_hooked = False


def _audit(event: str, args: tuple) -> None:
    # An audit hook stays for the life of the process: outside recording() it returns at once.
    if event == "open" and _reads is not None and isinstance(args[0], str) and not args[0].startswith(_INSTALLED):
        _reads.append(args[0])


class _Reads:
    """The paths a recording saw opened (module sources and bytecode included: importing
    opens them through io.open_code, which raises the same event)."""

    def __init__(self, opened: list):
        self.opened = opened

    def cwd(self) -> str | None:
        """The working directory, if a file was opened relative to it (else None). (Path hooks
        show up as relative names too: an editable install's finder marker is no file.)"""
        return os.getcwd() if any(not os.path.isabs(p) and os.path.isfile(p) for p in self.opened) else None

    def files(self) -> list:
        """The local files the trace read, resolved: sources rather than their bytecode."""
        out = set()
        for p in self.opened:
            if p.endswith(".pyc"):
                try:
                    p = importlib.util.source_from_cache(p)
                except ValueError:
                    pass
            resolved = Path(p).resolve()
            if not str(resolved).startswith(_INSTALLED) and resolved.is_file():
                out.add(resolved)
        return sorted(out)


@contextlib.contextmanager
def recording():
    """Record the local files read inside (modules imported, files opened); yields a _Reads."""
    global _reads, _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    outer, _reads = _reads, []
    reads = _Reads(_reads)
    try:
        yield reads
    finally:
        if outer is not None:
            outer.extend(_reads)
        _reads = outer
