"""The host profile ratc calibrate writes: TOML text with units, and which files it may replace."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ratc.errors import OutputError
from ratc.platform.schema import Figure

HEADER = "# Written by ratc calibrate; sha256 of the lines below: "
MAX_OWN_BYTES = 1 << 20     # a file larger than this is not a host profile ratc wrote
FIXED_COSTS = ("task_forward", "task_backward", "operator_forward", "operator_backward", "parameter_forward",
               "parameter_backward")     # [compute]'s fixed costs, in the order written
MEMORY_SHARE = 0.9          # of the machine's memory, for the ranks' training state

_SCALES = {
    "time": (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)),
    "bandwidth": (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3), ("B/s", 1.0)),
    "mac_rate": (("T MAC/s", 1e12), ("G MAC/s", 1e9), ("M MAC/s", 1e6), ("K MAC/s", 1e3), (" MAC/s", 1.0)),
    "bytes": (("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1.0)),
}


def quantity(value: float, kind: str) -> str:
    """A TOML value with its unit, four significant digits (a float kind: a bare number)."""
    if kind == "float":
        return f"{value:.4g}"
    if kind == "bytes":     # a cache size is exact in binary units
        exact = next((f'"{int(value) // s}{u}"' for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
                      if value >= s and value == int(value) and int(value) % s == 0), None)
        if exact:
            return exact
    scales = _SCALES[kind]
    unit, scale = next(((u, s) for u, s in scales if abs(value) >= s), scales[-1])
    return f'"{value / scale:.4g}{unit}"'


def measured(fig: Figure, kind: str) -> str:
    """A figure as an inline table: its median and the quartiles of its runs."""
    return (f"{{ median = {quantity(fig.median, kind)}, q1 = {quantity(fig.q1, kind)}, "
            f"q3 = {quantity(fig.q3, kind)} }}")


def signed(body: str) -> str:
    """The profile text: a first line that says ratc wrote it and hashes what follows."""
    return f"{HEADER}{hashlib.sha256(body.encode()).hexdigest()}\n{body}"


def written_by_calibrate(text: str) -> bool:
    """Whether the text is a profile ratc calibrate wrote, unchanged since."""
    first, _, body = text.partition("\n")
    return first == f"{HEADER}{hashlib.sha256(body.encode()).hexdigest()}"


def check_replaceable(path: str) -> None:
    """Refuse an output that is an input or a program's file (ratc.io.check_output), or a file
    that ratc calibrate did not write or that was edited since (its hash no longer matches)."""
    from ratc.io import check_output

    check_output(path, "-o")
    target = Path(path)
    if not target.is_file() or target.stat().st_size == 0:
        return
    try:
        ours = target.stat().st_size <= MAX_OWN_BYTES and written_by_calibrate(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        ours = False
    if not ours:
        raise OutputError(f"-o {path}: refusing to overwrite a file that ratc calibrate did not write (or that was "
                          "edited since: its first line's sha256 does not match); choose another name")


def render(name: str, command: str, facts: dict, figures: dict) -> str:
    """The host profile's text (signed), from the machine's facts and the measured figures."""
    comp, p2p = figures["compute"], figures["p2p"]
    lines = [
        "# A host platform profile: this machine as measured by",
        f"#   {command}",
        "# on microbenchmarks only. Each figure is the median of [host].repeats runs; q1 and q3 are",
        "# the quartiles of those runs (its spread). Times are per call.",
        "",
        "[platform]",
        f'name = "{name}"',
        'kind = "host"',
        f'description = "{facts["description"]}"',
        "",
        "[cluster]",
        "# One rank is one cluster. The planner's summary of the machine: each value repeats a",
        "# measured median below, and the loader checks that they agree.",
        f"dsps = {facts['dsps']}   # {facts['dsps_source']}",
        f"peak_mac_rate = {quantity(comp['matmul_peak'].median, 'mac_rate')}   # [compute].matmul_peak",
        f"memory_budget = {quantity(facts['memory_budget'], 'bytes')}   # {facts['memory_source']}",
        f"ddr_bandwidth = {quantity(comp['memory_bandwidth'].median, 'bandwidth')}   # [compute].memory_bandwidth",
        f"gsm_size = {quantity(facts['cache'], 'bytes')}   # {facts['cache_source']}",
        "",
        "[network]",
        "# Every rank runs on this host; no link between hosts was measured, so the [p2p] medians",
        "# stand for it too.",
        f"clusters_per_node = {facts['ranks']}",
        *(f"{where}_node_{key} = {quantity(p2p[key].median, kind)}"
          for where in ("intra", "inter") for key, kind in (("bandwidth", "bandwidth"), ("latency", "time"))),
        "",
        "[collective]",
        'algorithm = "ring"',
        "",
        *_host_sections(facts, figures),
    ]
    return signed("\n".join(lines) + "\n")


def _host_sections(facts: dict, figures: dict) -> list[str]:
    """[host], [compute], [p2p], [sharing] and the [[matmul]], [[memory]], [[cold]], [[collectives]],
    [[beside]] tables."""
    comp = figures["compute"]
    lines = ["[host]", *(f"{key} = {value}" for key, value in facts["host"].items()), "",
             "[compute]",
             f"matmul_peak = {measured(comp['matmul_peak'], 'mac_rate')}",
             *(f"{key} = {measured(comp[key], 'time')}" for key in FIXED_COSTS),
             *(f"{key} = {measured(comp[key], 'time')}" for key in ("loop_forward", "loop_backward")),
             f"release_bandwidth = {measured(comp['release_bandwidth'], 'bandwidth')}",
             f"cache_bandwidth = {measured(comp['cache_bandwidth'], 'bandwidth')}",
             f"memory_bandwidth = {measured(comp['memory_bandwidth'], 'bandwidth')}", "",
             "[p2p]",
             *(f"{key} = {measured(fig, kind)}"
               for (key, fig), kind in zip(figures["p2p"].items(), ("time", "bandwidth"))), "",
             "[sharing]",
             *(f"{key} = {measured(fig, 'float')}" for key, fig in figures["sharing"].items())]
    for (m, n, k, layout), rate in comp["matmul"]:
        lines += ["", "[[matmul]]", f'm = {m}', f'n = {n}', f'k = {k}', f'layout = "{layout}"',
                  f"rate = {measured(rate, 'mac_rate')}"]
    for op, nbytes, seconds in comp["memory"]:
        lines += ["", "[[memory]]", f'op = "{op}"', f"bytes = {nbytes}", f"seconds = {measured(seconds, 'time')}"]
    for nbytes, figs in comp["cold"]:
        lines += ["", "[[cold]]", f"evicted = {nbytes}",
                  *(f"{key} = {measured(figs[key], 'time')}" for key in FIXED_COSTS)]
    for (op, ranks), figs in figures["collectives"]:
        lines += ["", "[[collectives]]", f'op = "{op}"', f"ranks = {ranks}",
                  *(f"{key} = {measured(figs[key], kind)}"
                    for key, kind in (("latency", "time"), ("bandwidth", "bandwidth"), ("tail", "time")))]
    for (op, ranks), rows in figures["beside"]:
        for nbytes, seconds in rows:
            lines += ["", "[[beside]]", f'op = "{op}"', f"ranks = {ranks}", f"bytes = {nbytes}",
                      f"seconds = {measured(seconds, 'time')}"]
    return lines
