"""Model files of examples/llama.py with some parameters frozen (requires_grad=False)."""

from __future__ import annotations

import hashlib
import pathlib

LLAMA = pathlib.Path(__file__).resolve().parents[1] / "examples" / "llama.py"

_TEMPLATE = '''
import importlib.util
_spec = importlib.util.spec_from_file_location("_llama", {llama!r})
_llama = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_llama)
PRESETS, DEFAULT_PRESET, input_spec = _llama.PRESETS, _llama.DEFAULT_PRESET, _llama.input_spec
PREFIXES, NAMES = {prefixes!r}, {names!r}

def build_model(**config):
    model = _llama.build_model(**config)
    for name, p in model.named_parameters():
        if name.startswith(PREFIXES) or name in NAMES:
            p.requires_grad_(False)
    return model
'''


def frozen_model_file(folder: pathlib.Path, prefixes: tuple = (), names: tuple = ()) -> str:
    """Write a model file freezing the parameters named by a prefix or in full; its path."""
    key = hashlib.sha1(repr((tuple(prefixes), tuple(names))).encode()).hexdigest()[:12]
    path = folder / f"frozen_{key}.py"
    path.write_text(_TEMPLATE.format(llama=str(LLAMA), prefixes=tuple(prefixes), names=tuple(names)))
    return str(path)
