"""Malformed inputs: each gives one located, readable error, exit code 1 and no traceback."""

import pytest

from ratc.cli.main import main

GOOD_HEAD = "module @m {\n"

# (name, file text, pipeline, expected 'line:col', expected message fragment)
CASES = [
    ("missing-brace", GOOD_HEAD + '  %a = test.const {value = 1.0} : tensor<2xf32>\n', "",
     "2:48", "unexpected end of input"),
    ("bad-character", GOOD_HEAD + "  %a = test.const {value = 1.0} : tensor<2xf32> ?\n}\n", "",
     "2:49", "unexpected character '?'"),
    ("unknown-op", GOOD_HEAD + "  %a = test.nope : tensor<2xf32>\n}\n", "", "2:3", "unknown op 'test.nope'"),
    ("use-before-def", GOOD_HEAD + "  %b = test.add(%a, %a) : tensor<2xf32>\n"
     "  %a = test.const {value = 1.0} : tensor<2xf32>\n}\n", "", "2:17", "use of undefined value '%a'"),
    ("duplicate-value", GOOD_HEAD + "  %a = test.const {value = 1.0} : tensor<2xf32>\n"
     "  %a = test.const {value = 2.0} : tensor<2xf32>\n}\n", "", "3:3", "redefinition of value '%a'"),
    ("duplicate-symbol", GOOD_HEAD + "  test.func @f {\n  }\n  test.func @f {\n  }\n}\n", "",
     "4:3", "redefinition of symbol '@f'"),
    ("wrong-attr-type", GOOD_HEAD + '  %a = test.const {value = "one"} : tensor<2xf32>\n}\n', "",
     "2:3", "attribute 'value' must be a float"),
    ("missing-attr", GOOD_HEAD + "  %a = test.const : tensor<2xf32>\n}\n", "", "2:3",
     "requires attribute 'value'"),
    ("unknown-attr", GOOD_HEAD + "  %a = test.const {value = 1.0, colour = 1} : tensor<2xf32>\n}\n", "",
     "2:3", "unknown attribute 'colour'"),
    ("wrong-operand-type", GOOD_HEAD + "  %t = test.token : !test.tok\n  %b = test.add(%t, %t) : tensor<2xf32>\n}\n",
     "", "3:3", "operand #0 ('a') must be tensor"),
    ("op-verifier", GOOD_HEAD + "  %a = test.const {value = 1.0} : tensor<2xf32>\n"
     "  %b = test.const {value = 1.0} : tensor<3xf32>\n  %c = test.add(%a, %b) : tensor<2xf32>\n}\n",
     "", "4:3", "needs operands and result of one type"),
    ("arity", GOOD_HEAD + "  %a = test.const {value = 1.0} : tensor<2xf32>\n  %b = test.add(%a) : tensor<2xf32>\n}\n",
     "", "3:3", "expects 2 operand(s), got 1"),
    ("types-count", GOOD_HEAD + "  %a, %b = test.split : tensor<2xf32>\n}\n", "", "2:12",
     "defines 2 result(s) but lists 1 type(s)"),
    ("bad-dtype", GOOD_HEAD + "  %a = test.const {value = 1.0} : tensor<2xq7>\n}\n", "", "2:3",
     "unknown element type 'q7'"),
    ("undefined-symbol", GOOD_HEAD + "  test.call {callee = @ghost}\n}\n", "", "2:3",
     "undefined symbol '@ghost'"),
    ("duplicate-attr-key", GOOD_HEAD + "  %a = test.const {value = 1.0, value = 2.0} : tensor<2xf32>\n}\n",
     "", "2:33", "duplicate attribute 'value'"),
    ("enum-choice", GOOD_HEAD + '  test.attrs {e = "medium"}\n}\n', "", "2:3", "must be one of 'fast', 'slow'"),
    ("region-not-allowed", GOOD_HEAD + "  test.print {\n  }\n}\n", "", "2:3", "expects 1 operand(s), got 0"),
    ("bad-pass-name", GOOD_HEAD + "}\n", "cse,frobnicate", "<pipeline>:1:5", "unknown pass 'frobnicate'"),
    ("bad-option-value", GOOD_HEAD + "}\n", "verify{symbols=maybe}", "<pipeline>:1:16",
     "option 'symbols' must be true or false"),
    ("unknown-option", GOOD_HEAD + "}\n", "verify{colour=red}", "<pipeline>:1:8", "has no option 'colour'"),
    ("unclosed-options", GOOD_HEAD + "}\n", "verify{symbols=true", "<pipeline>:1:20", "missing '}'"),
    ("pipeline-over-two-lines", GOOD_HEAD + "}\n", "cse,\n  frobnicate", "<pipeline>:2:3", "unknown pass 'frobnicate'"),
    ("unknown-op-with-a-result", GOOD_HEAD + "  %a = test.nope\n}\n", "", "2:8", "unknown op 'test.nope'"),
    # literals the lexer takes but that do not convert, in the module header and in an op
    ("signed-byte-size", "module @m {x = -1KiB} {\n}\n", "", "1:16", "bad byte size -1: a byte size has no sign"),
    ("signed-byte-size-in-op", GOOD_HEAD + "  test.attrs {b = +5B}\n}\n", "", "2:19", "a byte size has no sign"),
    ("double-sign", "module @m {x = --5} {\n}\n", "", "1:16", "unexpected character '-'"),
    ("bad-escape", 'module @m {x = "\\q"} {\n}\n', "", "1:16", 'bad string "\\q": Invalid \\escape'),
    ("lone-surrogate", 'module @m {x = "\\ud800"} {\n}\n', "", "1:16", "surrogates not allowed"),
    ("deep-nesting", "module @m {x = " + "[" * 2000 + "]" * 2000 + "} {\n}\n", "", "1:1",
     "nested too deeply to parse"),
    # U+2028, U+0085 and a form feed in a string are not line breaks: the excerpt is line 3
    ("line-separators-in-a-string", 'module @m {x = "a\u2028b\x85c\x0cd"} {\n'
     "  %a = test.const {value = 1.0} : tensor<2xf32>\n  %b = test.add(%a, %zz) : tensor<2xf32>\n}\n", "",
     "3:21", "use of undefined value '%zz'"),
]


@pytest.mark.parametrize("name,text,pipeline,where,message", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_located(tmp_path, capsys, name, text, pipeline, where, message):
    path = tmp_path / f"{name}.ir"
    path.write_text(text)
    out = tmp_path / "out.ir"
    argv = ["opt", str(path), "-o", str(out)] + (["-p", pipeline] if pipeline else [])
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert message in err
    if where.startswith("<pipeline>"):
        assert f"{where}: error:" in err
    else:
        assert f"{path}:{where}: error:" in err
        line, col = map(int, where.split(":"))
        lines = text.split("\n")     # (the parsers' lines: "\n" only)
        src_line = lines[line - 1] if line <= len(lines) else ""
        # The source line and a caret under the column follow the message.
        assert f"\n{src_line}\n{' ' * (col - 1)}^" in err
    assert not out.exists(), "nothing may be written on error"


def test_at_least_fifteen_cases():
    assert len(CASES) >= 15


def test_traceback_flag_shows_the_python_error(tmp_path):
    path = tmp_path / "bad.ir"
    path.write_text("module {\n  %a = test.nope : tensor<2xf32>\n}\n")
    with pytest.raises(Exception, match="unknown op"):
        main(["--traceback", "opt", str(path)])


def test_missing_file_is_a_clear_error(capsys):
    assert main(["opt", "/nonexistent/prog.ir"]) == 1
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("body,bad", [
    ("  test.call {callee = @f}\n  test.func @f {\n  }\n", None),                 # a forward reference
    ('  test.attrs {d = {k = [1, @f]}, a = [@f]}\n  test.func @f {\n  }\n', None),
    ('  test.attrs {d = {k = [1, {z = @g}]}}\n', "'test.attrs' attribute 'd' refers to undefined symbol '@g'"),
    ('  test.attrs {l = [@f, @h]}\n  test.func @f {\n  }\n', "attribute 'l' refers to undefined symbol '@h'"),
    ('  test.attrs {a = @x}\n  test.call {callee = @y}\n', "attribute 'a' refers to undefined symbol '@x'"),
    ('  test.func @f {\n    test.call {callee = @q}\n  }\n  test.attrs {r = @p}\n',
     "'test.call' attribute 'callee' refers to undefined symbol '@q'"),     # walk order: nested first
])
def test_symbol_references_anywhere_in_attributes(body, bad):
    from ratc.ir import VerifyError, parse_module, verify

    module = parse_module(GOOD_HEAD + body + "}\n", "<t>")
    if bad is None:
        verify(module)
        return
    with pytest.raises(VerifyError, match=bad):
        verify(module)
    verify(module, check_symbols=False)


def test_a_crlf_file_shows_its_line_without_the_carriage_return(tmp_path, capsys):
    path = tmp_path / "crlf.ir"
    path.write_bytes(b"module @m {\r\n  %b = test.add(%a, %a) : tensor<2xf32>\r\n}\r\n")
    assert main(["opt", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2:17: error: use of undefined value '%a'\n  %b = test.add(%a, %a) : tensor<2xf32>\n" in err


def test_model_module_names_do_not_depend_on_the_hash_seed(tmp_path):
    """Class reprs in error messages show the module name; it must be the same in every process."""
    import subprocess
    import sys
    model = tmp_path / "m.py"
    model.write_text("X = 1\n")
    code = f"from ratc.frontend.modelfile import import_model_file; print(import_model_file({str(model)!r}).__name__)"
    names = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**__import__("os").environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(names) == 1 and names.pop().startswith("_ratc_model_")
