"""The benchmark scripts write tracked docs only when asked (--write-docs or a file named on
the command line), never by default."""

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def _argument_defaults(tree: ast.AST):
    """(option, default) of every add_argument call with a string default."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for kw in node.keywords:
                if kw.arg == "default" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    yield (node.args[0].value if node.args else "?"), kw.value.value


def test_no_benchmark_option_defaults_to_a_tracked_doc():
    scripts = sorted(BENCHMARKS.rglob("*.py"))
    assert len(scripts) > 20
    offenders = [(str(p.relative_to(BENCHMARKS)), opt, default) for p in scripts
                 for opt, default in _argument_defaults(ast.parse(p.read_text()))
                 if default.startswith("docs/") or default.endswith(".md")]
    assert offenders == []


def test_a_script_that_names_a_tracked_doc_writes_it_only_with_write_docs():
    for p in sorted(BENCHMARKS.rglob("*.py")):
        text = p.read_text()
        if "DOC = " in text:
            assert '"--write-docs"' in text, p.name
