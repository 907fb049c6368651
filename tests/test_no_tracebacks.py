"""Inputs that crashed ratc with a traceback are now errors that say what and where, exit 1."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ratc.cli.main import main
from ratc.errors import LocatedError
from ratc.frontend.presets import example_model
from ratc.ir import parse_module

ROOT = Path(__file__).resolve().parent.parent
LLAMA = example_model().read_text()


def _fails(argv, capsys) -> str:
    """stderr of a command that must exit 1 (usage errors leave through argparse's exit)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error:" in err, err
    return err


@pytest.mark.parametrize("general", [False, True], ids=["as-printed", "hand-laid-out"])
def test_regions_nested_thousands_deep_are_a_located_error_not_a_recursion_error(general):
    text = "module {\n" + "life.plan @p {\n" * 3000 + "}\n" * 3000 + "}\n"
    if general:
        text = text.replace("\n", " // note\n", 1)
    with pytest.raises(LocatedError, match=r"deep\.ir:102:1: error: regions nested more than 100 deep"):
        parse_module(text, "deep.ir")


def test_a_model_of_thousands_of_nested_sequentials_is_an_error_naming_the_file(tmp_path, capsys):
    path = tmp_path / "nested.py"
    path.write_text(
        "import torch\nfrom torch import nn\n"
        "PRESETS = {'deep': {'depth': 3000}}\n"
        "class M(nn.Module):\n"
        "    def __init__(self, depth):\n"
        "        super().__init__()\n"
        "        self.emb = nn.Embedding(16, 8)\n"
        "        inner = nn.Linear(8, 8)\n"
        "        for _ in range(depth):\n"
        "            inner = nn.Sequential(inner)\n"
        "        self.body, self.head = inner, nn.Linear(8, 16)\n"
        "    def forward(self, ids):\n"
        "        return self.head(self.body(self.emb(ids)))\n"
        "def build_model(depth):\n    return M(depth)\n"
        "def input_spec(depth):\n    return {'seq_len': 8, 'vocab': 16}\n")
    err = _fails(["compile", str(path), "--emit", "graph"], capsys)
    assert "nested.py" in err and "nested too deeply" in err


def test_deeply_nested_json_in_a_config_is_an_error_naming_it(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    err = _fails(["compile", "--hf-config", str(path), "--emit", "graph"], capsys)
    assert f"{path}: malformed config.json: arrays or objects nested too deeply" in err


def test_a_size_of_zero_in_a_model_is_an_error_naming_the_op_not_a_zero_division(tmp_path, capsys):
    path = tmp_path / "zero.py"
    path.write_text(LLAMA.replace("ffn=11008", "ffn=0"))
    assert "ffn=0" in path.read_text()
    err = _fails(["plan", str(path), "--preset", "llama2-7b", "--clusters", "8", "--global-batch", "64"], capsys)
    assert "zero.py" in err and "has no elements" in err and "intermediate_size = 0" in err


def test_a_default_preset_that_is_not_a_name_is_an_error_not_a_type_error(tmp_path, capsys):
    path = tmp_path / "preset.py"
    path.write_text(LLAMA.replace('DEFAULT_PRESET = "tiny"', "DEFAULT_PRESET = [1]"))
    err = _fails(["compile", str(path), "--emit", "graph"], capsys)
    assert "preset.py: DEFAULT_PRESET must be the name of a preset (a string), got [1]" in err


@pytest.mark.parametrize("kind", ["fifo", "directory", "link loop", "dangling link"])
def test_an_input_that_is_not_a_file_is_reported_as_what_it_is(tmp_path, capsys, kind):
    def make(path):
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "link loop":
            path.symlink_to(path)
        else:
            path.symlink_to(tmp_path / "gone")
        return path

    path, profile = make(tmp_path / "in.py"), make(tmp_path / "in.toml")
    expected = {"fifo": "is a FIFO (named pipe), not a file", "directory": "is a directory, not a file",
                "link loop": "a symbolic link loop", "dangling link": "which does not exist"}[kind]
    for argv in (["compile", str(path), "--emit", "graph"], ["opt", str(path)],
                 ["kernel", "gemm", "8", "8", "8", "--platform", str(profile)]):
        err = _fails(argv, capsys)
        assert expected in err and "no such file" not in err


def test_a_negative_memory_budget_is_a_range_error_not_a_missing_value(capsys):
    err = _fails(["compile", "--preset", "tiny", "--clusters", "8", "--memory-budget", "-5GB"], capsys)
    assert "--memory-budget must be a positive byte size, got '-5GB'" in err
    err = _fails(["plan", "--preset", "tiny", "--clusters", "8", "--global-batch", "8", "--memory-budget", "0GB"],
                 capsys)
    assert "must be a positive byte size" in err


def test_dash_values_attach_only_to_options_that_take_one(tmp_path, capsys):
    # '-o -' still means stdout, and a flag after a value-taking option is still a flag
    assert main(["kernel", "gemm", "8", "8", "8", "-o", "-"]) == 0
    assert ".kernel" in capsys.readouterr().out
    err = _fails(["compile", "--preset", "--clusters", "8"], capsys)
    assert "--clusters" in err


def test_a_model_raising_keyboard_interrupt_is_an_error_naming_it_not_an_interrupt(tmp_path, capsys):
    path = tmp_path / "ki.py"
    path.write_text("import torch\nraise KeyboardInterrupt\n")
    err = _fails(["compile", str(path), "--emit", "graph"], capsys)
    assert f"{path}:2 raised KeyboardInterrupt (no interrupt was received)" in err


def test_a_real_sigint_still_exits_130(tmp_path):
    path = tmp_path / "slow.py"
    path.write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\n")
    done = subprocess.run([sys.executable, "-m", "ratc", "compile", str(path), "--emit", "graph"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 130 and "ratc: interrupted" in done.stderr


def test_compile_into_the_current_directory_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for target in (".", "..", str(tmp_path)):
        err = _fails(["compile", "--preset", "tiny", "--clusters", "8", "--no-run", "-o", target], capsys)
        assert "is (or holds) the current directory; refusing to replace it" in err
    assert list(tmp_path.iterdir()) == []


def test_a_non_utf8_model_file_name_compiles_and_is_recorded_printably(tmp_path, capsys):
    path = tmp_path / os.fsdecode(b"m\xff.py")
    path.write_text(LLAMA)
    out = tmp_path / os.fsdecode(b"o\xff.ir")
    assert main(["compile", str(path), "--emit", "graph", "-o", str(out)]) == 0
    assert "m\ufffd.py --emit=graph" in out.read_text().splitlines()[0]


def test_an_ascii_locale_with_a_non_ascii_path_writes_utf8_files_and_refuses_ascii_stdout(tmp_path):
    path = tmp_path / "modèle.py"
    path.write_text(LLAMA)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"}

    def ratc(*words):
        return subprocess.run([sys.executable, "-m", "ratc", *words], capture_output=True, timeout=300,
                              cwd=tmp_path, env=env)

    out = tmp_path / "sortie-é.ir"
    done = ratc("compile", os.fsencode(path), "--emit", "graph", "-o", os.fsencode(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "modèle.py --emit=graph" in out.read_text(encoding="utf-8").splitlines()[0]
    # the same text to an ASCII stdout cannot be written: an error naming the input, no traceback
    done = ratc("compile", os.fsencode(path), "--emit", "graph")
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    assert b"mod\\xe8le.py: cannot encode '\\xe8' as ascii" in done.stderr


def test_odd_register_counts_are_refused_by_the_platform_loader_not_default_groups(tmp_path, capsys):
    from ratc.platform.loader import PROFILE_DIR

    path = tmp_path / "regs.toml"
    path.write_text((PROFILE_DIR / "mt3000.toml").read_text().replace("vector_registers = 64",
                                                                      "vector_registers = 5"))
    err = _fails(["kernel", "gemm", "64", "64", "64", "--platform", str(path)], capsys)
    assert "regs.toml: [vliw].vector_registers is 5" in err


def test_signal_handling_is_restored_after_main(capsys):
    before = signal.getsignal(signal.SIGINT)
    main(["kernel", "gemm", "8", "8", "8"])
    assert signal.getsignal(signal.SIGINT) is before


def test_a_program_whose_manifest_is_nested_thousands_deep_is_an_error_naming_the_manifest(tmp_path, capsys):
    program = tmp_path / "prog"
    assert main(["compile", "--preset", "tiny", "--clusters", "2", "--no-run", "-o", str(program)]) == 0
    capsys.readouterr()
    (program / "manifest.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    for command in ("run", "report"):
        err = _fails([command, str(program)], capsys)
        assert f"{program / 'manifest.json'}: unreadable manifest: arrays or objects nested too deeply" in err


@pytest.mark.parametrize("command", [
    ["kernel", "gemm", "8", "8", "8", "-o"],
    ["compile", "--preset", "tiny", "--emit", "graph", "-o"],
    ["plan", "--preset", "tiny", "--clusters", "8", "--global-batch", "8", "-o"],
])
def test_an_output_path_that_is_a_symlink_loop_is_an_error_not_a_runtime_error(tmp_path, capsys, command):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    err = _fails(command + [str(loop)], capsys)
    assert f"{loop}: a symbolic link loop" in err
    assert loop.is_symlink() and os.readlink(loop) == str(loop)      # left as it was


def test_an_hf_config_with_intermediate_size_zero_is_an_error_naming_the_size(tmp_path, capsys):
    pytest.importorskip("transformers")
    config = (ROOT / "examples" / "hf" / "llama.json").read_text()
    path = tmp_path / "zero.json"
    path.write_text(config.replace('"intermediate_size": 688', '"intermediate_size": 0'))
    assert '"intermediate_size": 0' in path.read_text()
    err = _fails(["compile", "--hf-config", str(path), "--emit", "graph"], capsys)
    # refused while the config is read, before transformers builds (and warns about) empty tensors
    assert "zero.json: malformed config.json: 'intermediate_size' must be a positive integer, got 0" in err
