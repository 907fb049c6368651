"""The trace cache: a hit is the traced profile exactly, skips torch, and tracks every file the trace read."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratc.frontend import trace_cache, trace_hf_config
from ratc.frontend.modelfile import _trace_model_file, trace_model_file

ROOT = Path(__file__).parents[1]
EXAMPLE = ROOT / "examples" / "llama.py"
HELPER = "ratc_test_trace_helper"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RATC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "traces"


@pytest.fixture
def model_with_helper(tmp_path, monkeypatch):
    """The example model file, importing a helper module that sits beside it."""
    (tmp_path / f"{HELPER}.py").write_text("SEQ = 64\n")
    model = tmp_path / "model.py"
    (tmp_path / "notes.txt").write_text("a file the model reads\n")
    model.write_text(EXAMPLE.read_text() + f"\nimport os, sys  # noqa\nsys.path.insert(0, os.path.dirname(__file__))\n"
                                           f"import {HELPER}  # noqa\n"
                                           "NOTES = open(os.path.join(os.path.dirname(__file__), 'notes.txt')).read()\n")
    monkeypatch.delitem(sys.modules, HELPER, raising=False)
    yield model
    sys.modules.pop(HELPER, None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def entries(cache):
    return sorted(cache.rglob("*.json")) if cache.exists() else []


def test_a_hit_is_the_traced_profile(cache):
    traced = _trace_model_file(str(EXAMPLE), "tiny", 96, "auto")
    assert trace_model_file(str(EXAMPLE), "tiny", 96) == traced      # a miss: traces and stores
    (entry,) = entries(cache)
    assert "cwd" not in json.loads(entry.read_text())     # it read no file relative to the working directory
    hit = trace_model_file(str(EXAMPLE), "tiny", 96)
    assert hit == traced and list(hit.meta) == list(traced.meta)
    # another spelling of the same file: the same entry, its own source
    again = trace_model_file(os.path.relpath(EXAMPLE), "tiny", 96)
    assert again.meta["source"] == os.path.relpath(EXAMPLE) and entries(cache) == [entry]


def test_key_follows_preset_length_tracer_and_versions(cache):
    base = trace_cache.model_file_key(str(EXAMPLE), "tiny", 96, "auto")
    for other in (trace_cache.model_file_key(str(EXAMPLE), "llama2-7b", 96, "auto"),
                  trace_cache.model_file_key(str(EXAMPLE), "tiny", 128, "auto"),
                  trace_cache.model_file_key(str(EXAMPLE), "tiny", 96, "fx")):
        assert other != base
    assert base["torch"] and base["sources"] and base["ratc"]


def test_an_edited_model_file_helper_or_data_file_is_traced_again(cache, model_with_helper, monkeypatch):
    path = str(model_with_helper)
    key = trace_cache.model_file_key(path, "tiny", 64, "auto")     # (the model adds its folder to sys.path)
    trace_model_file(path, "tiny", 64)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(model_with_helper.parent)])
    (entry,) = entries(cache)
    deps = json.loads(entry.read_text())["deps"]
    helper, notes = model_with_helper.parent / f"{HELPER}.py", model_with_helper.parent / "notes.txt"
    assert {str(p.resolve()) for p in (helper, notes, model_with_helper)} <= set(deps)
    assert not any("site-packages" in d for d in deps)              # torch's own files are not listed
    assert trace_cache.load(key, path) is not None
    for changed, text in ((helper, "SEQ = 65\n"), (notes, "edited\n")):
        before = changed.read_text()
        changed.write_text(text)
        assert trace_cache.load(key, path) is None, changed          # a file the trace read changed
        changed.write_text(before)
        assert trace_cache.load(key, path) is not None
    model_with_helper.write_text(model_with_helper.read_text() + "\n# edited\n")
    assert trace_cache.model_file_key(path, "tiny", 64, "auto") != key


COPY = ("import os, sys\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
        "from base import PRESETS, DEFAULT_PRESET, build_model, input_spec  # noqa\n")


def test_same_file_elsewhere_or_another_search_path_is_traced_again(cache, tmp_path, monkeypatch):
    """Oracle: RATC_CACHE_DIR=off. Identical model files whose imports resolve to different
    modules (a copy in another folder; another PYTHONPATH) must not share an entry."""
    narrow = EXAMPLE.read_text().replace('"tiny": dict(layers=4, hidden=128', '"tiny": dict(layers=4, hidden=256')
    assert narrow != EXAMPLE.read_text()
    for name, base in (("a", EXAMPLE.read_text()), ("b", narrow)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "base.py").write_text(base)
        (tmp_path / name / "m.py").write_text(COPY)
    saved = sys.path[:]
    try:
        hidden = []
        for name in ("a", "b"):
            sys.modules.pop("base", None)
            sys.path[:] = saved
            hidden.append(trace_model_file(str(tmp_path / name / "m.py"), "tiny").hidden)
        assert hidden == [128, 256]
        # one file, imports found through PYTHONPATH: the search path is part of the key
        (tmp_path / "m.py").write_text("from base import PRESETS, DEFAULT_PRESET, build_model, input_spec  # noqa\n")
        got = []
        for name in ("a", "b"):
            sys.modules.pop("base", None)
            sys.path[:] = [str(tmp_path / name)] + saved
            got.append(trace_model_file(str(tmp_path / "m.py"), "tiny").hidden)
        assert got == [128, 256]
    finally:
        sys.path[:] = saved
        sys.modules.pop("base", None)


def test_a_relative_read_ties_the_entry_to_its_working_directory(cache, tmp_path, monkeypatch):
    model = tmp_path / "m.py"
    model.write_text(EXAMPLE.read_text().replace(
        'PRESETS: dict[str, dict] = {', 'LAYERS = int(open("layers.txt").read())\nPRESETS: dict[str, dict] = {', 1)
        .replace('"tiny": dict(layers=4,', '"tiny": dict(layers=LAYERS,'))
    assert "LAYERS," in model.read_text()
    layers = []
    for name, n in (("x", 4), ("y", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "layers.txt").write_text(str(n))
        monkeypatch.chdir(tmp_path / name)
        layers.append(trace_model_file(str(model), "tiny").num_layers)
    assert layers == [4, 2]
    monkeypatch.chdir(tmp_path / "x")
    assert trace_model_file(str(model), "tiny").num_layers == 4       # its own entry hits again


def test_damaged_entries_are_misses_and_off_means_off(cache, monkeypatch):
    trace_model_file(str(EXAMPLE), "tiny", 80)
    (entry,) = entries(cache)
    key = trace_cache.model_file_key(str(EXAMPLE), "tiny", 80, "auto")
    record = json.loads(entry.read_text())
    for damaged in ("{not json", json.dumps({**record, "graph": "module @x {"}),
                    json.dumps({**record, "key": {**key, "preset": "other"}})):
        entry.write_text(damaged)
        assert trace_cache.load(key, str(EXAMPLE)) is None
    monkeypatch.setenv("RATC_CACHE_DIR", "off")
    assert trace_model_file(str(EXAMPLE), "tiny", 72).seq_len == 72
    assert trace_cache.model_file_key(str(EXAMPLE), "tiny", 72, "auto") is not None
    assert [e for e in entries(cache) if e != entry] == []


def test_hf_configs_are_cached_by_content(cache):
    config = json.loads((ROOT / "examples" / "hf" / "qwen2.json").read_text())
    traced = trace_hf_config(config, 128)
    assert trace_hf_config(dict(config), 128) == traced and len(entries(cache)) == 1
    assert trace_hf_config({**config, "num_hidden_layers": 2}, 128).num_layers == 2
    assert len(entries(cache)) == 2


def test_a_hit_needs_no_torch(tmp_path):
    env = {**os.environ, "RATC_CACHE_DIR": str(tmp_path)}
    code = ("import sys; from ratc.frontend import trace_model_file; "
            f"p = trace_model_file({str(EXAMPLE)!r}, 'tiny', 48); print(p.seq_len, 'torch' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env) for _ in range(2)]
    assert [r.stdout for r in runs] == ["48 True\n", "48 False\n"], [r.stderr for r in runs]


def test_a_preset_named_alone_hits_the_cache_without_torch(tmp_path):
    """`ratc plan --preset X` (the bundled example) reads a cached trace without importing the
    example file, which imports torch: the preset is checked only when the file is traced."""
    env = {**os.environ, "RATC_CACHE_DIR": str(tmp_path)}
    code = ("import sys; from ratc.cli.main import main; "
            "rc = main(['plan', '--preset', 'tiny', '--clusters', '4', '--global-batch', '16', '--json', "
            f"'-o', {str(tmp_path / 'plan.json')!r}]); print(rc, 'torch' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env) for _ in range(2)]
    assert [r.stdout for r in runs] == ["0 True\n", "0 False\n"], [r.stderr for r in runs]
