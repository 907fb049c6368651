"""`ratc run` reads back the report of a program it ran before with the same options
(ratc.vm.system.run_cache): byte-identical output, no parsing or simulating, and every
entry checked before it is trusted."""

import json
from pathlib import Path

import pytest

from ratc.cli.main import main
from ratc.program import MANIFEST
from tiny_programs import compile_tiny_dir


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return compile_tiny_dir(tmp_path_factory.mktemp("runcache") / "tiny", "P=2,D=1,Z=1,b=1,A=4,FSR,deadline")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RATC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _run(capsys, *args) -> tuple:
    code = main(["run", *map(str, args)])
    got = capsys.readouterr()
    return code, got.out, got.err


def _entries(cache: Path) -> list:
    return sorted((cache / "runs").rglob("*.json")) if (cache / "runs").exists() else []


def _no_simulation(monkeypatch):
    """Make checking or simulating a program an error: a report read back needs neither."""
    def refuse(*_, **__):
        raise AssertionError("the program was checked or simulated again")

    monkeypatch.setattr("ratc.program_check.check_program", refuse)
    monkeypatch.setattr("ratc.vm.system.driver.simulate_program", refuse)


def test_a_second_run_reads_the_report_back_without_parsing_or_simulating(program, cache, capsys, monkeypatch):
    first = _run(capsys, program)
    first_json = _run(capsys, program, "--json")
    assert first[0] == first_json[0] == 0 and len(_entries(cache)) == 1
    _no_simulation(monkeypatch)
    assert _run(capsys, program) == first
    assert _run(capsys, program, "--json") == first_json
    assert json.loads(first_json[1])["results"]["step_time_s"] > 0


def test_other_options_are_other_entries_and_files_beside_the_report_are_never_cached(program, cache, capsys,
                                                                                       monkeypatch, tmp_path):
    _run(capsys, program)
    _run(capsys, program, "--steps", "3")
    _run(capsys, program, "--explicit-replicas")
    assert len(_entries(cache)) == 3
    trace = tmp_path / "step.json"
    assert _run(capsys, program, "--trace", trace)[0] == 0 and trace.exists()
    assert _run(capsys, program, "--critical-path")[1].count("critical path of the measured step") == 1
    assert len(_entries(cache)) == 3
    _no_simulation(monkeypatch)
    with pytest.raises(AssertionError, match="simulated again"):
        main(["run", str(program), "--trace", str(trace)])


def test_a_damaged_entry_is_said_and_replaced_by_a_new_simulation(program, cache, capsys):
    code, out, _ = _run(capsys, program)
    (entry,) = _entries(cache)
    record = json.loads(entry.read_text())
    record["report"]["results"]["step_seconds"] *= 2          # edited: its sha256 no longer holds
    entry.write_text(json.dumps(record))
    again = _run(capsys, program)
    assert again[:2] == (code, out)
    assert "run cache entry" in again[2] and "content hash mismatch" in again[2]
    assert _run(capsys, program) == (code, out, "")           # replaced by a good one


def test_an_entry_whose_fields_are_of_the_wrong_kind_is_not_trusted_even_with_a_right_hash(program, cache, capsys):
    from ratc.cache import content_digest

    code, out, _ = _run(capsys, program)
    (entry,) = _entries(cache)
    record = json.loads(entry.read_text())
    record["report"]["results"]["step_seconds"] = "fast"
    del record["sha256"]
    record["sha256"] = content_digest(record)
    entry.write_text(json.dumps(record))
    again = _run(capsys, program)
    assert again[:2] == (code, out) and "not of its kind" in again[2]


def test_a_changed_program_is_checked_again_even_with_a_regenerated_manifest(program, cache, capsys, tmp_path):
    import hashlib
    import shutil

    _run(capsys, program)
    edited = tmp_path / "edited"
    shutil.copytree(program, edited)
    ir = edited / "program.ir"
    ir.write_text(ir.read_text().replace("life.pipeline", "life.pipelin", 1))
    manifest = json.loads((edited / MANIFEST).read_text())
    manifest["files"]["program.ir"] = hashlib.sha256(ir.read_bytes()).hexdigest()
    (edited / MANIFEST).write_text(json.dumps(manifest))
    code, _, err = _run(capsys, edited)
    assert code != 0 and "program.ir" in err and "life.pipelin" in err


def test_no_entry_is_kept_with_the_cache_off(program, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RATC_CACHE_DIR", "off")
    assert _run(capsys, program)[0] == 0
    assert not any(tmp_path.rglob("runs"))
