"""A Hugging Face model id's config.json, found in the local hub cache without network."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ratc.errors import RatcError

# 'org/name' or 'name': the characters the Hub allows in a repository id
_MODEL_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded repositories, by its own precedence:
    $HF_HUB_CACHE, then $HF_HOME/hub, then $XDG_CACHE_HOME/huggingface/hub, then ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "huggingface" / "hub"


def cached_config(model_id: str, revision: str = "main") -> Path:
    """The cached config.json of `model_id` at `revision` (a branch, a tag or a commit hash),
    or a RatcError saying where ratc looked and how to fill the cache."""
    if ".." in model_id or not _MODEL_ID.match(model_id):
        raise RatcError(f"--hf-model {model_id!r}: not a Hugging Face model id (ORG/NAME, e.g. "
                        "meta-llama/Llama-2-7b-hf)")
    repo = hub_cache_dir() / ("models--" + model_id.replace("/", "--"))
    fetch = f"fetch it once with `huggingface-cli download {model_id} config.json` (ratc reads no network)"
    if not repo.is_dir():
        raise RatcError(f"--hf-model {model_id}: not in the local Hugging Face cache ({repo} does not exist); "
                        f"{fetch}, or set HF_HOME / HF_HUB_CACHE to the cache that holds it")
    commit = _commit_of(repo, revision)
    config = repo / "snapshots" / commit / "config.json"
    if not config.is_file():
        raise RatcError(f"--hf-model {model_id}: the cached snapshot {commit} has no config.json ({config}); {fetch}")
    return config


def _commit_of(repo: Path, revision: str) -> str:
    """The snapshot a revision names: refs/REVISION's commit, or the revision itself when it is
    a snapshot's name; with neither, the only snapshot for 'main' (a cache filled by copying)."""
    ref = repo / "refs" / revision
    if ".." not in revision and ref.is_file():
        return ref.read_text(encoding="utf-8").strip()
    snapshots = repo / "snapshots"
    found = sorted(p.name for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []
    if revision in found:
        return revision
    if revision == "main" and len(found) == 1:
        return found[0]
    have = ", ".join(found) or "none"
    raise RatcError(f"--hf-model: {repo.name}: no cached revision '{revision}' (no {ref}; snapshots: {have})")
