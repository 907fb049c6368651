"""What the fuzz suite (tests/fuzz_targets.py) found in the parsers and loaders, one test each."""

import hashlib
import json
import re
import shutil

import pytest

from ratc.errors import RatcError
from ratc.frontend.hf import load_hf_config
from ratc.platform import PlatformError, parse_platform
from ratc.platform.loader import PROFILE_DIR
from ratc.program import ProgramError, load_program
from ratc.program_check import open_program, read_kernel_table

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def tiny_program(tmp_path_factory):
    """A compiled tiny program (never edited: tests copy it)."""
    import fuzz_targets

    path = tmp_path_factory.mktemp("tiny") / "prog"
    fuzz_targets.compile_tiny_program(path)
    return path


def _copy_and_rehash(src, dest, edit):
    """A copy of the program with `edit(dest)` applied and its manifest made to match, as a tamperer would."""
    shutil.copytree(src, dest)
    edit(dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["files"] = {p.relative_to(dest).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                         for p in sorted(dest.rglob("*")) if p.is_file() and p.name != "manifest.json"}
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_a_deeply_nested_manifest_is_refused_naming_it(tmp_path):
    (tmp_path / "manifest.json").write_text('{"format": "ratc-program/1", "meta": ' + DEEP + "}")
    with pytest.raises(ProgramError, match=r"manifest\.json: unreadable manifest: .*nested too deeply"):
        load_program(tmp_path)


def test_a_deeply_nested_kernels_json_is_refused_naming_it():
    with pytest.raises(ProgramError, match=r"prog/kernels\.json: malformed kernel table: .*nested too deeply"):
        read_kernel_table('{"kernels": ' + DEEP + "}", "prog/kernels.json")


def test_a_kernel_time_past_any_float_is_refused_naming_the_table(tiny_program):
    table = json.loads((tiny_program / "kernels.json").read_text())
    table["kernels"][0]["seconds"] = 10 ** 400
    with pytest.raises(ProgramError, match=r"prog/kernels\.json: .*seconds"):
        read_kernel_table(json.dumps(table), "prog/kernels.json")

def test_a_deeply_nested_hf_config_is_refused_naming_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "x": ' + DEEP + "}")
    with pytest.raises(RatcError, match=r"config\.json: malformed config\.json: .*nested too deeply"):
        load_hf_config(path)


def test_deeply_nested_arrays_in_a_platform_profile_are_refused_naming_it():
    text = (PROFILE_DIR / "mt3000.toml").read_text().replace('algorithm = "ring"', "algorithm = " + "[" * 5000 + "]" * 5000)
    with pytest.raises(PlatformError, match=r"fuzz\.toml: invalid TOML: .*nested too deeply"):
        parse_platform(text, "fuzz.toml")


def test_a_program_ir_file_that_is_not_utf8_is_refused_naming_it(tiny_program, tmp_path):
    def damage(prog):
        data = bytearray((prog / "model.ir").read_bytes())
        data[100] = 0xB0
        (prog / "model.ir").write_bytes(bytes(data))

    prog = _copy_and_rehash(tiny_program, tmp_path / "prog", damage)
    with pytest.raises(ProgramError, match=r"model\.ir: not UTF-8 text \(byte 100\)"):
        load_program(prog).text("model.ir")


def test_a_program_graph_ir_without_a_required_attribute_is_refused_by_the_verifier(tiny_program, tmp_path):
    """`ratc run` read the model's graph IR unverified, and a layer without `repeat` was a KeyError."""
    def damage(prog):
        text = (prog / "model.ir").read_text()
        (prog / "model.ir").write_text(re.sub(r"repeat = \d+, ", "", text, count=1))

    prog = _copy_and_rehash(tiny_program, tmp_path / "prog", damage)
    with pytest.raises(RatcError, match=r"model\.ir:\d+:\d+: error: 'graph.layer' requires attribute 'repeat'"):
        open_program(prog)


@pytest.mark.parametrize("name", [".", "./model.ir", "kernels/", "kernels//x.rasm", "model\x00.ir"])
def test_a_manifest_file_name_that_is_not_a_plain_relative_path_is_refused(tiny_program, tmp_path, name):
    # "." named the directory itself (opened, then read as a file); a NUL reached os.lstat
    prog = tmp_path / "prog"
    shutil.copytree(tiny_program, prog)
    manifest = json.loads((prog / "manifest.json").read_text())
    manifest["files"][name] = "0" * 64
    (prog / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ProgramError, match="is not a plain relative path inside the program directory"):
        load_program(prog)

def test_a_manifest_listing_a_file_name_too_long_for_the_system_is_refused_naming_it(tiny_program, tmp_path):
    prog = tmp_path / "prog"
    shutil.copytree(tiny_program, prog)
    manifest = json.loads((prog / "manifest.json").read_text())
    manifest["files"]["kernels/" + "x" * 5000 + ".rasm"] = "0" * 64
    (prog / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ProgramError, match=r"kernels/xxx+\.rasm: cannot read it: File name too long"):
        load_program(prog)


def test_a_platform_integer_past_any_float_is_refused_as_not_finite():
    text = (PROFILE_DIR / "mt3000.toml").read_text()
    text = re.sub(r"branch_penalty = \d+", "branch_penalty = " + "9" * 400, text)
    with pytest.raises(PlatformError, match=r"fuzz\.toml: \[vliw\]\.branch_penalty: must be a finite number"):
        parse_platform(text, "fuzz.toml")


@pytest.mark.parametrize("layout", ["one op a line", "all on one line"])
def test_regions_nested_past_the_limit_are_refused_with_a_located_error(layout):
    """The parser took 2 000 nested regions, and the verifier then died of a RecursionError."""
    from ratc.ir import parse_module
    from ratc.ir.parser import MAX_REGION_DEPTH

    depth = 2000
    sep = "\n" if layout == "one op a line" else " "
    text = sep.join(["module @m {"] + [f"test.func @f{i} {{" for i in range(depth)] + ["}"] * (depth + 1)) + "\n"
    line = MAX_REGION_DEPTH + 2 if layout == "one op a line" else 1
    with pytest.raises(RatcError, match=rf"deep\.ir:{line}:\d+: error: regions nested more than {MAX_REGION_DEPTH} deep"):
        parse_module(text, "deep.ir")
    shallow = sep.join(["module @m {"] + [f"test.func @f{i} {{" for i in range(MAX_REGION_DEPTH)]
                       + ["}"] * (MAX_REGION_DEPTH + 1)) + "\n"
    # what the limit is for: the deepest module accepted verifies and prints
    from ratc.ir import print_module, verify

    module = parse_module(shallow, "shallow.ir")
    verify(module)
    assert print_module(module).count("test.func") == MAX_REGION_DEPTH


def test_an_hf_layer_count_past_the_limit_is_refused_before_transformers_builds_per_layer_lists(tmp_path):
    """Qwen2's config class builds a list per layer as it is constructed: 2**64 + 1 layers never returned."""
    from ratc.frontend.hf import check_hf_config

    config = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2 ** 64 + 1, "vocab_size": 256}
    with pytest.raises(RatcError, match=r"cfg\.json: num_hidden_layers must be 1\.\.4096, got 18446744073709551617"):
        check_hf_config(config, "cfg.json")


@pytest.mark.parametrize("key, value", [("vocab_size", -2), ("hidden_size", 0), ("intermediate_size", 0)])
def test_an_hf_size_that_is_not_positive_is_refused_naming_it(key, value):
    from ratc.frontend.hf import check_hf_config

    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_hidden_layers": 2, "vocab_size": 256, key: value}
    with pytest.raises(RatcError, match=rf"cfg\.json: malformed config\.json: '{key}' must be a positive integer"):
        check_hf_config(config, "cfg.json")
