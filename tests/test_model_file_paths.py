"""A model file's code can neither move ratc's outputs (by changing directory) nor write into
its stdout (by printing): paths are made absolute first, prints go to stderr."""

import os
import sys
from pathlib import Path

import pytest

from ratc.cli.main import main
from ratc.ir import parse_module

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama.py"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory, and a directory 'elsewhere' model files change into."""
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("RATC_CACHE_DIR", "off")
    (tmp_path / "llama_base.py").write_text(EXAMPLE.read_text())
    monkeypatch.delitem(sys.modules, "llama_base", raising=False)
    yield tmp_path
    sys.modules.pop("llama_base", None)


def _model(root: Path, body: str) -> str:
    """A model file re-exporting the example's protocol, plus `body` at import."""
    path = root / "model.py"
    path.write_text("import os\nfrom llama_base import PRESETS, DEFAULT_PRESET, DEFAULT_SEQ_LEN, input_spec  # noqa\n"
                    "from llama_base import build_model as _build\n" + body)
    return str(path)


def test_a_model_changing_directory_while_imported_does_not_move_the_output(workdir, capsys):
    model = _model(workdir, f"os.chdir({str(workdir / 'elsewhere')!r})\nbuild_model = _build\n")
    assert main(["compile", model, "--preset", "tiny", "--emit=graph", "-o", "graph.ir"]) == 0, \
        capsys.readouterr().err
    assert (workdir / "work" / "graph.ir").is_file()
    assert not (workdir / "elsewhere" / "graph.ir").exists()
    assert os.getcwd() == str(workdir / "work")        # and the directory change is undone


def test_a_model_changing_directory_in_build_model_leaves_the_default_output_dir_in_place(workdir, capsys):
    model = _model(workdir, "def build_model(**config):\n"
                            f"    os.chdir({str(workdir / 'elsewhere')!r})\n"
                            "    return _build(**config)\n")
    assert main(["compile", model, "--preset", "tiny", "--clusters", "4", "--global-batch", "8",
                 "--no-run"]) == 0, capsys.readouterr().err
    assert (workdir / "work" / "out" / "tiny" / "manifest.json").is_file()
    assert not (workdir / "elsewhere" / "out").exists()


def test_a_relative_cache_dir_stays_where_the_command_started(workdir, monkeypatch, capsys):
    monkeypatch.setenv("RATC_CACHE_DIR", "cache")
    model = _model(workdir, f"os.chdir({str(workdir / 'elsewhere')!r})\nbuild_model = _build\n")
    assert main(["compile", model, "--preset", "tiny", "--emit=graph", "-o", "graph.ir"]) == 0
    assert list((workdir / "work" / "cache" / "traces").rglob("*.json"))
    assert not (workdir / "elsewhere" / "cache").exists()


def test_what_a_model_prints_while_traced_goes_to_stderr_not_into_the_emitted_graph(workdir, capsys):
    model = _model(workdir, "print('hello from import')\n"
                            "class _Loud(__import__('torch').nn.Module):\n"
                            "    def __init__(self, inner):\n"
                            "        super().__init__()\n"
                            "        self.inner = inner\n"
                            "        self.layers = inner.layers\n"
                            "    def forward(self, input_ids, labels):\n"
                            "        print('hello from forward')\n"
                            "        return self.inner(input_ids, labels)\n"
                            "def build_model(**config):\n"
                            "    print('hello from build_model')\n"
                            "    return _Loud(_build(**config))\n")
    assert main(["compile", model, "--preset", "tiny", "--emit=graph"]) == 0
    out, err = capsys.readouterr()
    assert "hello" not in out
    parse_module(out, "<stdout>")          # the whole stdout is the graph IR
    for where in ("import", "build_model", "forward"):
        assert f"hello from {where}" in err
