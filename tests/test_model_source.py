"""One way to name a model in every command: a model file, a bundled preset, or --hf-config."""

import json

import pytest

from ratc.cli.main import main

EXAMPLE = "examples/llama.py"
HF = "examples/hf/qwen2.json"
PLAN = ["--clusters", "4", "--global-batch", "16", "--json"]


def out_of(capsys, argv) -> str:
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_a_preset_alone_is_the_bundled_example_with_that_preset(capsys):
    """`--preset X` and `examples/llama.py --preset X` are the same model, sequence length included."""
    for preset, clusters in (("tiny", "4"), ("llama2-7b", "8")):
        argv = ["--preset", preset, "--clusters", clusters, "--global-batch", "16", "--json"]
        alone = out_of(capsys, ["plan", *argv])
        assert alone == out_of(capsys, ["plan", EXAMPLE, *argv])
    assert json.loads(alone)["model"] == "llama2-7b"
    assert out_of(capsys, ["compile", "--preset", "tiny", "--emit=graph"]).splitlines()[1:] == \
        out_of(capsys, ["compile", EXAMPLE, "--preset", "tiny", "--emit=graph"]).splitlines()[1:]


def test_every_command_reads_an_hf_config(capsys, tmp_path):
    """plan, report and diagram trace --hf-config as compile does: the same model for the same seq-len."""
    graph = out_of(capsys, ["compile", "--hf-config", HF, "--seq-len", "256", "--emit=graph"])
    name = next(line for line in graph.splitlines() if line.startswith("module @")).split("@")[1].split()[0]
    plan = json.loads(out_of(capsys, ["plan", "--hf-config", HF, "--seq-len", "256", *PLAN]))
    assert plan["model"] == name and plan["top"]
    assert main(["diagram", "--pp", "2", "--microbatches", "4", "--hf-config", HF, "--seq-len", "256",
                 "-o", str(tmp_path / "d.svg")]) == 0
    assert (tmp_path / "d.svg").read_text().lstrip().startswith("<?xml")
    assert main(["report", str(tmp_path / "r"), "--hf-config", HF, "--seq-len", "256", "--clusters", "4",
                 "--global-batch", "16", "--simulate-top", "1"]) == 0
    assert name in (tmp_path / "r" / "report.html").read_text()


NO_MODEL = ("no model: give a model file, --preset NAME (the bundled examples/llama.py), --hf-config CONFIG_JSON "
            "or --hf-model ORG/NAME")


@pytest.mark.parametrize("command, message", [
    (["plan", *PLAN], NO_MODEL),
    (["compile", "--clusters", "4"], NO_MODEL),
    (["report", "out-nowhere", "--clusters", "4", "--global-batch", "16"],
     "give a model (--preset NAME, a model file, --hf-config or --hf-model) with --clusters N and --global-batch G"),
])
def test_no_model_says_the_three_ways_to_name_one(command, message, capsys):
    assert main(command) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    ([EXAMPLE, "--hf-config", HF], "give either a model file or --hf-config, not both"),
    (["--hf-config", HF, "--preset", "tiny"], "--preset applies to model files, not to --hf-config"),
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["no/such/model.py"], "no/such/model.py: no such file"),
    (["--hf-config", "no/such/config.json"], "no/such/config.json: no such file"),
])
@pytest.mark.parametrize("command", [["plan", *PLAN], ["diagram", "--pp", "2", "--microbatches", "4", "-o", "x.svg"]])
def test_bad_sources_are_refused_alike(command, argv, message, capsys):
    assert main([*command, *argv]) == 1
    assert message in capsys.readouterr().err


def test_diagram_without_a_preset_takes_the_model_files_default(capsys, tmp_path):
    """A model file's own DEFAULT_PRESET, not the bundled example's default, when --preset is omitted."""
    argv = ["diagram", "--pp", "2", "--microbatches", "2", "-o"]
    assert main([*argv, str(tmp_path / "file.svg"), EXAMPLE]) == 0
    assert main([*argv, str(tmp_path / "tiny.svg"), "--preset", "tiny"]) == 0
    assert (tmp_path / "file.svg").read_bytes() == (tmp_path / "tiny.svg").read_bytes()


def test_a_model_file_imports_the_modules_beside_it(capsys, tmp_path, monkeypatch):
    """As when the file runs as a script: its folder is first on sys.path while it loads."""
    import sys
    from pathlib import Path
    (tmp_path / "sibling_base.py").write_text(Path(EXAMPLE).read_text())
    (tmp_path / "m.py").write_text("from sibling_base import PRESETS, DEFAULT_PRESET, DEFAULT_SEQ_LEN, "
                                   "build_model, input_spec  # noqa\n")
    monkeypatch.delitem(sys.modules, "sibling_base", raising=False)
    before = sys.path[:]
    assert json.loads(out_of(capsys, ["plan", str(tmp_path / "m.py"), "--preset", "tiny", *PLAN]))["model"] == "tiny"
    assert sys.path == before           # (only while it loads)
    sys.modules.pop("sibling_base", None)
