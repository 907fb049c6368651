"""Kernel cache entries are checked by a content hash: a damaged one is regenerated, with a warning."""

import json

import pytest

from ratc.codegen import exec_profile, kernel_cache
from ratc.platform import load_platform

PLATFORM = load_platform("mt3000")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RATC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(exec_profile, "_CACHE", {})
    return tmp_path / "kernels"


def _only(cache, suffix):
    (path,) = cache.glob(f"*/*{suffix}")
    return path


def _regenerated(monkeypatch):
    """Count generate_kernel calls (a cache hit makes none)."""
    calls = []
    real = exec_profile.generate_kernel
    monkeypatch.setattr(exec_profile, "generate_kernel", lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def test_kernel_cache_regenerates_a_truncated_rasm_entry_with_a_warning(cache, monkeypatch, capsys):
    want = exec_profile.kernel_text(PLATFORM, "gemm", (64, 96, 64))
    path = _only(cache, ".rasm")
    raw = path.read_text()
    path.write_text(raw[: len(raw) // 2])
    calls = _regenerated(monkeypatch)
    assert exec_profile.kernel_text(PLATFORM, "gemm", (64, 96, 64)) == want
    err = capsys.readouterr().err
    assert f"ratc: warning: kernel cache entry {path} is damaged (content hash mismatch" in err
    assert err.rstrip().endswith("regenerating") and err.count("\n") == 1 and len(calls) == 1
    assert path.read_text() == raw         # replaced by the regenerated entry
    assert exec_profile.kernel_text(PLATFORM, "gemm", (64, 96, 64)) == want and len(calls) == 1


@pytest.mark.parametrize("damage, reason", [
    (lambda raw: "", "no '; {key, sha256}' header line"),
    (lambda raw: raw.split("\n", 1)[0], "no '; {key, sha256}' header line"),
    (lambda raw: raw.replace("; {", "; [", 1), "no '; {key, sha256}' header line"),
    (lambda raw: raw + "vmac r0, r1, r2\n", "content hash mismatch"),
])
def test_kernel_cache_regenerates_a_rasm_entry_without_a_valid_header_or_hash(cache, capsys, damage, reason):
    want = exec_profile.kernel_text(PLATFORM, "gemm", (32, 64, 32))
    path = _only(cache, ".rasm")
    path.write_text(damage(path.read_text()))
    assert exec_profile.kernel_text(PLATFORM, "gemm", (32, 64, 32)) == want
    assert f"{path} is damaged ({reason}" in capsys.readouterr().err


def test_kernel_cache_does_not_use_an_entry_whose_cycles_were_edited(cache, monkeypatch, capsys):
    want = exec_profile.gemm_profile(PLATFORM, 64, 96, 64)
    path = _only(cache, ".json")
    record = json.loads(path.read_text())
    record["entry"]["cycles"] = 1
    path.write_text(json.dumps(record))
    monkeypatch.setattr(exec_profile, "_CACHE", {})
    calls = _regenerated(monkeypatch)
    assert exec_profile.gemm_profile(PLATFORM, 64, 96, 64) == want and len(calls) == 1
    assert f"kernel cache entry {path} is damaged (content hash mismatch)" in capsys.readouterr().err
    assert json.loads(path.read_text())["entry"] == want


@pytest.mark.parametrize("edit, reason", [
    (lambda r: "{not json", "not JSON"),
    (lambda r: json.dumps([r]), "expected an object"),
    (lambda r: json.dumps({**r, "key": ["other"]}), "it was written for another key"),
    # a consistent hash over an impossible entry (a hash is for accidents; ranges still apply)
    (lambda r: json.dumps({**r, "entry": {**r["entry"], "cycles": -5},
                           "sha256": kernel_cache.content_digest({**r["entry"], "cycles": -5})}),
     "cycles -5 is not a positive integer"),
    (lambda r: json.dumps({**r, "entry": {**r["entry"], "mac_utilization": 3.0},
                           "sha256": kernel_cache.content_digest({**r["entry"], "mac_utilization": 3.0})}),
     "mac_utilization 3.0 is out of range"),
])
def test_kernel_cache_regenerates_an_unparseable_or_out_of_range_timing_entry(cache, monkeypatch, capsys,
                                                                              edit, reason):
    want = exec_profile.gemm_profile(PLATFORM, 32, 64, 32)
    path = _only(cache, ".json")
    path.write_text(edit(json.loads(path.read_text())))
    monkeypatch.setattr(exec_profile, "_CACHE", {})
    assert exec_profile.gemm_profile(PLATFORM, 32, 64, 32) == want
    assert f"{path} is damaged ({reason}" in capsys.readouterr().err


def test_kernel_cache_non_utf8_entry_is_damaged_not_a_traceback(cache, monkeypatch, capsys):
    exec_profile.gemm_profile(PLATFORM, 32, 64, 32)
    path = _only(cache, ".json")
    path.write_bytes(b"\xff\xfe")
    monkeypatch.setattr(exec_profile, "_CACHE", {})
    exec_profile.gemm_profile(PLATFORM, 32, 64, 32)
    assert "(not UTF-8 text)" in capsys.readouterr().err


def test_kernel_cache_miss_is_silent(cache, capsys):
    exec_profile.gemm_profile(PLATFORM, 32, 64, 32)
    exec_profile.kernel_text(PLATFORM, "gemm", (32, 64, 32))
    assert capsys.readouterr().err == ""


def test_a_program_compiled_over_a_truncated_cache_entry_has_whole_kernels(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from ratc.cli.main import main

    monkeypatch.setenv("RATC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(exec_profile, "_CACHE", {})
    example = str(Path(__file__).resolve().parents[1] / "examples" / "llama.py")
    argv = ["compile", example, "--preset", "tiny", "--clusters", "4", "--global-batch", "8", "--no-run", "-o"]
    assert main(argv + [str(tmp_path / "first")]) == 0
    for entry in (tmp_path / "cache" / "kernels").glob("*/*.rasm"):
        raw = entry.read_text()
        entry.write_text(raw[: len(raw) // 2])
    monkeypatch.setattr(exec_profile, "_CACHE", {})
    capsys.readouterr()
    assert main(argv + [str(tmp_path / "second")]) == 0
    assert "kernel cache entry" in capsys.readouterr().err
    for rasm in (tmp_path / "first" / "kernels").glob("*.rasm"):
        assert (tmp_path / "second" / "kernels" / rasm.name).read_text() == rasm.read_text()
    assert main(["run", str(tmp_path / "second")]) == 0
