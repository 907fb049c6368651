"""The program's task DAG: `ratc run --critical-path`, `--dag FILE` (GraphML, DOT) and the
verifier's deadlock check on the stages' sends and receives."""

import json
import re

import networkx as nx
import pytest

from ratc.cli.main import main
from ratc.ir import parse_module, print_module
from ratc.lifecycle.lowering import find_pipeline
from ratc.vm.system.critical import critical_chain
from ratc.vm.system.dag import dag_text, task_graph
from ratc.vm.system.engine import simulate
from ratc.vm.system.task_graph import TaskGraph
from tiny_programs import compile_tiny, compile_tiny_dir



def two_stage_program() -> TaskGraph:
    """One micro-batch through two stages at 1000 cycles/s (a cycle is a millisecond).

    On paper: 0F0@0 0..10, its send 10..14; stage 1 receives at 14, when a Recover of
    priority 0 takes the compute engine until 22, so 1F0@1 (ready at 14) waits for it: 22..32;
    1B0@1 32..38, its send 38..42, 0B0@0 42..48. 0U@0 (10..15) is off the critical path. Step
    time 48 cycles; the chain is every task but 0U@0, with the shares 10, 4, 0, 8, 10, 6,
    4, 0, 6 (of 48).
    """
    prog = TaskGraph(stages=2, replicas=1, clock=1000.0)
    f0 = prog.add("0F0@0", "forward", 0, ("compute",), 10, layer=0, micro_batch=0)
    u0 = prog.add("0U@0", "update", 0, ("ddr",), 5, deps=(f0,), layer=0)
    send_f = prog.add("0SEND_F0", "send", 0, ("tx", (1, 0, "rx")), 4, deps=(f0,), micro_batch=0)
    recv_f = prog.add("1RECV_F0", "send", 1, (), 0, deps=(send_f,), micro_batch=0)
    prog.add("1R1@1", "recover", 1, ("compute",), 8, deps=(recv_f,), priority=0, layer=1, micro_batch=1)
    f1 = prog.add("1F0@1", "forward", 1, ("compute",), 10, deps=(recv_f,), layer=1, micro_batch=0)
    b1 = prog.add("1B0@1", "backward", 1, ("compute",), 6, deps=(f1,), layer=1, micro_batch=0)
    send_b = prog.add("1SEND_B0", "send", 1, ("tx", (0, 0, "rx")), 4, deps=(b1,), micro_batch=0)
    recv_b = prog.add("0RECV_B0", "send", 0, (), 0, deps=(send_b,), micro_batch=0)
    prog.add("0B0@0", "backward", 0, ("compute",), 6, deps=(recv_b, u0), layer=0, micro_batch=0)
    return prog


EXPECTED_CHAIN = """\
critical path of the measured step (cycles 0..48): 9 tasks
  task           layer kind       stage          start        cycles        time    share  bound by
  0F0@0              0 forward        0              0            10   10.000 ms  20.83 %  starts the run
  0SEND_F0           - send           0             10             4    4.000 ms   8.33 %  dependency on 0F0@0
  1RECV_F0           - send           1             14             0      0.0 ns   0.00 %  dependency on 0SEND_F0
  1R1@1              1 recover        1             14             8    8.000 ms  16.67 %  dependency on 1RECV_F0
  1F0@1              1 forward        1             22            10   10.000 ms  20.83 %  resource s1.compute held by 1R1@1
  1B0@1              1 backward       1             32             6    6.000 ms  12.50 %  dependency on 1F0@1
  1SEND_B0           - send           1             38             4    4.000 ms   8.33 %  dependency on 1B0@1
  0RECV_B0           - send           0             42             0      0.0 ns   0.00 %  dependency on 1SEND_B0
  0B0@0              0 backward       0             42             6    6.000 ms  12.50 %  dependency on 0RECV_B0
  total                                                           48   48.000 ms 100.00 %
  by kind: forward 41.67 % (2 tasks), backward 25.00 % (2 tasks), recover 16.67 % (1 task), send 16.67 % (4 tasks)
"""


def test_a_long_chain_prints_its_ends_and_each_kinds_share_and_keeps_every_task_in_json():
    from ratc.vm.system.critical import SHOWN_ENDS, ChainTask, CriticalChain

    n = 2 * SHOWN_ENDS + 11
    tasks = tuple(ChainTask(i, f"0{'FB'[i % 2]}{i}", ("forward", "backward")[i % 2], 0, 0, 1, 0, 10 * i, 10, 10,
                            "dependency", i - 1, "x", ()) for i in range(n))
    chain = CriticalChain((0, 10 * n), 1000.0, True, tasks)
    lines = chain.text().splitlines()
    assert len(lines) == 2 + 2 * SHOWN_ENDS + 1 + 2
    assert lines[2 + SHOWN_ENDS] == f"  ... 11 more tasks, 110.000 ms ({100 * 11 / n:.2f} %; all in --json and --dag) ..."
    assert lines[2].startswith("  0F0 ") and lines[-3].startswith(f"  0F{n - 1} ")
    forward = (n + 1) // 2
    assert lines[-1] == (f"  by kind: forward {100 * forward / n:.2f} % ({forward} tasks), "
                         f"backward {100 * (n - forward) / n:.2f} % ({n - forward} tasks)")
    assert len(chain.as_dict()["tasks"]) == n


def test_critical_path_of_a_two_stage_program_is_its_known_chain():
    tl = simulate(two_stage_program())
    chain = critical_chain(tl, task_graph(tl))
    assert chain.text() == EXPECTED_CHAIN
    d = chain.as_dict()
    assert (d["step_cycles"], d["total_cycles"], d["total_s"]) == (48, 48, 0.048)
    assert [t["share_cycles"] for t in d["tasks"]] == [10, 4, 0, 8, 10, 6, 4, 0, 6]
    waited = d["tasks"][4]
    assert (waited["task"], waited["bound_by"], waited["after"], waited["resources"]) == \
        ("1F0@1", "resource", "1R1@1", ["s1.compute"])
    assert d["tasks"][0]["bound_by"] == "start" and d["tasks"][0]["after"] is None


@pytest.mark.parametrize("cfg", [dict(P=2, D=2, Z=3, A=4, act="fsr"), dict(P=3, D=2, Z=2, A=3, act="ckpt"),
                                 dict(P=4, D=2, Z=0, A=8, act="fsr", pref="layerwise"),
                                 dict(P=2, D=4, Z=1, A=4, act="full", pref="bulk")],
                         ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "explicit"])
def test_critical_chain_of_a_compiled_program_tiles_its_measured_step(cfg, symmetric):
    """Every link passes the DAG cross-check (ring collectives and contended ports included)
    and the shares sum to the step, by symmetry and with every replica simulated."""
    from ratc.vm.system.driver import run_module
    from tiny_programs import mt3000

    tl, res = run_module(compile_tiny(**cfg), mt3000(), steps=2, symmetric=symmetric, memory_limit=False)
    chain = critical_chain(tl, task_graph(tl))
    assert chain.total_cycles == chain.step_cycles == res.step_cycles
    assert chain.tasks[-1].start + chain.tasks[-1].duration == chain.window[1]
    for before, after in zip(chain.tasks, chain.tasks[1:]):
        assert after.after == before.index and after.start == before.start + before.duration
    labels = {r for t in chain.tasks for r in t.resources}
    assert all(re.fullmatch(r"s\d+\.\w+" if symmetric else r"s\d+r\d+\.\w+", r) for r in labels)


def test_a_critical_chain_that_is_no_path_of_the_dag_is_refused():
    """The cross-check: a dependency the simulation followed must be an edge of the DAG."""
    from ratc.errors import RatcError

    tl = simulate(two_stage_program())
    graph = task_graph(tl)
    graph.remove_edge(5, 6)                     # 1F0 -> 1B0
    with pytest.raises(RatcError, match="1B0@1 .* started on the end of 1F0@1 .* no dependency of it"):
        critical_chain(tl, graph)


def test_graphml_of_the_task_dag_reads_back_with_every_task_and_dependency(tmp_path):
    prog = two_stage_program()
    tl = simulate(prog)
    path = tmp_path / "tasks.graphml"
    path.write_text(dag_text(task_graph(tl), "graphml"))
    back = nx.read_graphml(path, node_type=int)
    assert list(back.nodes) == list(range(len(prog.tasks)))
    assert set(back.edges) == {(d, i) for i, t in enumerate(prog.tasks) for d in t.deps}
    for i, t in enumerate(prog.tasks):
        node = back.nodes[i]
        assert (node["name"], node["kind"], node["stage"], node["duration"], node["start"], node["end"]) == \
            (t.name, t.kind, t.stage, t.duration, tl.start[i], tl.end[i])
    assert back.nodes[4]["resources"] == "s1.compute" and back.nodes[2]["resources"] == "s0.tx s1.rx"
    assert back.graph["clock_hz"] == 1000.0


def test_dot_of_the_task_dag_has_a_line_per_task_and_dependency_and_is_deterministic():
    prog = two_stage_program()
    text = dag_text(task_graph(simulate(prog)), "dot")
    assert text == dag_text(task_graph(simulate(two_stage_program())), "dot")
    lines = text.splitlines()
    assert lines[0] == "digraph tasks {" and lines[-1] == "}"
    nodes = {int(m[1]): m[2] for line in lines if (m := re.fullmatch(r'  (\d+) \[label="([^"]*)", .*\];', line))}
    edges = {(int(m[1]), int(m[2])) for line in lines if (m := re.fullmatch(r"  (\d+) -> (\d+);", line))}
    assert nodes == {i: t.name for i, t in enumerate(prog.tasks)}
    assert edges == {(d, i) for i, t in enumerate(prog.tasks) for d in t.deps}
    assert '1 [label="0U@0", name="0U@0", kind="update", stage=0, replica=0, step=0, layer=0, micro_batch=-1, ' \
           'resources="s0.ddr", duration=5, start=10, end=15];' in text


@pytest.fixture(scope="module")
def tiny_program(tmp_path_factory):
    return compile_tiny_dir(tmp_path_factory.mktemp("critpath") / "tiny", "P=2,D=1,Z=1,b=1,A=4,FSR,deadline")


def test_run_critical_path_of_a_compiled_program_sums_to_its_step_time(tiny_program, capsys):
    assert main(["run", str(tiny_program), "--critical-path"]) == 0
    text = capsys.readouterr().out
    cycles = int(re.search(r"^step time .* \((\d+) cycles\)$", text, re.M)[1])
    chain = text[text.index("critical path of the measured step"):].splitlines()
    total = re.fullmatch(r"  total +(\d+) +\S+ \S+ +100\.00 %", chain[-2])
    assert total and int(total[1]) == cycles
    shares = [float(m[1]) for line in chain[2:-2] if (m := re.search(r" (\d+\.\d\d) %  ", line))]
    assert len(shares) == len(chain) - 4 > 10
    assert sum(shares) == pytest.approx(100.0, abs=0.01 * len(shares))

    assert main(["run", str(tiny_program), "--critical-path", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    crit, res = out["critical_path"], out["results"]
    assert crit["total_cycles"] == crit["step_cycles"] == res["step_cycles"]
    assert crit["total_s"] == pytest.approx(res["step_time_s"], rel=1e-12)
    assert sum(t["share"] for t in crit["tasks"]) == pytest.approx(1.0)
    # the measured step is the second: tasks of the first still running in it count only inside it
    assert crit["window_cycles"][0] > 0
    assert all(t["share_cycles"] <= t["duration_cycles"] for t in crit["tasks"])
    assert sum(t["share_cycles"] * (t["kind"] == "update") for t in crit["tasks"]) == \
        res["critical_path_cycles"]["update"]


def test_run_dag_writes_graphml_and_dot_and_refuses_other_suffixes_and_inputs(tiny_program, tmp_path, capsys):
    graphml, dot = tmp_path / "tasks.graphml", tmp_path / "tasks.dot"
    assert main(["run", str(tiny_program), "--dag", str(graphml)]) == 0
    assert main(["run", str(tiny_program), "--dag", str(dot), "--json"]) == 0
    err = capsys.readouterr().err
    back = nx.read_graphml(graphml, node_type=int)
    assert f"wrote {graphml}: task DAG of {back.number_of_nodes()} tasks and {back.number_of_edges()} " \
           "dependencies (GraphML)" in err
    assert dot.read_text().count(" -> ") == back.number_of_edges()

    assert main(["run", str(tiny_program), "--dag", str(tmp_path / "tasks.png")]) == 1
    assert "--dag " in capsys.readouterr().err and not (tmp_path / "tasks.png").exists()
    link = tmp_path / "program.graphml"
    link.symlink_to(tiny_program / "program.ir")
    before = (tiny_program / "program.ir").read_bytes()
    assert main(["run", str(tiny_program), "--dag", str(link)]) == 1
    assert "would overwrite the program's own program.ir" in capsys.readouterr().err
    assert (tiny_program / "program.ir").read_bytes() == before
    assert main(["run", str(tiny_program), "--kernel", "0:F0", "--critical-path", "--dag", str(graphml)]) == 1
    assert "--critical-path, --dag apply only to the simulation" in capsys.readouterr().err


def test_a_two_stage_program_whose_receive_is_moved_before_its_send_deadlocks(tmp_path, capsys):
    """Stage 0 waits for micro-batch 0's gradient before it sends micro-batch 0's activation,
    which stage 1 waits for before it can send that gradient."""
    module = compile_tiny(P=2, D=1, Z=1, A=2, act="fsr")
    s0 = find_pipeline(module).region.ops[0].region.ops
    first_send = next(op for op in s0 if op.name == "life.send")
    first_recv = next(op for op in s0 if op.name == "life.recv")
    lines = print_module(module).splitlines()
    line_of = {op: next(n for n, line in enumerate(lines) if line.lstrip().startswith(f"%{op.results[0].name} ="))
               for op in (first_send, first_recv)}
    recv_line = lines.pop(line_of[first_recv])
    lines.insert(line_of[first_send], recv_line)
    edited = tmp_path / "deadlock.ir"
    edited.write_text("\n".join(lines) + "\n")
    parse_module(edited.read_text(), str(edited))       # still well-formed text

    assert main(["opt", str(edited)]) == 1
    err = capsys.readouterr().err
    assert f"{edited}:{line_of[first_send] + 1}:" in err
    assert re.search(r"error: the stages deadlock: stage 0 at recv bwd mb 0 \(op #\d+\), "
                     r"stage 1 at recv fwd mb 0 \(op #\d+\) "
                     r"\(a cycle of waits: stage 0 waits for stage 1, which waits for stage 0\)", err), err
