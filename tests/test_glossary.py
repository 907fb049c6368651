"""docs/glossary.md defines every term, symbol and abbreviation `ratc plan --explain` and `ratc run` print."""

import re
from pathlib import Path

import pytest

from ratc.cli.main import main

GLOSSARY = Path(__file__).parents[1] / "docs" / "glossary.md"
TINY = ["--preset", "tiny"]
# Labels of the text reports, checked whenever the output uses them
PHRASES = ("step time", "tokens/s", "tok/s", "MAC utilization", "MAC util", "bubble fraction", "finalization tail",
           "critical path", "exposed", "1F1B main path", "peak", "state", "activations", "buffers", "by symmetry",
           "budget", "pruned by memory", "candidate", "global batch", "cycles", "share", "calls", "predicted",
           "bound by", "dependency", "resource")


def defined_terms() -> set[str]:
    """The terms the glossary defines: its bold words."""
    return set(re.findall(r"\*\*([^*]+)\*\*", GLOSSARY.read_text(encoding="utf-8")))


def used_terms(text: str) -> set[str]:
    """Symbols and abbreviations an output uses: E_comm-style symbols, configuration keys and
    policies, upper-case abbreviations, snake_case task kinds, cited equations and known labels."""
    terms = set(re.findall(r"\b[A-Z]_[A-Za-z0-9]+\b", text))
    terms |= set(re.findall(r"\b([A-Za-z]+)=", text))
    terms |= {word for pair in re.findall(r"\bA=\d+,(\w+),(\w+)", text) for word in pair}
    terms |= set(re.findall(r"\b[A-Z]{2,}[a-z]*\b", text))
    terms |= set(re.findall(r"\b[a-z]+_[a-z]+\b", text))
    terms |= set(re.findall(r"\bEq\. \d+", text))
    terms |= {p for p in PHRASES if p in text}
    # the task kinds of a critical-path table (its fourth column)
    terms |= set(re.findall(r"^  \S+\s+(?:\d+|-) (forward|backward|recover|update|prefetch|send|marker)\b",
                            text, re.M))
    return terms


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """`ratc plan --explain` and `ratc run` (with a pipelined FSR plan's critical path) of the tiny preset."""
    prog = tmp_path_factory.mktemp("glossary") / "tiny"
    runs = [["plan", *TINY, "--clusters", "4", "--global-batch", "16", "--explain"],
            ["plan", *TINY, "--clusters", "4", "--global-batch", "16", "--explain", "--pipeline", "2",
             "--strategy", "any"],
            ["compile", *TINY, "--clusters", "4", "--global-batch", "16", "-o", str(prog)],
            ["run", str(prog)],
            ["run", str(prog), "--plan", "P=2,D=2,Z=2,b=1,A=8,FSR,deadline", "--critical-path"]]
    return runs


def test_the_glossary_defines_every_term_plan_explain_and_run_print(outputs, capsys):
    text = ""
    for argv in outputs:
        assert main(argv) == 0
        text += capsys.readouterr().out
    used = used_terms(text)
    assert {"E_comm", "T_1F1B", "P", "FSR", "MAC", "bubble fraction", "grad_sync", "Eq. 12"} <= used
    units = {"GB", "MB", "KB", "TB"}
    assert sorted(used - defined_terms() - units) == []
    assert units <= defined_terms()


def test_the_term_finder_sees_symbols_keys_and_abbreviations():
    sample = ("  P=2,D=2,Z=1,b=1,A=8,Ckpt,layerwise is 1.1x\n    T_1F1B 2 ms + E_xyz 1 us\n"
              "  0G1#0              1 grad_sync      0        9180993  dependency on 0P2#0\n"
              "planner (Eq. 12) predicted; MAC utilization 3 %; NEWABBR\n")
    assert used_terms(sample) >= {"P", "D", "Z", "b", "A", "Ckpt", "layerwise", "T_1F1B", "E_xyz", "grad_sync",
                                  "Eq. 12", "MAC utilization", "NEWABBR", "dependency", "predicted"}
    assert "E_xyz" not in defined_terms() and "NEWABBR" not in defined_terms()


# Units a figure may carry (after it), and what in a line is a name rather than a figure
UNIT = re.compile(r"\s?(s|ms|us|ns|h|min|%|B|KB|MB|GB|TB|GB/s|TB/s|tok/s|tokens/s|cycles|x|tasks?|candidates|"
                  r"stages?|replicas?|clusters|steps|layers|sequences|tokens|fit|pruned|bytes)(?!\w)")
NAMES = re.compile(r"(?:\b[A-Za-z]+=\w+,)+[A-Za-z]+=\w+(?:,[A-Za-z]+(?:=\w+)?)*|\b[A-Za-z]+=\w+:?|\b1F1B\b|^\s*\d+\.\s|\b\d+\. (?=P=)|"
                   r"\bstage \d+|\bEq\. \d+|\bTable \d+|\bs\d+\b|cycles \d+\.\.\d+|#\d+|(?<!\w)(?:/[\w.-]+){2,}")


def figures_without_unit(text: str) -> list[str]:
    """Lines with a number that carries no unit: not after it, nor in its row's label
    ('tokens/s    1234', 'MAC util  3.2 %'); configuration labels, ranks, stage and equation
    numbers and paths are names, not figures."""
    bad = []
    for line in text.splitlines():
        label, _, value = line.strip().partition("  ")
        unit_in_label = bool(re.search(r"/s\b|\(.*\)|\bcycles\b", label))
        for m in re.finditer(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?", NAMES.sub(" ", line)):
            rest = NAMES.sub(" ", line)[m.end():]
            if not UNIT.match(rest) and not (unit_in_label and m.start() >= len(line) - len(value) - 2):
                bad.append(line)
                break
    return bad


def test_every_figure_of_run_and_plan_and_report_has_its_unit(outputs, capsys, tmp_path):
    text = ""
    for argv in outputs:
        assert main(argv) == 0
        text += capsys.readouterr().out
    prog = outputs[2][-1]
    assert main(["report", prog, "--simulate-top", "0", "--top", "1"]) == 0
    text += capsys.readouterr().out
    # (the critical path and kernel tables give their units in their column headers)
    tables = re.compile(r"^  (\S+\s+(\d+|-) [a-z_]+\s|total\s|(gemm|attn)_)|^\s*\d+\.\s+[\d.]+ [KMG]B")
    assert [line for line in figures_without_unit(text) if not tables.match(line)] == []


def test_a_figure_without_unit_is_found():
    assert figures_without_unit("step time   5.1\nevaluated 3 candidates\n") == ["step time   5.1"]
    assert figures_without_unit("tokens/s          198584.31\npeak 12.52 MB (stage 0)\n") == []
