"""The model behind a program: which file (and its hash) and preset `ratc compile` traced.

A program directory holds no model code (it is data, never executed), so the compiler
records where the model came from and the runtime rebuilds it from there, refusing a file
whose content changed since.
"""

from __future__ import annotations

from pathlib import Path

from ratc.errors import RatcError
from ratc.io import file_sha256


def record(model_file: str | None, preset: str | None, seq_len: int, hf_config: str | None = None) -> dict:
    """The program manifest's `model_source` entry."""
    if hf_config is not None:
        import json
        return {"kind": "hf-config", "config": json.loads(Path(hf_config).read_text()), "seq_len": seq_len}
    path = Path(model_file).resolve()
    return {"kind": "model-file", "path": str(path), "sha256": file_sha256(path), "preset": preset, "seq_len": seq_len}


def resolve(meta: dict, where: str, override: str | None = None) -> tuple[str, str | None]:
    """(model file, preset) to rebuild the program's model from; `override` replaces the
    recorded path but must have the recorded content."""
    source = meta.get("model_source")
    if not isinstance(source, dict):
        raise RatcError(f"{where}: the program does not record its model (compiled by an older ratc); "
                        "recompile it with `ratc compile`")
    if source.get("kind") == "hf-config":
        raise RatcError(f"{where}: the program was compiled from a Hugging Face config; the runtime builds "
                        "models from model files only (compile a model file, e.g. examples/llama.py)")
    if source.get("kind") != "model-file" or not isinstance(source.get("path"), str):
        raise RatcError(f"{where}: malformed model_source in the manifest: {source!r}")
    path = override or source["path"]
    if not Path(path).is_file():
        raise RatcError(f"{path}: the program's model file is missing (give its new place with --model FILE)")
    got = file_sha256(path)
    if got != source.get("sha256"):
        raise RatcError(f"{path}: sha256 {got} differs from the file the program was compiled from "
                        f"({source['path']}, sha256 {source.get('sha256')}); recompile, or give that file "
                        "with --model")
    return path, source.get("preset")
