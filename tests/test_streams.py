"""Every command puts its data on stdout and its errors (and notes) on stderr; every command that
prints a result has --json with sorted keys."""

import json
from pathlib import Path

import pytest

from ratc.cli.main import build_parser, main

GOLDEN_IR = str(Path(__file__).parent / "golden" / "ir" / "cse_dce.ir")
TINY = ["--preset", "tiny"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A one-cluster tiny program (for run, report and launch) and a kernel file (for asm)."""
    root = tmp_path_factory.mktemp("streams")
    assert main(["compile", *TINY, "--clusters", "1", "--global-batch", "8", "--no-run",
                 "-o", str(root / "prog")]) == 0
    assert main(["kernel", "gemm", "64", "64", "64", "-o", str(root / "k.rasm")]) == 0
    return root


# command -> (its cheapest failing arguments, its cheapest succeeding ones, whether the success prints data)
CASES = {
    "compile": (["--preset", "nope", "--emit=graph"], [*TINY, "--emit=graph"], True),
    "plan": ([*TINY, "--global-batch", "16"], [*TINY, "--clusters", "4", "--global-batch", "16"], True),
    "run": (["{root}/nowhere"], ["{root}/prog"], True),
    "report": (["{root}/nowhere"], ["{root}/prog", "--simulate-top", "0", "--top", "1"], True),
    "diagram": (["--pp", "2", "--microbatches", "2", *TINY, "--width", "1", "-o", "{root}/d.svg"],
                ["--pp", "2", "--microbatches", "2", *TINY, "-o", "{root}/d.svg"], False),
    "train": ([*TINY, "--steps", "0"], [*TINY, "--steps", "1", "--no-reference"], True),
    "launch": (["{root}/nowhere"], ["{root}/prog", "--steps", "1"], True),
    "calibrate": (["-o", "{root}/h.toml", "--ranks", "1"], ["-o", "{root}/h.toml", "--quick", "--ranks", "2"], False),
    "opt": (["{root}/nowhere.ir"], [GOLDEN_IR, "-p", "cse,dce"], True),
    "passes": (["--bogus"], [], True),
    "kernel": (["gemm", "1", "2"], ["gemm", "64", "64", "64"], True),
    "asm": (["{root}/nowhere.rasm"], ["{root}/k.rasm"], True),
    "completion": (["fish"], ["bash"], True),
}


def _commands() -> set[str]:
    parser = build_parser()
    return set(next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices)


def test_every_command_has_a_stream_case():
    assert set(CASES) == _commands()


def _argv(command: str, words: list[str], root: Path) -> list[str]:
    return [command, *(w.format(root=root) for w in words)]


def _status(argv: list[str]) -> int:
    """main's exit status, usage errors (which argparse raises as SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as done:
        return done.code


@pytest.mark.parametrize("command", sorted(CASES))
def test_errors_go_to_stderr_and_data_to_stdout(command, work, capfd):
    """(capfd: launch's and calibrate's ranks are processes of their own, writing to the same streams)"""
    failing, succeeding, prints_data = CASES[command]
    assert _status(_argv(command, failing, work)) == 1
    out, err = capfd.readouterr()
    assert out == "" and "error" in err and "Traceback" not in err
    assert main(_argv(command, succeeding, work)) == 0
    out, err = capfd.readouterr()
    assert "error" not in err
    assert bool(out.strip()) == prints_data, (out, err)
    if not prints_data:
        assert "wrote " in err          # what it wrote is said, as a note


# command -> arguments whose result --json prints (commands whose result is a file or a script have none)
JSON_CASES = {
    "compile": [*TINY, "--clusters", "1", "--global-batch", "8", "-o", "{root}/c"],
    "plan": [*TINY, "--clusters", "4", "--global-batch", "16"],
    "run": ["{root}/prog"],
    "report": ["{root}/prog", "--simulate-top", "0", "--top", "1"],
    "train": [*TINY, "--steps", "1", "--no-reference"],
    "launch": ["{root}/prog", "--steps", "1"],
    "opt": [GOLDEN_IR, "-p", "cse,dce", "--stats"],
    "passes": [],
    "kernel": ["gemm", "64", "64", "64", "--run"],
    "asm": ["{root}/k.rasm", "--run", "--mode", "timing"],
}
NO_JSON = {"diagram": "writes an image", "calibrate": "writes a TOML profile", "completion": "prints a script"}


def test_every_command_is_listed_with_json_or_why_not():
    assert set(JSON_CASES) | set(NO_JSON) == _commands() and not set(JSON_CASES) & set(NO_JSON)


@pytest.mark.parametrize("command", sorted(JSON_CASES))
def test_json_output_is_one_document_with_sorted_keys(command, work, capfd):
    assert main([*_argv(command, JSON_CASES[command], work), "--json"]) == 0
    out = capfd.readouterr().out
    data = json.loads(out)
    assert out == json.dumps(data, indent=2, sort_keys=True) + "\n"
