"""Race detection for the kernel VM: shared-memory conflicts between DSPs inside one barrier interval.

Between two barriers the DSPs of a cluster run concurrently, so if one of them writes a GSM
or DDR region that another reads or writes in the same interval, the result depends on
timing. The full-execution VM records every DMA's shared-memory blocks and checks them at
each barrier. Accumulating DMAs ('add') commute with each other and do not race.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Access:
    """A rows x cols block at flat element offset `offset` with row `stride` in one buffer."""

    kind: str  # "r" read, "w" write, "a" accumulate
    buffer: str
    offset: int
    stride: int
    rows: int
    cols: int
    dsp: int
    where: str  # the bundle that issued it

    @property
    def lo(self) -> int:
        return self.offset

    @property
    def hi(self) -> int:
        return self.offset + (self.rows - 1) * self.stride + self.cols

    def indices(self) -> np.ndarray:
        return (self.offset + np.arange(self.rows)[:, None] * self.stride + np.arange(self.cols)).ravel()


def _conflicting_kinds(a: str, b: str) -> bool:
    return not (a == b == "r" or a == b == "a")


def _overlap(a: Access, b: Access) -> bool:
    if a.hi <= b.lo or b.hi <= a.lo:
        return False
    contiguous_a = a.rows == 1 or a.cols == a.stride
    contiguous_b = b.rows == 1 or b.cols == b.stride
    if contiguous_a and contiguous_b:
        return True
    if a.stride == b.stride and a.stride > 0:
        ra, ca = divmod(a.offset, a.stride)
        rb, cb = divmod(b.offset, b.stride)
        if ca + a.cols <= a.stride and cb + b.cols <= b.stride:
            return ra < rb + b.rows and rb < ra + a.rows and ca < cb + b.cols and cb < ca + a.cols
    return np.intersect1d(a.indices(), b.indices(), assume_unique=True).size > 0


def find_race(accesses: list[Access]) -> tuple[Access, Access] | None:
    """The first pair of conflicting accesses from different DSPs, if any."""
    by_buffer: dict[str, list[Access]] = {}
    for acc in accesses:
        by_buffer.setdefault(acc.buffer, []).append(acc)
    for items in by_buffer.values():
        items.sort(key=lambda x: x.lo)
        los = [x.lo for x in items]
        width = max(x.hi - x.lo for x in items)
        for w in items:
            if w.kind == "r":
                continue
            # Every access that can overlap w starts within [w.lo - width, w.hi).
            start = bisect.bisect_left(los, w.lo - width)
            stop = bisect.bisect_left(los, w.hi)
            for other in items[start:stop]:
                if other.dsp != w.dsp and _conflicting_kinds(w.kind, other.kind) and _overlap(w, other):
                    return w, other
    return None
