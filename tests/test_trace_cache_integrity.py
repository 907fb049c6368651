"""Trace cache entries are checked by a content hash and by parsing and verifying their graph:
a damaged entry is warned about and the model traced again, never used and never an error."""

import json
from pathlib import Path

import pytest

from ratc.cache import content_digest
from ratc.frontend import trace_cache
from ratc.frontend.modelfile import _trace_model_file, trace_model_file

EXAMPLE = Path(__file__).parents[1] / "examples" / "llama.py"


@pytest.fixture
def entry(tmp_path, monkeypatch):
    """The trace-cache entry of the example model (tiny, length 80), freshly stored."""
    monkeypatch.setenv("RATC_CACHE_DIR", str(tmp_path / "cache"))
    trace_model_file(str(EXAMPLE), "tiny", 80)
    (path,) = (tmp_path / "cache" / "traces").rglob("*.json")
    return path


def _rehashed(record: dict) -> str:
    """The record with a consistent hash (an edit made on purpose, not an accident)."""
    body = {k: v for k, v in record.items() if k != "sha256"}
    return json.dumps({**body, "sha256": content_digest(body)})


def _retraced(monkeypatch):
    calls = []
    monkeypatch.setattr("ratc.frontend.modelfile._trace_model_file",
                        lambda *a: calls.append(a) or _trace_model_file(*a))
    return calls


def test_trace_cache_retraces_an_edited_but_parseable_entry_with_a_warning(entry, monkeypatch, capsys):
    want = _trace_model_file(str(EXAMPLE), "tiny", 80, "auto")
    record = json.loads(entry.read_text())
    # an edit that still parses and verifies: the embedding's FLOPs doubled
    record["graph"] = record["graph"].replace("bwd_weight_flops = 10240", "bwd_weight_flops = 20480", 1)
    entry.write_text(json.dumps(record))
    calls = _retraced(monkeypatch)
    assert trace_model_file(str(EXAMPLE), "tiny", 80) == want and len(calls) == 1
    err = capsys.readouterr().err
    assert err == (f"ratc: warning: trace cache entry {entry} is damaged (content hash mismatch; edited or "
                   "truncated?); tracing the model again\n")
    assert json.loads(entry.read_text())["graph"] != record["graph"]        # replaced
    assert trace_model_file(str(EXAMPLE), "tiny", 80) == want and len(calls) == 1


def test_trace_cache_retraces_a_truncated_entry(entry, monkeypatch, capsys):
    raw = entry.read_text()
    entry.write_text(raw[: len(raw) // 3])
    calls = _retraced(monkeypatch)
    trace_model_file(str(EXAMPLE), "tiny", 80)
    assert len(calls) == 1 and "(not JSON; truncated?)" in capsys.readouterr().err


@pytest.mark.parametrize("edit, reason", [
    # consistent hashes over content that does not load: each is retraced, with its reason
    (lambda r: {**r, "graph": "module @x {"}, "its graph does not load"),
    (lambda r: {**r, "graph": r["graph"].replace("graph.embedding", "graph.nosuchop", 1)},
     "its graph does not load"),
    (lambda r: {**r, "graph": r["graph"].replace('role = "pre"', 'role = "decoder"', 1)},
     "its graph does not load"),
    (lambda r: {**r, "meta": [1, 2]}, "'deps' and 'meta' must be objects"),
    (lambda r: {**r, "key": {**r["key"], "preset": "other"}}, "it was written for another key"),
])
def test_trace_cache_retraces_an_entry_whose_content_does_not_load(entry, monkeypatch, capsys, edit, reason):
    want = _trace_model_file(str(EXAMPLE), "tiny", 80, "auto")
    entry.write_text(_rehashed(edit(json.loads(entry.read_text()))))
    calls = _retraced(monkeypatch)
    assert trace_model_file(str(EXAMPLE), "tiny", 80) == want and len(calls) == 1
    err = capsys.readouterr().err
    assert f"trace cache entry {entry} is damaged ({reason}" in err and err.count("\n") == 1


def test_trace_cache_entry_without_a_hash_is_damaged(entry, capsys):
    record = json.loads(entry.read_text())
    del record["sha256"]
    entry.write_text(json.dumps(record))
    key = trace_cache.model_file_key(str(EXAMPLE), "tiny", 80, "auto")
    assert trace_cache.load(key, str(EXAMPLE)) is None
    assert "expected an object with key, deps, meta, graph and sha256" in capsys.readouterr().err


def test_trace_cache_hit_and_stale_dependency_are_silent(entry, capsys):
    key = trace_cache.model_file_key(str(EXAMPLE), "tiny", 80, "auto")
    assert trace_cache.load(key, str(EXAMPLE)) is not None
    record = json.loads(entry.read_text())
    record["deps"] = {str(entry.parent / "gone.py"): "0" * 64}      # a file the trace read has changed
    entry.write_text(_rehashed(record))
    assert trace_cache.load(key, str(EXAMPLE)) is None
    assert capsys.readouterr().err == ""
