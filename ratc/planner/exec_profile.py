"""Execution profiles: how fast the backend runs one GEMM (pluggable; default from paper Table 5)."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from functools import lru_cache

from ratc.errors import RatcError

# The paper's measured FP16 GEMM backend (review, Table 5, "at sequence length 2048"):
# shape N x K with M = 2048 rows, and the MAC utilization it sustained. The latencies of
# that table equal M*N*K / (utilization * 8.1e12), which is how the shape is read; at the
# profile's 8.1 TFLOPS = 4.05e12 MAC/s peak each GEMM takes twice that (mt3000.toml).
PAPER_TABLE5 = (
    ((2048, 4096, 4096), 0.6496),
    ((2048, 4096, 11008), 0.6616),
    ((2048, 11008, 4096), 0.6513),
    ((2048, 6656, 6656), 0.6735),
    ((2048, 8192, 8192), 0.6813),
)


class ExecutionProfile:
    """What the planner asks of a backend: sustained GEMM time and DDR-bound op time.

    A profile that `runs_kernels` times GEMM and attention ops as the generated kernels
    that run them (ratc.codegen.op_kernels), via `kernel(kind, shape)`; otherwise GEMMs
    run at `gemm_efficiency` of peak and every op at its roofline.
    """

    runs_kernels = False
    cost_source = ""          # where its operator costs come from, said beside every step time
    prices_ops = False      # True: `op_times` prices every traced op itself (a host profile)
    recipe = None           # the training recipe its backend runs, if not the planner's default
    element_bytes = None    # bytes per activation element it runs, if not the traced dtype's

    def for_program(self, ranks: int, b: int, params: float = 0.0) -> "ExecutionProfile":
        """This profile for a program of `ranks` processes running micro-batches of `b`
        sequences, each rank holding `params` parameter elements (a host's ranks share its
        cores, its tasks' fixed costs are per task and grow with what its step moves)."""
        return self

    def unit_overhead(self, layer, saved: float = 0.0, dtype_bytes: int = 4) -> tuple:
        """(forward, backward) seconds per sequence a layer's unit's tasks pay beyond their ops
        (`saved`: bytes per sequence its Forward keeps, in elements of `dtype_bytes`)."""
        return 0.0, 0.0

    def kernel(self, kind: str, shape: tuple) -> dict:  # pragma: no cover - interface
        raise NotImplementedError

    def gemm_time(self, m: int, n: int, k: int) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def gemm_efficiency(self, m: int, n: int, k: int) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def with_tiles(self, tiles: tuple) -> "ExecutionProfile":
        """This profile with some kernels generated with other tiles (only a profile that runs
        kernels prices tiles)."""
        return self


@dataclass(frozen=True)
class TableExecProfile(ExecutionProfile):
    """GEMM utilization from measured (shape, utilization) points, as a trend in GEMM size.

    The paper reports that larger GEMMs sustain slightly higher utilization; the trend is a
    least-squares line of utilization against ln(M*N*K) through the measured points,
    clamped to the measured range so no shape is credited beyond what was measured.
    """

    peak_mac_rate: float
    points: tuple = PAPER_TABLE5
    cost_source = "the paper's Table 5 GEMM efficiencies"

    def gemm_efficiency(self, m: int, n: int, k: int) -> float:
        return _trend(self.points, m * n * k)

    def gemm_time(self, m: int, n: int, k: int) -> float:
        """Seconds for an (m, n, k) GEMM, compute side only (DDR is bounded by the caller)."""
        return m * n * k / (self.peak_mac_rate * self.gemm_efficiency(m, n, k))


@lru_cache(maxsize=65536)
def _trend(points: tuple, macs: int) -> float:
    xs = [math.log(a * b * c) for (a, b, c), _ in points]
    ys = [u for _, u in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    util = my + slope * (math.log(max(macs, 1)) - mx)
    return min(max(util, min(ys)), max(ys))


@dataclass(frozen=True)
class KernelVMExecProfile(ExecutionProfile):
    """GEMM times measured by ratc's kernel VM (ratc.codegen.exec_profile.gemm_time)."""

    cost_source = "generated kernels timed on the kernel VM"
    platform: object
    # ((kind, shape), ((option, value), ...)) of kernels generated with other tiles than the
    # default search picks (a program compiled with --tiles); every other kernel is the default
    tiles: tuple = ()
    runs_kernels = True

    def __post_init__(self):
        if not self.platform.has_kernels:    # ratc generates VLIW kernels for DSP machines only
            raise RatcError(f"execution profile 'kernel-vm' times ratc's generated VLIW kernels; platform "
                            f"{self.platform.name!r} is a host profile, for which none are generated")

    def kernel(self, kind: str, shape: tuple) -> dict:
        """The generated kernel's figures (cycles, seconds, ddr_bytes, ...)."""
        from ratc.codegen.exec_profile import kernel_profile
        options = dict(self._tiles.get((kind, tuple(shape)), ())) if self.tiles else {}
        return kernel_profile(self.platform, kind, shape, **options)

    @functools.cached_property
    def _tiles(self) -> dict:
        return dict(self.tiles)

    def with_tiles(self, tiles: tuple) -> "KernelVMExecProfile":
        return dataclasses.replace(self, tiles=tiles)

    def gemm_time(self, m: int, n: int, k: int) -> float:
        return self.kernel("gemm", (m, n, k))["seconds"]

    def gemm_efficiency(self, m: int, n: int, k: int) -> float:
        return m * n * k / (self.platform.cluster.peak_mac_rate * self.gemm_time(m, n, k))


EXEC_PROFILES = ("paper-table5", "kernel-vm", "host")


def load_exec_profile(platform, name: str = "paper-table5") -> ExecutionProfile:
    """The named execution profile for a platform; a host platform's is always 'host' (its
    measured tables), since the DSP profiles price a machine it is not."""
    if not platform.has_kernels:
        from ratc.planner.host_exec import HostExecProfile
        return HostExecProfile(platform)
    if name == "host":
        raise RatcError(f"execution profile 'host' prices a host profile's measured tables (kind = \"host\", "
                        f"written by ratc calibrate); platform {platform.name!r} is a DSP machine")
    if name == "paper-table5":
        return TableExecProfile(peak_mac_rate=platform.cluster.peak_mac_rate)
    if name == "kernel-vm":
        try:
            import ratc.codegen.exec_profile  # noqa: F401
        except ImportError:
            raise RatcError("execution profile 'kernel-vm' needs ratc.codegen.exec_profile, "
                            "which this build does not have; use 'paper-table5'") from None
        return KernelVMExecProfile(platform)
    raise RatcError(f"unknown execution profile {name!r} (known: {', '.join(EXEC_PROFILES)})")
