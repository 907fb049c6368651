"""Kernel reports in the style of llvm-mca: cycles, IPC, slot pressure, MAC utilization, roofline."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.codegen.isa import SLOTS
from ratc.codegen.program import KernelProgram
from ratc.units import format_bytes, format_time


@dataclass(frozen=True)
class KernelStats:
    """Figures of one kernel run; MAC utilization is against the whole cluster's peak."""

    name: str
    dsps: int
    cycles: int
    seconds: float
    bundles: int
    instructions: int
    slots: dict
    executed_macs: int
    useful_macs: int
    mac_utilization: float
    ddr_bytes: int
    compulsory_ddr_bytes: int
    compute_bound_s: float
    ddr_bound_s: float
    compulsory_ddr_bound_s: float

    @property
    def roofline_s(self) -> float:
        """Lower bound on the time of this kernel's own traffic and MACs."""
        return max(self.compute_bound_s, self.ddr_bound_s)

    def as_dict(self) -> dict:
        d = dict(vars(self))
        d["roofline_s"] = self.roofline_s
        return d


def kernel_stats(program: KernelProgram, platform, cycles: int, counts: dict, useful_macs: int | None = None,
                 compulsory_ddr_bytes: int | None = None) -> KernelStats:
    """Derived figures of a run (counts from kernel_timing.static_counts)."""
    clock = platform.dsp.clock
    peak_per_cycle = platform.vliw.vmac_rows * platform.vliw.vector_lanes * platform.cluster.dsps
    useful = counts["macs"] if useful_macs is None else useful_macs
    compulsory = counts["ddr_bytes"] if compulsory_ddr_bytes is None else compulsory_ddr_bytes
    bw = platform.cluster.ddr_bandwidth
    return KernelStats(
        name=program.name, dsps=program.dsps, cycles=cycles, seconds=cycles / clock,
        bundles=counts["bundles"], instructions=counts["instructions"], slots=dict(counts["slots"]),
        executed_macs=counts["macs"], useful_macs=useful,
        mac_utilization=useful / (cycles * peak_per_cycle) if cycles else 0.0,
        ddr_bytes=counts["ddr_bytes"], compulsory_ddr_bytes=compulsory,
        compute_bound_s=useful / platform.cluster.peak_mac_rate,
        ddr_bound_s=counts["ddr_bytes"] / bw, compulsory_ddr_bound_s=compulsory / bw)


def format_report(stats: KernelStats, platform, counted: bool = False) -> str:
    """The llvm-mca-like text report. `counted`: the useful MACs and compulsory bytes are what
    the program itself shows (a .rasm file does not mark padding or scratch arrays)."""
    s = stats
    unknown = " (as executed: a .rasm file does not mark padding)" if counted else ""
    compulsory = ("every declared DDR array moved once: a .rasm file does not mark scratch" if counted
                  else "inputs read once, outputs written once")
    lines = [
        f"Kernel:              {s.name}",
        f"Platform:            {platform.name} ({s.dsps} of {platform.cluster.dsps} DSPs at "
        f"{platform.dsp.clock / 1e9:.4g} GHz)",
        f"Cycles:              {s.cycles}",
        f"Time:                {format_time(s.seconds)}",
        f"Bundles (per DSP):   {s.bundles}",
        f"Instructions:        {s.instructions}",
        f"IPC:                 {s.instructions / s.cycles if s.cycles else 0:.2f}",
        f"Bundles per cycle:   {s.bundles / s.cycles if s.cycles else 0:.3f}",
        "",
        f"MACs (useful):       {s.useful_macs}{unknown}",
        f"MACs (executed):     {s.executed_macs}",
        f"MAC utilization:     {100 * s.mac_utilization:.2f} % of the cluster peak",
        f"DDR bytes:           {s.ddr_bytes} ({format_bytes(s.ddr_bytes)}; compulsory "
        f"{format_bytes(s.compulsory_ddr_bytes)})",
        "",
        "Roofline:",
        f"  compute bound:     {format_time(s.compute_bound_s)} (useful MACs at peak)",
        f"  DDR bound:         {format_time(s.ddr_bound_s)} (this kernel's DDR bytes at "
        f"{platform.cluster.ddr_bandwidth / 1e9:.4g} GB/s)",
        f"  compulsory DDR:    {format_time(s.compulsory_ddr_bound_s)} ({compulsory})",
        f"  bound:             {format_time(s.roofline_s)} -> at most "
        f"{100 * min(1.0, s.compute_bound_s / s.roofline_s) if s.roofline_s else 0:.2f} % MAC utilization; "
        f"achieved {100 * s.roofline_s / s.seconds if s.seconds else 0:.2f} % of the bound",
        "",
        "Resource pressure per slot (issues / cycles, per DSP):",
    ]
    for slot in SLOTS:
        n = s.slots.get(slot, 0)
        frac = n / s.cycles if s.cycles else 0.0
        lines.append(f"  {slot:<7} {100 * frac:6.2f} %  {'#' * round(40 * frac)}")
    return "\n".join(lines) + "\n"
