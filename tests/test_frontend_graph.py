"""The graph dialect: printing, parsing back, verifying, and `ratc compile --emit=graph`."""

import dataclasses
from pathlib import Path

import pytest

import ratc.ir.dialects.graph  # noqa: F401  (registers the dialect)
from ratc.cli.main import main
from ratc.frontend import trace_preset
from ratc.ir import VerifyError, parse_module, print_module, verify
from ratc.ir.core import Operation
from ratc.frontend.graph_ir import module_from_profile, profile_from_module

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "llama.py")


@pytest.mark.parametrize("name", ["tiny", "baichuan2-13b"])
def test_round_trip(name):
    profile = trace_preset(name, 128)
    text = print_module(module_from_profile(profile))
    module = parse_module(text)
    verify(module)
    assert print_module(module) == text
    assert profile_from_module(module) == dataclasses.replace(profile, meta={})


def test_compile_emits_the_preset_graph(tmp_path):
    out = tmp_path / "tiny.ir"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--seq-len", "64", "--emit=graph", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("// ratc compile")
    module = parse_module(text, str(out))
    verify(module)
    assert profile_from_module(module) == dataclasses.replace(trace_preset("tiny", 64), meta={})
    second = tmp_path / "again.ir"
    main(["compile", EXAMPLE, "--preset", "tiny", "--seq-len", "64", "--emit=graph", "-o", str(second)])
    assert second.read_text() == text          # deterministic


def test_graph_shows_layers_ops_and_params():
    text = print_module(module_from_profile(trace_preset("llama2-7b")))
    assert "graph.layer @decoder" in text and "repeat = 32" in text
    assert "graph.attention(" in text and "heads = 32, kv_heads = 32, name = \"self_attn.attention\"" in text
    assert "%self_attn.q_proj = graph.matmul(%input_layernorm, %self_attn.q_proj.weight)" in text
    assert "graph.param {name = \"mlp.down_proj.weight\"} : tensor<4096x11008xf16>" in text


def _tiny_text():
    return print_module(module_from_profile(trace_preset("tiny", 64)))


def test_verifier_rejects_wrong_gemm_flops():
    text = _tiny_text().replace("fwd_flops = 2097152, k = 128, m = 64, n = 128",
                                "fwd_flops = 2097150, k = 128, m = 64, n = 128", 1)
    with pytest.raises(VerifyError, match="fwd_flops must be 2\\*m\\*n\\*k"):
        verify(parse_module(text))


@pytest.mark.parametrize("old, new, message", [
    ('name = "self_attn.q_proj", saved = 16KiB} : tensor<1x64x128xf16>',
     'name = "self_attn.q_proj", saved = 16KiB} : tensor<3x3xf16>',
     "result tensor<3x3xf16> must hold m = 64 rows of n = 128"),
    ('name = "self_attn.q_proj", saved = 16KiB} : tensor<1x64x128xf16>',
     'name = "self_attn.q_proj", saved = 16KiB} : tensor<f16>', "result tensor<f16> must hold m = 64 rows"),
    ('name = "self_attn.q_proj", saved = 16KiB} : tensor<1x64x128xf16>',
     'name = "self_attn.q_proj", saved = 16KiB} : tensor<1x64x3xf16>', "result tensor<1x64x3xf16> must hold"),
    ('name = "self_attn.q_proj", saved = 16KiB} : tensor<1x64x128xf16>',
     'name = "self_attn.q_proj", saved = 16KiB} : tensor<1x3x128xf16>', "result tensor<1x3x128xf16> must hold"),
    ("graph.arg {index = 0}", "graph.arg {index = -1}", "index must not be negative, got -1"),
])
def test_verifier_rejects_shapes_and_indexes_the_costs_contradict(old, new, message):
    text = _tiny_text()
    assert old in text
    with pytest.raises(VerifyError, match=message):
        verify(parse_module(text.replace(old, new, 1)))


def test_a_graph_module_must_name_its_sequence_length():
    text = _tiny_text().replace("seq_len = 64, ", "", 1)
    module = parse_module(text)
    verify(module)        # the module's attributes are the model's, free-form to the verifier
    with pytest.raises(VerifyError, match="a graph module needs its model's 'seq_len' \\(int\\)"):
        profile_from_module(module)


def test_verifier_rejects_bad_gqa_and_repeat():
    text = _tiny_text().replace("kv_heads = 2", "kv_heads = 3", 1)
    with pytest.raises(VerifyError, match="multiple of kv_heads"):
        verify(parse_module(text))
    text = _tiny_text().replace("repeat = 4", "repeat = 0", 1)
    with pytest.raises(VerifyError, match="repeat must be at least 1"):
        verify(parse_module(text))


def test_each_layer_hands_on_its_sinks_through_graph_output():
    """graph.output lists what leaves each layer: the decoder's residual stream, the head's loss,
    the embedding's hidden state and the tables the decoder reads as arguments."""
    module = module_from_profile(trace_preset("tiny", 64))
    outputs = {op.sym_name: [v.owner.attributes["name"] for v in op.region.ops[-1].operands]
               for op in module.body.ops}
    head = trace_preset("tiny", 64).post
    assert outputs["head"] == [next(op.name for op in head.ops if op.kind == "loss")]
    decoder = trace_preset("tiny", 64).layers[0]
    assert outputs["decoder"] == [decoder.ops[-1].name]
    # the embedding hands on one tensor per argument of the decoder
    assert len(outputs["embedding"]) == len(decoder.args)


def test_generic_cleanups_keep_every_costed_op():
    """cse and dce on graph IR: every op feeds graph.output, so nothing is dead, and the model
    the IR describes is unchanged (it used to be emptied: nothing read the layers' last ops)."""
    from ratc.passes import PassContext, PassManager, parse_pipeline

    profile = trace_preset("tiny", 64)
    module = module_from_profile(profile)
    PassManager(parse_pipeline("cse,dce"), ctx=PassContext()).run(module)
    assert profile_from_module(module) == dataclasses.replace(profile, meta={})


@pytest.mark.parametrize("edit, message", [
    (lambda ops: ops.pop(), "must end with graph.output"),
    (lambda ops: ops.insert(1, Operation("graph.output", [ops[0].result], ())),
     "'graph.output' must be the last op of a graph.layer"),
])
def test_verifier_wants_one_graph_output_last(edit, message):
    module = module_from_profile(trace_preset("tiny", 64))
    edit(module.body.ops[1].region.ops)
    module = parse_module(print_module(module))      # set the ops' parents, as a file would
    with pytest.raises(VerifyError, match=message):
        verify(module)


def test_every_dtype_the_tracer_names_has_a_size_in_the_one_dtype_table():
    from ratc.frontend.trace import DTYPE_NAMES
    from ratc.ir.types import DTYPE_BYTES
    from ratc.planner.opcost import elem_bytes

    import torch

    for torch_dtype, name in DTYPE_NAMES.items():
        assert elem_bytes(name) == DTYPE_BYTES[name] == torch.empty((), dtype=torch_dtype).element_size()
