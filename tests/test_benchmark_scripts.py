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


def _script(name: str):
    import importlib.util

    import sys

    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # (a dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module



def _readme_commands_module():
    return _script("readme_commands")


def test_the_readme_command_runner_reads_sh_blocks_with_continuations_and_no_comments():
    rc = _readme_commands_module()
    text = ("intro\n```sh\nratc run out/x   # a comment\n# only a comment\n\nratc train a \\\n    --steps 2\n```\n"
            "```python\nprint('not a command')\n```\n```sh\nratc passes\n```\n")
    assert rc.readme_commands(text) == ["ratc run out/x   # a comment", "ratc train a --steps 2", "ratc passes"]
    readme = rc.readme_commands((BENCHMARKS.parent / "README.md").read_text())
    assert len(readme) > 40 and all(c.split()[0] in {"ratc", "python", "pip", "torchrun", "source"} for c in readme)
    assert rc.needs_gpu("ratc calibrate -o gpu.toml --backend nccl") and rc.is_install(readme[0])


def test_beyond_paper_marks_a_search_met_only_at_or_under_its_target():
    bp = _script("beyond_paper")
    setting = ("llama2-7b", 8, 512, 1320.7, 1155.6, "<= 1155.6 s")
    run = {"config": "P=4,D=2", "step_s": 1320.7, "mac": 0.5, "idle": 0.05, "recovery_s": 231.3, "peak_gb": 17.9}
    rows = bp.table([(setting, [(bp.SEARCHES[0][0], run), ("a", {**run, "step_s": 1155.6}),
                                ("b", {**run, "step_s": 1155.7})])]).splitlines()[2:]
    assert [r.rsplit("|", 2)[1].strip() for r in rows] == ["", "yes", "**no**"]
    assert "| -12.5 % |" in rows[1] and "| +0.0 % |" in rows[0]


def test_interleaved_agreement_runs_selective_as_fsr_keeping_the_choice_and_refuses_a_wrong_keep(capsys):
    ia = _script("interleaved_agreement")
    assert ia._policy("selective", "", 4, "paper") == ("fsr", "4s")
    assert ia._policy("selective", "2s2l", 4, "paper") == ("fsr", "2s2l")
    assert ia._policy("selective", "", 4, "fused") == ("fsr", "4f")    # (fused attention: no core to drop)
    assert ia._policy("ckpt", "", 4, "paper") == ("ckpt", "")
    assert ia.main(["--cfg", "tiny:2", "--seq", "64", "--v", "2", "--per-rank", "2", "--Z", "3",
                    "--act", "selective", "--keep", "3s"]) == 2
    assert "--keep '3s' names 3 layers; the model has 4" in capsys.readouterr().err
    assert ia.main(["--cfg", "tiny:2", "--seq", "64", "--v", "2", "--per-rank", "2", "--Z", "3",
                    "--act", "fsr", "selective"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[4] for line in out[:-1]] == ["fsr", "selective"] and out[-1].startswith("worst ")


def test_measured_vs_predicted_counts_other_processes_cpu_and_keeps_the_quietest_run(monkeypatch):
    import subprocess
    import sys
    import time

    mvp = _script("measured_vs_predicted")
    # a waited-for child's CPU seconds are this process's own; a process beside it, not waited
    # for, is another's (CPU seconds, not wall time: other sessions' load cannot fail this)
    busy0, own0 = mvp._cpu_seconds()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"],
                   timeout=60)
    busy1, own1 = mvp._cpu_seconds()
    assert own1 - own0 >= 0.25 and busy1 - busy0 >= 0.25
    neighbour = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                                  "while time.process_time() - t < 0.5: pass"])
    neighbour.wait(timeout=60)      # waited for: from here on its CPU seconds are this process's
    busy2, own2 = mvp._cpu_seconds()
    assert own2 - own1 >= 0.45      # its CPU joins this process's once waited for
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.1)
        busy3, own3 = mvp._cpu_seconds()
        time.sleep(1.0)
        busy4, own4 = mvp._cpu_seconds()
    finally:
        neighbour.kill()
        neighbour.wait(timeout=10)
    assert own4 - own3 < 0.1 and (busy4 - busy3) - (own4 - own3) >= 0.3
    # runs measured again while others took over QUIET of the CPUs, the quietest kept
    shares = iter([0.5, 0.3, 0.4])
    monkeypatch.setattr(mvp, "others_share", lambda run: (run(), next(shares)))
    assert mvp.quietest(lambda attempt: attempt, "a run") == (1, 0.3, 2)
    shares = iter([0.5, 0.02, 0.01])
    assert mvp.quietest(lambda attempt: attempt, "a run") == (1, 0.02, 1)
