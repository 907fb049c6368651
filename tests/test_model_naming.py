"""Naming a model: Hugging Face ids from the local cache, train's sources, and no silent defaults."""

import shutil

import pytest

from ratc.cli.main import main

HF = "examples/hf/qwen2.json"
MODEL_ID = "acme/qwen-mini"


def fake_hub(root, model_id=MODEL_ID, commit="0123abcd", ref=True):
    """A Hugging Face hub cache under `root` holding `model_id`'s config.json (as huggingface_hub lays it out)."""
    repo = root / "hub" / ("models--" + model_id.replace("/", "--"))
    (repo / "snapshots" / commit).mkdir(parents=True)
    shutil.copy(HF, repo / "snapshots" / commit / "config.json")
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit + "\n")
    return repo


def graph_of(capsys, argv) -> list[str]:
    assert main(["compile", *argv, "--seq-len", "128", "--emit=graph"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()[1:]      # (line 0 is the reproducing command)


def test_an_hf_model_id_traces_the_config_json_of_the_local_cache(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    fake_hub(tmp_path)
    assert graph_of(capsys, ["--hf-model", MODEL_ID]) == graph_of(capsys, ["--hf-config", HF])


def test_an_hf_model_id_resolves_through_hf_hub_cache_and_a_lone_snapshot(capsys, tmp_path, monkeypatch):
    """$HF_HUB_CACHE wins over $HF_HOME; a copied cache without refs/ uses its only snapshot."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    fake_hub(tmp_path, ref=False)
    assert graph_of(capsys, ["--hf-model", MODEL_ID]) == graph_of(capsys, ["--hf-config", HF])


@pytest.mark.parametrize("model_id, message", [
    ("acme/absent", "--hf-model acme/absent: not in the local Hugging Face cache"),
    ("acme/qwen-mini@v2", "no cached revision 'v2'"),
    ("../etc", "not a Hugging Face model id"),
])
def test_an_hf_model_id_not_in_the_cache_is_refused_saying_how_to_fetch_it(model_id, message, capsys, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    fake_hub(tmp_path)
    assert main(["plan", "--hf-model", model_id, "--clusters", "4", "--global-batch", "16"]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    if "not in the local" in message:
        assert "huggingface-cli download acme/absent config.json" in err


def test_train_takes_a_preset_alone_and_says_nothing_it_did_not_pick(capsys):
    assert main(["train", "--preset", "tiny", "--steps", "1", "--no-reference"]) == 0
    captured = capsys.readouterr()
    assert "[tiny]" in captured.out and "using" not in captured.err


def test_train_names_the_preset_it_picks_from_a_model_file(capsys):
    assert main(["train", "examples/llama.py", "--steps", "1", "--no-reference"]) == 0
    assert "ratc train: using examples/llama.py's default preset 'tiny'" in capsys.readouterr().err


def test_train_refuses_an_hf_config_saying_what_takes_it(capsys):
    assert main(["train", "--hf-config", HF, "--steps", "1"]) == 1
    err = capsys.readouterr().err
    assert "ratc train runs model files only" in err and "`ratc compile`/`plan` take this config" in err


def test_diagram_without_a_model_names_the_one_it_draws(capsys, tmp_path):
    assert main(["diagram", "--pp", "2", "--microbatches", "2", "-o", str(tmp_path / "d.svg")]) == 0
    assert "ratc diagram: using the bundled examples/llama.py --preset llama2-7b (no model named" in \
        capsys.readouterr().err


def test_an_hf_config_without_seq_len_says_the_length_it_assumes(capsys):
    assert main(["compile", "--hf-config", HF, "--emit=graph"]) == 0
    assert "ratc compile: using 2048-token sequences" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["compile", "plan", "report", "diagram", "train"])
def test_every_model_command_takes_the_same_model_arguments(command):
    from ratc.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[command]
    flags = {s for a in sub._actions for s in a.option_strings}
    positionals = {a.dest for a in sub._actions if not a.option_strings}
    assert {"--preset", "--hf-config", "--hf-model"} <= flags and "model" in positionals


def test_diagram_draws_an_hf_model_id_from_the_cache(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    fake_hub(tmp_path)
    argv = ["diagram", "--pp", "2", "--microbatches", "2", "--seq-len", "128", "-o"]
    assert main([*argv, str(tmp_path / "id.svg"), "--hf-model", MODEL_ID]) == 0
    assert main([*argv, str(tmp_path / "file.svg"), "--hf-config", HF]) == 0
    assert (tmp_path / "id.svg").read_bytes() == (tmp_path / "file.svg").read_bytes()
