"""IR printing and parsing stay linear in the module's size, and big texts are refused up front."""

import tracemalloc

import pytest

from ratc.cli.main import main
from ratc.errors import RatcError
from ratc.ir import Block, Module, OpaqueType, Operation, parse_module, print_module
from ratc.ir import printer

TOKEN = OpaqueType("life", "token")


def layered(layers: int) -> Module:
    """Layers that each repeat the same value names in a region, as a life schedule does."""
    m = Module("scale")
    prev = None
    for i in range(layers):
        layer = Operation("test.layer", [prev] if prev else [], [TOKEN], {"index": i},
                          result_names=["done"], region=Block())
        inner = []
        for hint in ("x", "w", "x", "dx", "acc"):
            op = Operation("test.task", inner[-1:], [TOKEN], {"cost": 0.5}, result_names=[hint])
            layer.region.append(op)
            inner.append(op.result)
        m.body.append(layer)
        prev = layer.result
    return m


class _CountingSet(set):
    """A set that counts membership tests: the printer's renaming work."""

    probes = 0

    def __contains__(self, item):
        _CountingSet.probes += 1
        return super().__contains__(item)


def _probes(layers: int, monkeypatch) -> int:
    original = printer._Namer.__init__

    def counting_init(self):
        original(self)
        self.taken = _CountingSet()

    monkeypatch.setattr(printer._Namer, "__init__", counting_init)
    _CountingSet.probes = 0
    print_module(layered(layers))
    return _CountingSet.probes


def test_printing_repeated_value_names_costs_linear_work(monkeypatch):
    small, large = _probes(250, monkeypatch), _probes(1000, monkeypatch)
    # renaming the n-th '%x' by trying x_1 .. x_n made this ratio 16 (quadratic)
    assert large / small < 4.5
    assert large < 3 * 1000 * 6


def test_printing_renames_repeated_hints_to_the_smallest_free_suffix():
    text = print_module(layered(3))
    assert "%x = " in text and "%x_1 = " in text and "%x_5 = " in text and "%x_6" not in text
    assert print_module(parse_module(text)) == text


@pytest.mark.parametrize("general", [False, True], ids=["as-printed", "hand-laid-out"])
def test_parsing_keeps_memory_linear_with_a_small_constant_per_input_byte(general):
    def peak_per_byte(layers):
        text = print_module(layered(layers))
        if general:      # a trailing comment sends the text through the general (Lark) path
            text = text.replace("\n", " // hand-written\n", 1)
        tracemalloc.start()
        try:
            parse_module(text)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return peak / len(text)

    small, large = peak_per_byte(100), peak_per_byte(400)
    # a kept Lark tree cost ~90 bytes per input byte (a 200 MB file needed 24 GB)
    assert large < (50 if general else 20)
    assert large < 1.3 * small + 2


def test_parse_refuses_a_text_above_the_ir_size_limit_naming_the_override(monkeypatch):
    monkeypatch.setenv("RATC_MAX_IR_BYTES", "1KB")
    with pytest.raises(RatcError, match=r"big\.ir: IR text size .* exceeds the limit of .*RATC_MAX_IR_BYTES"):
        parse_module(print_module(layered(20)), "big.ir")
    parse_module(print_module(layered(1)), "small.ir")


def test_opt_refuses_an_ir_file_above_the_limit_before_reading_it(tmp_path, monkeypatch, capsys):
    path = tmp_path / "big.ir"
    path.write_text(print_module(layered(20)))
    monkeypatch.setenv("RATC_MAX_IR_BYTES", "2000")
    assert main(["opt", str(path)]) == 1
    err = capsys.readouterr().err
    assert "big.ir" in err and "RATC_MAX_IR_BYTES" in err and "Traceback" not in err


def test_a_malformed_limit_override_is_an_error_naming_the_variable(tmp_path, monkeypatch, capsys):
    path = tmp_path / "one.ir"
    path.write_text(print_module(layered(1)))
    monkeypatch.setenv("RATC_MAX_IR_BYTES", "lots")
    assert main(["opt", str(path)]) == 1
    assert "$RATC_MAX_IR_BYTES must be a byte size" in capsys.readouterr().err
