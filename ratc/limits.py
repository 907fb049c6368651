"""The documented limits on input sizes, each checked before the work and set by an env variable."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ratc.errors import RatcError


@dataclass(frozen=True)
class Limit:
    """A bound on one quantity: its environment override, default and what it bounds."""

    env: str
    default: int
    what: str           # the bounded quantity, e.g. "IR text size"
    unit: str = ""      # "bytes" makes the override accept sizes such as 2GiB

    def value(self) -> int:
        """The limit in force: the environment's override, else the default."""
        raw = os.environ.get(self.env)
        if raw is None or not raw.strip():
            return self.default
        try:
            if self.unit == "bytes" and not raw.strip().isdigit():
                from ratc.units import parse_bytes
                got = parse_bytes(raw.strip())
            else:
                got = int(raw.strip())
        except ValueError:
            kind = "a byte size such as 2GiB" if self.unit == "bytes" else "a whole number"
            raise RatcError(f"${self.env} must be {kind}, got {raw!r}") from None
        if got <= 0:
            raise RatcError(f"${self.env} must be positive, got {raw!r}")
        return got

    def check(self, amount: float, subject: str, hint: str = "") -> None:
        """Raise a RatcError naming the subject, the limit and its override when amount exceeds
        it; `hint` says what else the user can do."""
        limit = self.value()
        if amount > limit:
            raise RatcError(f"{subject}: {self.what} {_show(amount, self.unit)} exceeds the limit of "
                            f"{_show(limit, self.unit)} (set ${self.env} to raise it{hint})")

    def check_file(self, path) -> None:
        """check() on a file's size, before it is read (a file that cannot be stat'ed is left
        to its reader, which names the problem)."""
        try:
            size = os.stat(path).st_size
        except (OSError, ValueError):
            return
        self.check(size, str(path))


def _show(n: float, unit: str) -> str:
    if unit == "bytes":
        from ratc.units import format_bytes
        return format_bytes(int(n))
    return f"{int(n):,}"


# Parsing keeps ~6 bytes of memory per byte of line-structured IR text (as ratc prints it)
# and up to ~40 for hand-laid-out text (docs/reliability.md).
MAX_IR_BYTES = Limit("RATC_MAX_IR_BYTES", 10**9, "IR text size", "bytes")
# The kernel VM's full mode runs ~200,000 bundles a second and keeps every DDR and GSM
# buffer in memory.
MAX_KERNEL_STEPS = Limit("RATC_MAX_KERNEL_STEPS", 100_000_000, "bundles to execute (all DSPs)")
MAX_KERNEL_BYTES = Limit("RATC_MAX_KERNEL_BYTES", 4 * 10**9, "DDR and GSM buffers", "bytes")
# Planner searches enumerate the divisors of the cluster count and schedules per sequence.
MAX_CLUSTERS = Limit("RATC_MAX_CLUSTERS", 65_536, "cluster count")
MAX_SEQ_LEN = Limit("RATC_MAX_SEQ_LEN", 1_048_576, "sequence length")

# A step's program holds every micro-batch's tasks: beyond this it would take minutes and
# gigabytes to build and simulate (the planner's Eq. 12 ranks any M in microseconds).
MAX_MICRO_BATCHES = 16384

# every limit, as docs/reliability.md lists them
ALL = (MAX_IR_BYTES, MAX_KERNEL_STEPS, MAX_KERNEL_BYTES, MAX_CLUSTERS, MAX_SEQ_LEN)
