"""What a shell user expects of ratc: --version, completion, no colour codes, --help pointing to the glossary."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ratc.cli.completion import bash_script, zsh_script
from ratc.cli.main import build_parser, main

ROOT = Path(__file__).parents[1]


def test_version_names_ratc_torch_and_python(capsys):
    from importlib import metadata

    import ratc

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out == (f"ratc {ratc.__version__} (torch {metadata.version('torch')}, "
                   f"Python {sys.version.split()[0]})\n")


def test_help_points_to_the_glossary(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "docs/glossary.md" in capsys.readouterr().out
    assert (ROOT / "docs" / "glossary.md").is_file()


def _bash_complete(words: list[str]) -> list[str]:
    """What the generated bash completion offers for the last of `words` (as bash would call it)."""
    script = bash_script(build_parser())
    array = " ".join("'" + w + "'" for w in words)
    program = f'{script}\nCOMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; _ratc; printf "%s\\n" "${{COMPREPLY[@]}}"'
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True, cwd=ROOT)
    return out.stdout.split()


@pytest.mark.parametrize("words, offered", [
    (["ratc", "dia"], ["diagram"]),
    (["ratc", "--traceback", "com"], ["compile", "completion"]),
    (["ratc", "plan", "--ex"], ["--explain", "--exec-profile"]),
    (["ratc", "diagram", "--policy", ""], ["standard", "fsr"]),
    (["ratc", "completion", ""], ["bash", "zsh"]),
    (["ratc", "kernel", "attention-backward", "--mode", "t"], ["timing"]),
    (["ratc", "plan", "--hf-m"], ["--hf-model"]),
])
def test_bash_completion_offers_commands_options_and_choices(words, offered):
    assert sorted(_bash_complete(words)) == sorted(offered)


def test_bash_completion_of_a_file_argument_offers_files():
    assert "README.md" in _bash_complete(["ratc", "opt", "READ"])


def test_zsh_completion_is_valid_zsh_listing_every_command_and_option():
    parser = build_parser()
    script = zsh_script(parser)
    assert script.startswith("#compdef ratc\n")
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    for name, sub in commands.items():
        assert f"\n        {name}) _arguments" in script
        for action in sub._actions:
            for flag in action.option_strings:
                assert f"'{flag}[" in script or f"'*{flag}[" in script, (name, flag)
    if shutil.which("zsh"):
        subprocess.run(["zsh", "-n"], input=script, text=True, check=True)


def test_completion_scripts_are_deterministic(capsys):
    for shell in ("bash", "zsh"):
        assert main(["completion", shell]) == 0
        first = capsys.readouterr().out
        assert main(["completion", shell]) == 0
        assert capsys.readouterr().out == first


# An SGR escape written in source (\033[, \x1b[, \u001b[) or a colour library: ratc writes no
# colour, so NO_COLOR (https://no-color.org) holds by construction; this keeps it that way.
COLOUR = re.compile(r"\\(033|x1b|u001b)\[|\bimport (rich|colorama|termcolor)\b|\bfrom (rich|colorama|termcolor)\b"
                    r"|tqdm\([^)]*\bcolour=")


def test_no_module_writes_terminal_colour_so_no_color_holds():
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "ratc").rglob("*.py"))
                 if COLOUR.search(path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_colour_check_finds_an_escape_sequence():
    assert COLOUR.search('print("\\033[31merror\\033[0m")') and COLOUR.search("from rich import print")
    assert not COLOUR.search('print("error")')
