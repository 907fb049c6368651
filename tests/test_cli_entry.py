"""The `ratc` command: its fast exit keeps all output and the exit code; documented commands parse."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratc.cli.main import main

GOLDEN = Path(__file__).parent / "golden"
RATC = [sys.executable, "-m", "ratc.cli.main"]
# Buffered stdout, as for a user's shell: with PYTHONUNBUFFERED nothing waits to be flushed.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def ratc(*args):
    return subprocess.run([*RATC, *args], capture_output=True, text=True, env=ENV)


def life_module(tmp_path) -> Path:
    """A golden scheduled program as an .ir file."""
    src = tmp_path / "program.ir"
    src.write_text((GOLDEN / "life" / "tiny_p2_d2_z2_fsr.all.expected").read_text())
    return src


def test_piped_output_is_complete(tmp_path, capsys):
    """Many small prints (still in the stdout buffer at exit) and one large one arrive whole."""
    for args in (["passes"], ["opt", str(life_module(tmp_path)), "-p", "verify"]):
        assert main(args) == 0
        expected = capsys.readouterr().out
        proc = ratc(*args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == expected
    assert len(expected) > 4 * 8192


def test_user_error_exits_1_with_one_message(tmp_path):
    proc = ratc("opt", str(tmp_path / "missing.ir"))
    assert proc.returncode == 1
    assert proc.stderr == f"ratc: error: {tmp_path / 'missing.ir'}: no such file\n"
    assert proc.stdout == ""


def test_usage_error_exits_1_with_usage_and_message():
    """argparse's errors exit 1 like every other user error (argparse alone would exit 2)."""
    proc = ratc("plan", "--preset", "tiny", "--clusters", "four", "--global-batch", "8")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("usage: ratc plan ")
    assert proc.stderr.endswith("ratc plan: error: argument --clusters: invalid int value: 'four'\n")
    proc = ratc("plan", "--preset", "tiny", "--clusters", "4", "--global-batch", "8", "--no-such-flag")
    # an unknown option of a command is reported with that command's usage
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr.startswith("usage: ratc plan ")
    assert proc.stderr.endswith("ratc plan: error: unrecognized arguments: --no-such-flag\n")


@pytest.mark.parametrize("argv, message", [
    (["compile", "examples/llama.py", "--preset", "tiny", "--clusters", "4", "--global-batch", "0"],
     "--global-batch must be at least 1, got 0"),
    (["compile", "examples/llama.py", "--preset", "tiny", "--clusters", "0"], "--clusters must be at least 1, got 0"),
    (["kernel", "attention-backward", "4", "64", "64", "--kv-heads", "0"],
     "heads must be a positive multiple of kv_heads"),
])
def test_zero_is_refused_not_taken_for_the_default(argv, message, capsys):
    """A 0 the user typed is an error, not a missing value replaced by the default."""
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_written_files_survive_the_exit(tmp_path):
    src = life_module(tmp_path)
    out = tmp_path / "o.ir"
    proc = ratc("opt", str(src), "-p", "verify", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert main(["opt", str(src), "-p", "verify", "-o", str(tmp_path / "in_process.ir")]) == 0
    assert out.read_text() == (tmp_path / "in_process.ir").read_text()


def test_help_examples_are_valid_commands():
    """Every `ratc ...` line in a subcommand's help epilog parses, names files that exist,
    and (for compile) passes the checks the parser cannot make."""
    import argparse
    import shlex

    from ratc.cli.compile import check_arguments
    from ratc.cli.main import build_parser

    root = Path(__file__).parents[1]
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    examples = [(name, line.strip()) for name, p in sub.choices.items()
                for line in (p.epilog or "").splitlines() if line.strip().startswith("ratc ")]
    assert {name for name, _ in examples} >= {"compile", "run", "report", "opt", "diagram"}
    for name, line in examples:
        argv = shlex.split(line)[1:]
        args = parser.parse_args(argv)
        for word in argv:
            if word.endswith((".py", ".json")) and "/" in word:
                assert (root / word).is_file(), line
        if name == "compile":
            check_arguments(args)


def test_documented_commands_parse():
    """Every `ratc ...` command in the shell blocks of the README and docs/ parses and passes
    compile's checks."""
    import re
    import shlex

    from ratc.cli.compile import check_arguments
    from ratc.cli.main import build_parser

    root = Path(__file__).parents[1]
    parser = build_parser()
    commands = [part.strip() for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
                for lang, block in re.findall(r"```(\w*)\n(.*?)```", doc.read_text(), re.S) if lang in ("", "sh", "bash")
                for line in block.replace("\\\n", " ").splitlines() for part in line.split("  #")[0].split("&&")
                if part.strip().startswith("ratc ")]
    assert len(commands) >= 45
    for command in commands:
        argv = shlex.split(command.split(" 2>")[0].split(" | ")[0])[1:]
        args = parser.parse_args(argv)
        if argv[0] == "compile":
            check_arguments(args)


def test_documented_benchmark_scripts_exist_with_their_flags():
    """Every `python benchmarks/....py --flag` the README and docs/ give names a script that
    defines those flags (in its own source or a helper beside it)."""
    import re

    root = Path(__file__).parents[1]
    uses = [(doc.name, m[1], re.findall(r"--[\w-]+", m[2]))
            for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
            for m in re.finditer(r"python (benchmarks/[\w/]+\.py)([^`\n|]*)", doc.read_text())]
    assert len(uses) >= 40
    for doc, path, flags in uses:
        script = root / path
        assert script.is_file(), (doc, path)
        source = "".join(p.read_text() for p in sorted(script.parent.glob("*.py")))
        for flag in flags:
            assert f'"{flag}"' in source or f"'{flag}'" in source, (doc, path, flag)
