"""The model-file protocol of `ratc compile model.py` and its loader.

A model file is a Python file defining

    PRESETS: dict[str, dict]          named configurations (keyword arguments)
    build_model(**config) -> nn.Module   forward(input_ids, labels) -> scalar loss
    input_spec(**config) -> dict         {"seq_len": int, "vocab": int, "batch": int (optional)}

and optionally DEFAULT_PRESET. ratc builds the module on the meta device (no memory for
weights) in the training dtype, so build_model must not read tensor values.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from ratc.errors import LocatedError, RatcError, SourceLocation

TRAIN_DTYPE = "float16"


@dataclass
class ModelSpec:
    """A model built from a model file: module on meta plus the inputs it expects."""

    path: str
    preset: str
    config: dict
    module: object                   # torch.nn.Module on the meta device
    seq_len: int
    vocab: int
    batch: int = 1


def _where(exc: BaseException, path: Path) -> str:
    """' (line N)' for the innermost frame of the model file in a traceback."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f" (line {frames[-1].lineno})" if frames else ""


def import_model_file(path: str):
    """Execute a model file as a fresh module; errors name the file and the cause."""
    from ratc.input_files import not_a_file

    p = Path(path)
    problem = not_a_file(path)
    if problem:
        raise RatcError(problem)
    # a stable name (hash() varies with PYTHONHASHSEED, and class reprs in messages show it)
    name = f"_ratc_model_{hashlib.sha256(os.fsencode(p.resolve())).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise RatcError(f"{path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod     # dataclasses and pickling look modules up by name
    try:
        with _own_argv(path):
            spec.loader.exec_module(mod)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        # the text itself is wrong: file:line:col and a caret, as for every text input
        loc = SourceLocation(path, exc.lineno or 1, exc.offset or 1, p.read_text(errors="replace"))
        raise LocatedError(f"{type(exc).__name__}: {exc.msg}", loc) from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - anything the user's file raises is reported
        sys.modules.pop(name, None)
        raise RatcError(_raised(exc, path)) from None
    return mod


@contextlib.contextmanager
def _own_argv(path: str):
    """sys.argv and sys.path[0] as if the file ran alone: a training script's module-level
    argparse then sees no arguments (its defaults), not ratc's command line, and its
    top-level imports find the modules beside it (`from blocks import Block`). Its prints go
    to stderr and a directory it changes into is left again (ratc.frontend.user_code)."""
    from ratc.frontend.user_code import user_code

    saved, sys.argv = sys.argv, [path]
    folder = str(Path(path).resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        with user_code():
            yield
    finally:
        sys.argv = saved
        if added and folder in sys.path:
            sys.path.remove(folder)


def _raised(exc: BaseException, path: str, what: str | None = None) -> str:
    """'FILE: [WHAT] raised E [while loading] (line N): msg' (WHAT: the protocol function, or
    None for the import); for sys.exit, also what a model file must not do."""
    where = _where(exc, Path(path).resolve())
    subject, tail = (f"{what} ", "") if what else ("", " while loading")
    if isinstance(exc, SystemExit):
        return (f"{path}: {subject}exited with status {exc.code!r}{tail}{where}; a model file must not call "
                "sys.exit (see docs/frontend.md, 'Model-file protocol')")
    return f"{path}: {subject}raised {type(exc).__name__}{tail}{where}: {exc}"


def _check_protocol(mod, path: str) -> None:
    missing = [n for n in ("PRESETS", "build_model", "input_spec") if not hasattr(mod, n)]
    if missing:
        raise RatcError(f"{path}: not a ratc model file: missing {', '.join(missing)} "
                        "(see docs/frontend.md, 'Model-file protocol')")
    if not isinstance(mod.PRESETS, dict) or not all(isinstance(k, str) and isinstance(v, dict)
                                                    for k, v in mod.PRESETS.items()):
        raise RatcError(f"{path}: PRESETS must be a dict of name (a string) -> dict of build_model arguments")
    for fn in ("build_model", "input_spec"):
        if not callable(getattr(mod, fn)):
            raise RatcError(f"{path}: {fn} must be a function")


def _choose_preset(mod, path: str, preset: str | None) -> str:
    if preset is None:
        preset = getattr(mod, "DEFAULT_PRESET", None)
        if preset is not None and not isinstance(preset, str):
            raise RatcError(f"{path}: DEFAULT_PRESET must be the name of a preset (a string), got {preset!r}")
        if preset is None and len(mod.PRESETS) == 1:
            preset = next(iter(mod.PRESETS))
        if preset is None:
            raise RatcError(f"{path}: several presets and no DEFAULT_PRESET; choose one with --preset "
                            f"({', '.join(sorted(mod.PRESETS))})")
    if preset not in mod.PRESETS:
        raise RatcError(f"{path}: unknown preset '{preset}' (available: {', '.join(sorted(mod.PRESETS))})")
    return preset


def _call(fn, config: dict, path: str, what: str):
    try:
        with _own_argv(path):
            return fn(**config)
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        raise RatcError(_raised(exc, path, what)) from None


def _count(value, low: int) -> bool:
    """An int (not a bool) of at least `low`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_seq_len(seq_len: int, path: str) -> None:
    """input_spec's sequence length, refused above $RATC_MAX_SEQ_LEN before the model is built."""
    from ratc.limits import MAX_SEQ_LEN

    MAX_SEQ_LEN.check(seq_len, f"{path}: input_spec")


def load_model_file(path: str, preset: str | None = None, seq_len: int | None = None) -> ModelSpec:
    """Build a model file's module on the meta device for one preset (and sequence length)."""
    import torch

    mod = import_model_file(path)
    _check_protocol(mod, path)
    preset = _choose_preset(mod, path, preset)
    config = dict(mod.PRESETS[preset])
    if seq_len is not None:
        if seq_len < 2:
            raise RatcError(f"sequence length must be at least 2, got {seq_len}")
        config["seq_len"] = seq_len
    spec = _call(mod.input_spec, dict(config), path, "input_spec")
    if not isinstance(spec, dict) or not all(_count(spec.get(k), low) for k, low in (("seq_len", 2), ("vocab", 1))) \
            or not _count(spec.get("batch", 1), 1):
        raise RatcError(f"{path}: input_spec must return a dict with integers 'seq_len' (>= 2), 'vocab' (>= 1) "
                        f"and optionally 'batch' (>= 1), got {spec!r}")
    _check_seq_len(spec["seq_len"], path)
    with torch.device("meta"):
        module = _call(mod.build_model, dict(config), path, "build_model")
    if not isinstance(module, torch.nn.Module):
        raise RatcError(f"{path}: build_model must return a torch.nn.Module, got {type(module).__name__}")
    module = module.to(dtype=getattr(torch, TRAIN_DTYPE)).eval()
    return ModelSpec(path=path, preset=preset, config=config, module=module,
                     seq_len=spec["seq_len"], vocab=spec["vocab"], batch=int(spec.get("batch", 1)))


def trace_model_file(path: str, preset: str | None = None, seq_len: int | None = None,
                     method: str = "auto"):
    """load_model_file + trace_model, with errors naming the file; an unchanged model comes
    from the trace cache (ratc.frontend.trace_cache) without importing torch."""
    from ratc.frontend import trace_cache

    key = trace_cache.model_file_key(path, preset, seq_len, method)
    profile = trace_cache.load(key, path)
    if profile is None:
        with trace_cache.recording() as reads:
            profile = _trace_model_file(path, preset, seq_len, method)
        trace_cache.store(key, profile, reads.files(), reads.cwd())
    return profile


def _trace_model_file(path: str, preset: str | None, seq_len: int | None, method: str):
    from ratc.frontend.trace import trace_model

    from ratc.frontend.user_code import user_code

    spec = load_model_file(path, preset, seq_len)
    try:
        with user_code():       # the model's forward runs while traced
            profile = trace_model(spec.module, spec.seq_len, name=spec.preset, method=method)
    except RatcError as exc:
        raise RatcError(f"{path}: {exc}") from None
    if profile.vocab != spec.vocab:
        raise RatcError(f"{path}: input_spec says vocab={spec.vocab} but the embedding has {profile.vocab} rows")
    profile.meta["source"] = path
    return profile
