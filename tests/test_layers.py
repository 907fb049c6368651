"""Imports run one way: no ratc module imports a module of a layer above its own (README, "Layers")."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ratc"

# Lowest first; a module belongs to the layer of its longest matching prefix. The same
# table is in the README.
LAYERS = [
    ("base", ["ratc", "ratc.errors", "ratc.units", "ratc.limits", "ratc.gcpause", "ratc.atomic",
              "ratc.input_files", "ratc.io", "ratc.cache", "ratc.program", "ratc.hostmem"]),
    ("ir", ["ratc.ir"]),
    ("inputs", ["ratc.platform", "ratc.frontend"]),
    ("step", ["ratc.step"]),
    ("kernels", ["ratc.codegen", "ratc.vm.kernel_vm", "ratc.vm.kernel_timing", "ratc.vm.kernel_races"]),
    ("planner", ["ratc.planner"]),
    ("lifecycle", ["ratc.lifecycle", "ratc.passes", "ratc.codegen.program_kernels"]),
    ("programs", ["ratc.program_check"]),
    ("vm", ["ratc.vm", "ratc.dist", "ratc.calibrate"]),
    ("report", ["ratc.report"]),
    ("cli", ["ratc.cli", "ratc.__main__", "ratc.dist.__main__"]),
]
RANK = {prefix: k for k, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes}


def layer_of(module: str) -> int:
    """The layer index of a ratc module (its longest listed prefix)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in RANK:
            return RANK[prefix]
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and the README)")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path):
    """(imported ratc module, line) of every import in a file, at any depth (lazy ones too)."""
    base = root.parent
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("ratc"):
            # `from ratc.x import y` may import the module ratc.x.y
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                path_of = base / sub.replace(".", "/")
                yield (sub if path_of.with_suffix(".py").exists() or path_of.is_dir() else node.module), node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("ratc"):
                    yield alias.name, node.lineno


def upward_imports(root: Path = ROOT) -> list[str]:
    """Every import of a module above the importer's layer, as 'file:line: what imports what'."""
    found = []
    for path in sorted(root.rglob("*.py")):
        mod = module_name(path, root)
        own = layer_of(mod)
        for target, line in imports(path, root):
            if layer_of(target) > own:
                found.append(f"{path.relative_to(root.parent)}:{line}: {mod} ({LAYERS[own][0]}) imports "
                             f"{target} ({LAYERS[layer_of(target)][0]})")
    return found


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports() == []


def test_the_readme_states_the_same_layers():
    readme = (ROOT.parent / "README.md").read_text()
    order = " ← ".join(name for name, _ in LAYERS)
    assert order in readme, f"the README's layering should read: {order}"


def test_an_upward_import_is_found_with_its_line(tmp_path):
    # the checker itself, on a small tree: a planner module lazily importing the CLI
    for name, text in (("ratc/__init__.py", ""), ("ratc/cli/__init__.py", ""), ("ratc/cli/main.py", ""),
                       ("ratc/planner/__init__.py", ""),
                       ("ratc/planner/probe.py", "from ratc.errors import RatcError\n\ndef f():\n"
                                                 "    from ratc.cli.main import main\n"),
                       ("ratc/errors.py", "")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert upward_imports(tmp_path / "ratc") == [
        "ratc/planner/probe.py:4: ratc.planner.probe (planner) imports ratc.cli.main (cli)"]
