"""Host profiles (kind = "host", written by `ratc calibrate`): located errors and consistency."""

from __future__ import annotations

import re

from ratc.errors import SourceLocation
from ratc.platform.errors import LocatedPlatformError
from ratc.platform.schema import Figure

# How far a summary figure may sit from the measured one it repeats (both are written rounded).
TOLERANCE = 0.005


class Locator:
    """Finds where a table, an entry of an array of tables, or a key is in a profile's text."""

    def __init__(self, source: str, text: str):
        self.source, self.text = source, text
        self.lines = text.split("\n")

    def at(self, table: str | None, index: int | None = None, key: str | None = None) -> SourceLocation:
        """The key's line in the table (the index-th [[table]] entry if index is given), else the
        table's header, else the first line."""
        header = f"[[{table}]]" if index is not None else f"[{table}]"
        seen, found = -1, None
        for i, line in enumerate(self.lines):
            head = line.split("#", 1)[0].strip().replace(" ", "")
            if head.startswith("["):
                if found is not None:
                    break
                if head == header:
                    seen += 1
                    if index is None or seen == index:
                        found = SourceLocation(self.source, i + 1, line.index("[") + 1, self.text)
                continue
            m = re.match(rf"\s*{re.escape(key)}\s*=", line) if found is not None and key else None
            if m:
                return SourceLocation(self.source, i + 1, line.index(key) + 1, self.text)
        return found or SourceLocation(self.source, 1, 1, self.text)

    def fail(self, message: str, table: str | None = None, index: int | None = None, key: str | None = None):
        """Raise the error at the table, entry or key it is about."""
        raise LocatedPlatformError(message, self.at(table, index, key))


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b))


def check_host(sections: dict, fail) -> None:
    """A host profile's summaries repeat its measured figures, and its tables are consistent."""
    c, n, comp, p2p = sections["cluster"], sections["network"], sections["compute"], sections["p2p"]
    # [cluster] and [network] are the planner's summary of the machine: the measured medians
    for table, key, value, source, figure in (
            ("cluster", "peak_mac_rate", c.peak_mac_rate, "[compute].matmul_peak", comp.matmul_peak),
            ("cluster", "ddr_bandwidth", c.ddr_bandwidth, "[compute].memory_bandwidth", comp.memory_bandwidth),
            ("network", "intra_node_latency", n.intra_node_latency, "[p2p].latency", p2p.latency),
            ("network", "intra_node_bandwidth", n.intra_node_bandwidth, "[p2p].bandwidth", p2p.bandwidth)):
        if not _near(value, figure.median):
            fail(f"[{table}].{key} is {value:.4g} but {source}'s median is {figure.median:.4g}; "
                 "a host profile's summary repeats its measured medians", table, None, key)
    rows = sections["matmul"]
    best = max(row.rate.median for row in rows)
    if not _near(best, comp.matmul_peak.median):
        fail(f"[compute].matmul_peak's median is {comp.matmul_peak.median:.4g} MAC/s but the best [[matmul]] "
             f"rate is {best:.4g} MAC/s; the peak is the best measured rate", "compute", None, "matmul_peak")
    _unique(fail, "matmul", [(r.m, r.n, r.k, r.layout) for r in rows], "m, n, k, layout")
    _unique(fail, "memory", [(r.op, r.bytes) for r in sections["memory"]], "op, bytes")
    _unique(fail, "cold", [(r.evicted,) for r in sections["cold"]], "evicted")
    coll = sections["collectives"]
    _unique(fail, "collectives", [(r.op, r.ranks) for r in coll], "op, ranks")
    _unique(fail, "beside", [(r.op, r.ranks, r.bytes) for r in sections["beside"]], "op, ranks, bytes")
    ranks = sections["host"].ranks
    for table in ("collectives", "beside"):
        for i, row in enumerate(sections[table]):
            if not 2 <= row.ranks <= ranks:
                fail(f"[[{table}]] entry {i + 1}: ranks: must be 2 to [host].ranks = {ranks}, got {row.ranks}",
                     table, i, "ranks")


def _unique(fail, table: str, keys: list, names: str) -> None:
    """No two entries of a table measure the same thing."""
    seen = {}
    for i, key in enumerate(keys):
        if key in seen:
            fail(f"[[{table}]] entry {i + 1}: the same {names} as entry {seen[key] + 1} ({', '.join(map(str, key))})",
                 table, i)
        seen[key] = i


def matmul_efficiency(platform) -> dict:
    """{(m, n, k, layout): the GEMM's rate as a fraction of [compute].matmul_peak} of a host
    profile: the efficiency table by shape (as the paper's Table 5 is for its machine), which a
    common slow-down of the whole machine (other load) leaves unchanged. Its median is the
    medians' ratio; its spread the rate's and the peak's together (the ratio of the rate's
    quartiles over the peak's other ones): the peak is a measured figure too."""
    peak = platform.compute.matmul_peak
    return {(r.m, r.n, r.k, r.layout): Figure(r.rate.median / peak.median, r.rate.q1 / peak.q3, r.rate.q3 / peak.q1)
            for r in platform.matmul}
