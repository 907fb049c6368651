"""Bad model files and configs: one clear message naming the file and the cause, exit code 1."""

import textwrap

import pytest

from ratc.cli.main import main
from ratc.frontend.hf import MAX_LAYERS

PROTOCOL = """
import torch
from torch import nn
import torch.nn.functional as F

PRESETS = {"small": dict(vocab=32, hidden=16)}

class Block(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.fc = nn.Linear(h, h)
    def forward(self, x):
        return x + self.fc(x)

class Model(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList([Block(hidden), Block(hidden)])
        self.head = nn.Linear(hidden, vocab)
    def forward(self, input_ids, labels):
        x = self.emb(input_ids)
        {body}
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(self.head(x).flatten(0, 1), labels.flatten())

def build_model(seq_len=8, **config):
    {build}
    return Model(**config)

def input_spec(**config):
    return dict(seq_len=config.get("seq_len", 8), vocab=config["vocab"])
"""


def write_model(tmp_path, body="pass", build="pass", extra=""):
    path = tmp_path / "model.py"
    path.write_text(PROTOCOL.replace("{body}", body).replace("{build}", build) + textwrap.dedent(extra))
    return str(path)


def run(capsys, *argv):
    rc = main(["compile", *argv, "--emit=graph"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def test_valid_model_file_compiles(tmp_path, capsys):
    path = write_model(tmp_path)
    rc = main(["compile", path, "--seq-len", "8", "--emit=graph", "-o", str(tmp_path / "out.ir")])
    assert rc == 0
    text = (tmp_path / "out.ir").read_text()
    assert "graph.layer @decoder" in text and "repeat = 2" in text


def test_missing_protocol(tmp_path, capsys):
    path = tmp_path / "plain.py"
    path.write_text("import torch\nmodel = torch.nn.Linear(2, 2)\n")
    rc, err = run(capsys, str(path))
    assert rc == 1
    assert str(path) in err and "missing PRESETS, build_model, input_spec" in err


def test_file_that_raises_on_import(tmp_path, capsys):
    path = tmp_path / "broken.py"
    path.write_text("PRESETS = {}\nx = 1 / 0\n")
    rc, err = run(capsys, str(path))
    assert rc == 1
    assert str(path) in err and "ZeroDivisionError" in err and "line 2" in err


@pytest.mark.parametrize("source", [
    "PRESETS = {}\ndef build_model(:\n    pass\n",
    "PRESETS = {}\nclass M:\n    def f(self):\n  return 1\n",
    "PRESETS = {\n",
])
def test_syntax_error_points_at_line_and_column(tmp_path, capsys, source):
    """A model file Python cannot parse is reported like any bad text input: file:line:col,
    the line and a caret, where Python's own compiler places them (the oracle)."""
    path = tmp_path / "broken.py"
    path.write_text(source)
    with pytest.raises(SyntaxError) as want:
        compile(source, str(path), "exec")
    rc, err = run(capsys, str(path))
    assert rc == 1
    line = source.splitlines()[want.value.lineno - 1]
    assert err == (f"{path}:{want.value.lineno}:{want.value.offset}: error: {want.type.__name__}: "
                   f"{want.value.msg}\n{line}\n{' ' * (want.value.offset - 1)}^\n")


def test_a_script_parsing_its_arguments_at_import_sees_none_of_ratcs(tmp_path, capsys):
    """A training script reused as a model file: its module-level argparse gets its defaults."""
    path = write_model(tmp_path, extra="""
        import argparse
        ARGS = argparse.ArgumentParser().parse_args()
    """)
    rc, err = run(capsys, path, "--seq-len", "8")
    assert rc == 0, err


@pytest.mark.parametrize("edit, message", [
    (dict(extra="import sys\nsys.exit(3)\n"), "exited with status 3 while loading (line "),
    (dict(build="raise SystemExit(7)"), "build_model exited with status 7 (line "),
])
def test_a_model_file_that_exits_is_an_error_not_ratcs_exit_status(tmp_path, capsys, edit, message):
    rc, err = run(capsys, write_model(tmp_path, **edit), "--seq-len", "8")
    assert rc == 1 and message in err and "must not call sys.exit" in err


@pytest.mark.parametrize("replace, message", [
    (('PRESETS = {"small":', 'PRESETS = {1:'), "PRESETS must be a dict of name (a string)"),
    (("return dict(seq_len=", "return dict(batch='x', seq_len="), "input_spec must return a dict with integers"),
    (("return dict(seq_len=", "return dict(batch=0, seq_len="), "optionally 'batch' (>= 1)"),
    (("return F.cross_entropy(self.head(x).flatten(0, 1), labels.flatten())", "return self.head(x)"),
     "forward(input_ids, labels) must return the scalar training loss, got a tensor of shape (1, 8, 32)"),
])
def test_protocol_values_are_checked(tmp_path, capsys, replace, message):
    path = write_model(tmp_path)
    text = open(path).read()
    assert replace[0] in text
    open(path, "w").write(text.replace(*replace))
    rc, err = run(capsys, path, "--seq-len", "8")
    assert rc == 1 and message in err, err


def test_build_model_that_raises(tmp_path, capsys):
    path = write_model(tmp_path, build="raise ValueError('hidden must be even')")
    rc, err = run(capsys, path)
    assert rc == 1
    assert path in err and "build_model raised ValueError" in err and "hidden must be even" in err


def test_untraceable_model(tmp_path, capsys):
    # control flow on a tensor's value: neither symbolic_trace nor export on meta can follow it
    path = write_model(tmp_path, body="if x.sum() > 0:\n            x = x * 2")
    rc, err = run(capsys, path, "--seq-len", "8")
    assert rc == 1
    assert path in err and "cannot trace the model" in err
    assert "symbolic_trace" in err and "torch.export" in err
    assert "def forward" not in err          # export's partial-graph dump is kept quiet


def test_unknown_preset(tmp_path, capsys):
    rc, err = run(capsys, write_model(tmp_path), "--preset", "huge")
    assert rc == 1 and "unknown preset 'huge'" in err and "small" in err


def test_no_such_model_file(tmp_path, capsys):
    rc, err = run(capsys, str(tmp_path / "nope.py"))
    assert rc == 1 and "nope.py: no such file" in err


@pytest.mark.parametrize("content, cause", [
    ("{not json", "malformed config.json"),
    ("[1, 2]", "expected a JSON object"),
    ('{"hidden_size": 64}', "missing string field 'model_type'"),
    ('{"model_type": "no-such-arch"}', "cannot read config"),
    ('{"model_type": "llama", "hidden_size": 30, "num_attention_heads": 4}', "not a multiple"),
    # what sizes the model comes from the file, never from transformers' defaults
    ('{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 64}',
     "no 'hidden_size' (transformers would assume 4096)"),
    ('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1000000000, "num_attention_heads": 4, '
     '"vocab_size": 64, "intermediate_size": 128}', f"num_hidden_layers must be 1..{MAX_LAYERS}"),
])
def test_malformed_hf_config(tmp_path, capsys, content, cause):
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(content)
    rc, err = run(capsys, "--hf-config", str(path))
    assert rc == 1
    assert str(path) in err and cause in err


def test_model_and_hf_config_are_exclusive(tmp_path, capsys):
    rc, err = run(capsys, write_model(tmp_path), "--hf-config", "x.json")
    assert rc == 1 and "not both" in err
