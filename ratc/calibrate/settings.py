"""What a calibration measures, and how long it spends on each figure (full or --quick)."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.errors import RatcError

KB, MB = 1000, 1000 ** 2


@dataclass(frozen=True)
class Settings:
    """The options of `ratc calibrate` and the grids they imply."""

    backend: str = "gloo"
    ranks: int = 2
    threads: int = 1
    quick: bool = False
    timeout_s: float = 60.0     # every wait between ranks; a rank that takes longer ends the calibration

    def __post_init__(self):
        if self.backend not in ("gloo", "nccl"):
            raise RatcError(f"--backend must be gloo or nccl, got {self.backend!r}")
        if self.ranks < 2:
            raise RatcError(f"--ranks must be at least 2 (messages and collectives need two ranks), got {self.ranks}")
        if self.threads < 1:
            raise RatcError(f"--threads must be at least 1, got {self.threads}")

    @property
    def device(self) -> str:
        """gloo measures the CPUs, NCCL the GPUs."""
        return "cpu" if self.backend == "gloo" else "cuda"

    @property
    def repeats(self) -> int:
        """Runs behind every figure (its median and quartiles)."""
        return 5 if self.quick else 7

    @property
    def min_seconds(self) -> float:
        """How long one run of a short operator lasts (many calls, averaged)."""
        return 0.002 if self.quick else 0.01

    @property
    def matmul_dims(self) -> tuple:
        """Each of m, n, k takes these values: the grid spans a small model's layers."""
        return (64, 256) if self.quick else (64, 256, 1024)

    @property
    def layouts(self) -> tuple:
        """Operand layouts: forward (nt), input gradient (nn), weight gradient (tn)."""
        return ("nt",) if self.quick else ("nt", "nn", "tn")

    @property
    def memory_ops(self) -> tuple:
        return ("add", "softmax") if self.quick else ("add", "copy", "softmax", "silu")

    @property
    def messages(self) -> tuple:
        """(bytes, calls per run) of the messages and collectives the fits run through."""
        if self.quick:
            # a largest message whose copy (~10 ms) outweighs the milliseconds a loaded
            # machine's scheduler adds to a call, so the fit still sees time grow with size
            return ((4 * KB, 15), (512 * KB, 9), (16 * MB, 5))
        return ((4 * KB, 41), (64 * KB, 25), (1 * MB, 15), (8 * MB, 7))

    @property
    def beside_calls(self) -> int:
        """Calls per size in a chain of a collective issued beside compute (each a few milliseconds)."""
        return 6 if self.quick else 10

    @property
    def sharing_seconds(self) -> float:
        """How long one run of the sharing measurement lasts: long enough to see the
        ranks contend, not just the scheduler's noise."""
        return 0.02 if self.quick else 0.05

    @property
    def load_seconds(self) -> float:
        """One continuous window of the load measurement: many scheduler slices long."""
        return 0.1 if self.quick else 0.25

    @property
    def sharing_shape(self) -> int:
        """m = n = k of the GEMM whose slow-down under sharing is measured."""
        return 128 if self.quick else 256

    @property
    def cold_rounds(self) -> int:
        """Rounds of each [[cold]] row's sequence per repeat (each call after an eviction of
        up to 4x the last-level cache: milliseconds)."""
        return 4 if self.quick else 8

    def evictions(self, private_bytes: int, cache_bytes: int) -> tuple:
        """Bytes read before every timed call of the [[cold]] rows: from a core's private cache
        to 4x the last-level cache, each twice the last (quick: the private cache, the last
        level and 4x it)."""
        top = 4 * cache_bytes
        if self.quick:
            return tuple(sorted({private_bytes, cache_bytes, top}))
        sizes, n = [], private_bytes
        while n <= top:
            sizes.append(n)
            n *= 2
        return tuple(sizes)

    def command(self, output: str) -> str:
        """The command line that reproduces this calibration."""
        return (f"ratc calibrate -o {output} --backend {self.backend} --ranks {self.ranks} "
                f"--threads {self.threads}" + (" --quick" if self.quick else ""))
