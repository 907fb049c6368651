"""`ratc compile` end to end: trace, plan, schedule, program directory, VM run, tamper checks."""

import json
from pathlib import Path

import pytest

from ratc.cli.main import main
from ratc.ir import parse_module, verify
from ratc.program import load_program

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")
TINY = ["compile", EXAMPLE, "--preset", "tiny", "--clusters", "4", "--global-batch", "16"]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("prog") / "tiny"
    assert main(TINY + ["-o", str(out), "--no-run"]) == 0
    return out


def test_program_directory_holds_the_whole_program(program):
    prog = load_program(program)
    assert set(prog.names()) == {"model.ir", "program.ir", "plan.json", "platform.toml", "schedule.txt"}
    life = parse_module(prog.text("program.ir"), "program.ir")
    verify(life)
    assert "life.pipeline" in prog.text("program.ir") and "graph.layer" in prog.text("model.ir")
    plan = json.loads(prog.text("plan.json"))
    assert prog.meta["config"] == plan["top"][0]["label"]
    # Each stage's order is printed in action notation.
    assert prog.text("schedule.txt").startswith("stage 0: 0F0")


def test_compile_is_deterministic(program, tmp_path):
    again = tmp_path / "again"
    assert main(TINY + ["-o", str(again), "--no-run"]) == 0
    for name in ("program.ir", "model.ir", "schedule.txt"):
        assert (again / name).read_bytes() == (program / name).read_bytes(), name


def test_run_simulates_and_compares_with_the_planner(program, capsys):
    assert main(["run", str(program), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"]["step_time_s"] > 0
    assert abs(out["prediction_error"]) < 0.02


def test_tampered_program_is_refused(program, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(program, copy)
    path = copy / "program.ir"
    path.write_text(path.read_text().replace("life.step_end", "life.step_end ", 1))
    assert main(["run", str(copy)]) == 1
    assert "does not match the manifest" in capsys.readouterr().err
    (copy / "program.ir").unlink()
    assert main(["run", str(copy)]) == 1
    assert "listed in the manifest is missing" in capsys.readouterr().err


def test_compile_needs_clusters(capsys):
    assert main(["compile", EXAMPLE, "--preset", "tiny"]) == 1
    assert "give --clusters" in capsys.readouterr().err


def test_forced_plan_over_budget_reports_out_of_memory(tmp_path, capsys):
    out = tmp_path / "oom"
    argv = TINY + ["-o", str(out), "--memory-budget", "2MB", "--plan", "P=1,D=4,Z=0,b=4,A=1,Full,deadline"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "out of memory" in err.lower() and "stage 0" in err
