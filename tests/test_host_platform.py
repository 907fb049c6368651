"""Host platform profiles (kind = "host"): their tables, located errors, and what ratc does with them."""

import pytest

from ratc.calibrate.profile import render
from ratc.platform import PlatformError, load_platform, parse_platform
from ratc.platform.errors import KindError
from ratc.platform.host import matmul_efficiency
from ratc.platform.loader import PROFILE_DIR
from ratc.platform.schema import Figure


def fig(median, rel=0.1):
    return Figure(median, median * (1 - rel), median * (1 + rel))


FACTS = {"description": "a made-up 2-core host", "dsps": 1, "dsps_source": "torch threads per rank",
         "memory_budget": 8e9, "memory_source": "made up", "cache": 32 * 2**20, "cache_source": "made up",
         "ranks": 2, "host": {"device": '"cpu"', "backend": '"gloo"', "cores": 2, "ranks": 2, "threads": 1,
                              "dtype": '"float32"', "repeats": 5, "torch": '"2.13.0"'}}
FIGURES = {
    "compute": {"matmul_peak": fig(40e9), "task_forward": fig(30e-6), "task_backward": fig(60e-6),
                "operator_forward": fig(2e-6), "operator_backward": fig(3e-6), "parameter_forward": fig(10e-6),
                "parameter_backward": fig(4e-6),
                # the executor's loop: 6 us after a Forward, 20 us + 1 us a 100 KB saved after a Backward
                "loop_forward": fig(6e-6), "loop_backward": fig(20e-6), "release_bandwidth": fig(100e9),
                "cache_bandwidth": fig(30e9), "memory_bandwidth": fig(6e9),
                "matmul": [((64, 64, 64, "nt"), fig(20e9)), ((256, 256, 256, "nt"), fig(40e9)),
                           ((256, 256, 256, "tn"), fig(30e9))],
                "memory": [("add", 786432, fig(25e-6)), ("add", 201326592, fig(0.033))],
                # the fixed costs again after 1 MiB and 64 MiB read between calls: tasks 1.5x and 4x
                "cold": [(2**20, {"task_forward": fig(45e-6), "task_backward": fig(90e-6), "operator_forward": fig(2e-6),
                                  "operator_backward": fig(3e-6), "parameter_forward": fig(10e-6),
                                  "parameter_backward": fig(4e-6)}),
                         (2**26, {"task_forward": fig(120e-6), "task_backward": fig(240e-6),
                                  "operator_forward": fig(4e-6), "operator_backward": fig(6e-6),
                                  "parameter_forward": fig(20e-6), "parameter_backward": fig(8e-6)})]},
    "p2p": {"latency": fig(100e-6), "bandwidth": fig(2e9)},
    "sharing": {"matmul": fig(1.5), "memory": fig(1.8), "load": fig(1.25), "tasks": fig(1.3), "busy": fig(1.4)},
    "collectives": [(("all_reduce", 2), {"latency": fig(300e-6), "bandwidth": fig(1e9), "tail": fig(4e-3)})],
    # beside compute: the all-reduce 900 us + bytes / 0.5 GB/s, an exchange 2 ms + bytes / 1 GB/s (rows on those lines)
    "beside": [(("all_reduce", 2), [(1000, fig(900e-6 + 1000 / 0.5e9)), (10**7, fig(900e-6 + 10**7 / 0.5e9))]),
               (("p2p", 2), [(1000, fig(2e-3 + 1000 / 1e9)), (10**6, fig(2e-3 + 10**6 / 1e9))])],
}
HOST = render("made-up", "ratc calibrate -o made-up.toml", FACTS, FIGURES)


def test_a_host_profile_holds_its_measured_figures_and_tables():
    p = parse_platform(HOST, "host.toml")
    assert (p.kind, p.has_kernels) == ("host", False)
    assert p.compute.operator_forward == Figure(2e-6, 1.8e-6, 2.2e-6)
    assert [(r.m, r.n, r.k, r.layout) for r in p.matmul] == [(64, 64, 64, "nt"), (256, 256, 256, "nt"),
                                                               (256, 256, 256, "tn")]
    assert p.memory[1].bytes == 201326592 and p.collectives[0].tail.median == 4e-3
    # the planner's summary repeats the measured medians
    assert p.cluster.peak_mac_rate == 40e9 and p.network.intra_node_latency == pytest.approx(100e-6)
    assert p.cluster.gsm_size == 32 * 2**20
    eff = matmul_efficiency(p)[(64, 64, 64, "nt")]
    # 20 G MAC/s [18 .. 22] over the peak's 40 [36 .. 44]: its spread carries the peak's too
    assert (eff.median, eff.q1, eff.q3) == pytest.approx((0.5, 18 / 44, 22 / 36))


def test_todays_dsp_profiles_load_unchanged_as_dsp_platforms():
    for name in ("mt3000", "a800"):
        p = load_platform(name)
        assert (p.kind, p.has_kernels) == ("dsp", True)
        assert set(p.sections) >= {"cluster", "network", "collective", "dsp", "vliw", "dma"}
        assert "kind" not in (PROFILE_DIR / f"{name}.toml").read_text()


def test_a_host_profile_has_no_dsp_sections_and_says_so():
    p = parse_platform(HOST, "host.toml")
    assert not hasattr(p, "vliw")
    with pytest.raises(KindError, match="host.toml: platform 'made-up' is a host profile .* DSP platform's \\[vliw\\]"):
        p.vliw.vector_lanes


def _line_of(text, needle, nth=1):
    """The line number of the nth line that starts with needle."""
    return [i for i, line in enumerate(text.split("\n"), 1) if line.startswith(needle)][nth - 1]


RATE_2 = 'rate = { median = "40G MAC/s", q1 = "36G MAC/s", q3 = "44G MAC/s" }'


@pytest.mark.parametrize("edit,message,line_of", [
    (lambda t: t.replace(RATE_2, RATE_2.replace('q1 = "36G', 'q1 = "-36G')),
     "[[matmul]] entry 2: rate: q1 must be positive, got '-36G MAC/s'", lambda t: _line_of(t, 'rate = { median = "40G')),
    (lambda t: t.replace(RATE_2, RATE_2.replace('q1 = "36G', 'q1 = "41G')),
     "[[matmul]] entry 2: rate: the quartiles must hold the median", lambda t: _line_of(t, 'rate = { median = "40G')),
    (lambda t: t.replace(RATE_2, 'rate = "40G MAC/s"'),
     "[[matmul]] entry 2: rate: expected dict", lambda t: _line_of(t, 'rate = "40G')),
    (lambda t: t.replace(RATE_2, RATE_2.replace("q3", "max")),
     "[[matmul]] entry 2: rate: expected a measured figure { median = ..., q1 = ..., q3 = ... }, unknown key 'max'",
     lambda t: _line_of(t, 'rate = { median = "40G')),
    (lambda t: t.replace('layout = "tn"', 'layout = "tt"'),
     "[[matmul]] entry 3: layout: must be one of 'nt', 'nn', 'tn', got 'tt'", lambda t: _line_of(t, 'layout = "tt"')),
    (lambda t: t.replace('layout = "tn"', 'layout = "nt"'),
     "[[matmul]] entry 3: the same m, n, k, layout as entry 2 (256, 256, 256, nt)",
     lambda t: _line_of(t, "[[matmul]]", nth=3)),
    (lambda t: t.replace("m = 64\n", ""), "[[matmul]] entry 1: missing key 'm'", lambda t: _line_of(t, "[[matmul]]")),
    (lambda t: t.replace("ranks = 2\nlatency", "ranks = 3\nlatency"),
     "[[collectives]] entry 1: ranks: must be 2 to [host].ranks = 2, got 3", lambda t: _line_of(t, "ranks = 3")),
    (lambda t: t.replace('op = "p2p"\nranks = 2', 'op = "p2p"\nranks = 3', 1),
     "[[beside]] entry 3: ranks: must be 2 to [host].ranks = 2, got 3", lambda t: _line_of(t, "ranks = 3")),
    (lambda t: t.replace("bytes = 10000000", "bytes = 1000"),
     "[[beside]] entry 2: the same op, ranks, bytes as entry 1 (all_reduce, 2, 1000)", lambda t: _line_of(t, "[[beside]]", nth=2)),
    (lambda t: t.replace("[[memory]]", "[[mem]]"), "unknown section [mem]", lambda t: 1),
    (lambda t: t.replace('operator_forward = { median = "2us"', 'operator_forward = { median = "2 parsecs"'),
     "[compute].operator_forward: expected a time in h, min, s, ms, us or ns", lambda t: _line_of(t, "operator_forward = ")),
    (lambda t: t.replace('peak_mac_rate = "40G MAC/s"', 'peak_mac_rate = "50G MAC/s"'),
     "[cluster].peak_mac_rate is 5e+10 but [compute].matmul_peak's median is 4e+10", lambda t: _line_of(t, "peak_mac_rate")),
    (lambda t: t.replace('backend = "gloo"', 'backend = "mpi"'),
     "[host].backend: must be one of 'gloo', 'nccl', got 'mpi'", lambda t: _line_of(t, 'backend = "mpi"')),
    (lambda t: t + "\n[vliw]\nvector_lanes = 64\n", "section [vliw] belongs to DSP platforms, but this profile is "
     "kind = 'host'", lambda t: _line_of(t, "[vliw]")),
])
def test_bad_host_tables_are_located_errors(edit, message, line_of):
    text = edit(HOST)
    with pytest.raises(PlatformError) as info:
        parse_platform(text, "host.toml")
    shown = str(info.value)
    assert message in shown
    assert shown.startswith(f"host.toml:{line_of(text)}:"), shown


def test_a_profile_of_an_older_calibrate_says_to_measure_the_machine_again():
    # ratc calibrate measures more in each release ([sharing].tasks, the collectives beside compute)
    text = "\n".join(line for line in HOST.splitlines() if not line.startswith("tasks = "))
    with pytest.raises(PlatformError) as info:
        parse_platform(text, "host.toml")
    shown = str(info.value)
    assert "[sharing]: missing key 'tasks'; a profile of an older `ratc calibrate`? measure this machine " \
           "again: ratc calibrate -o FILE" in shown
    assert shown.startswith(f"host.toml:{_line_of(text, '[sharing]')}:"), shown


def test_a_missing_host_table_is_an_error_naming_it():
    text = HOST[:HOST.index("[[memory]]")] + HOST[HOST.index("[[collectives]]"):]
    with pytest.raises(PlatformError, match="missing \\[\\[memory\\]\\] entries"):
        parse_platform(text, "host.toml")
    # a table a newer calibrate measures: measure the machine again
    with pytest.raises(PlatformError, match="missing \\[\\[beside\\]\\] entries .*older `ratc calibrate`"):
        parse_platform(HOST[:HOST.index("[[beside]]")], "host.toml")


def test_a_dsp_profile_with_host_sections_or_an_unknown_kind_is_refused():
    mt3000 = (PROFILE_DIR / "mt3000.toml").read_text()
    with pytest.raises(PlatformError, match="custom.toml: section \\[compute\\] belongs to host platforms, but this "
                                            "profile is kind = 'dsp' \\(write kind = \"host\" in \\[platform\\]\\)"):
        parse_platform(mt3000 + '\n[compute]\noperator_forward = "1us"\n', "custom.toml")
    with pytest.raises(PlatformError, match="custom.toml: \\[platform\\].kind must be one of 'dsp', 'host', got 'gpu'"):
        parse_platform(mt3000.replace('name = "mt3000"', 'name = "mt3000"\nkind = "gpu"'), "custom.toml")
    with pytest.raises(PlatformError, match="custom.toml: missing section \\[vliw\\]"):
        parse_platform(mt3000[:mt3000.index("[vliw]")] + mt3000[mt3000.index("[dma]"):], "custom.toml")


def test_two_measurements_agree_when_their_medians_differ_by_no_more_than_their_spreads():
    assert Figure(10, 9, 11).agrees(Figure(13, 12, 14))        # 3 apart, spreads 2 + 2
    assert not Figure(10, 9.5, 10.5).agrees(Figure(13, 12.5, 13.5))


def test_a_host_platform_costs_a_model_without_generating_kernels():
    """The planner's unit costs of a host need no [vliw]: no kernels are generated for it."""
    from ratc.frontend.presets import trace_preset
    from ratc.planner.exec_profile import TableExecProfile
    from ratc.planner.opcost import model_units

    host = parse_platform(HOST, "host.toml")
    model = trace_preset("tiny", 64)
    units = model_units(model, TableExecProfile(peak_mac_rate=host.cluster.peak_mac_rate), host, 1)
    assert all(u.kernels.fwd == () and u.kernels.bwd == () for u in units)
    assert all(u.fwd > 0 for u in units)


def test_kernel_timing_of_a_host_platform_is_refused():
    """ratc generates VLIW kernels for DSP machines only: no kernel-vm profile for a host."""
    from ratc.errors import RatcError
    from ratc.planner.exec_profile import KernelVMExecProfile

    with pytest.raises(RatcError, match="'kernel-vm' times ratc's generated VLIW kernels; platform 'made-up' is a host"):
        KernelVMExecProfile(parse_platform(HOST, "host.toml"))


def test_the_codegen_pass_generates_nothing_for_a_host_platform():
    """A pipeline naming codegen leaves a host's program as it was: no kernels, no cycles."""
    from tiny_programs import compile_tiny

    from ratc.ir import print_module
    from ratc.passes.base import PassContext
    from ratc.passes.lifecycle import Codegen

    module = compile_tiny(pipeline="lower-to-life,schedule-1f1b")
    before = print_module(module)
    Codegen().run(module, PassContext(platform=parse_platform(HOST, "host.toml")))
    assert print_module(module) == before and "life.kernel" not in before
