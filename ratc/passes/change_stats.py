"""What a pass pipeline changed in a module: op counts per name, and ops added, removed, moved or re-attributed.

Ops are matched by identity (the same Operation object before and after), which is how
passes edit a module in place: an op a pass rebuilt counts as one removed and one added.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

from ratc.ir.core import Module
from ratc.passes.generic import module_blocks


@dataclass
class Snapshot:
    """A module's ops as a pass found them: per op its block, its index there and its attributes."""

    counts: Counter
    place: dict[int, tuple[int, int]]          # id(op) -> (id(block), index in block)
    attributes: dict[int, dict]
    keep: list = field(repr=False)             # holds the ops and blocks alive so that their ids stay unique


def snapshot(module: Module) -> Snapshot:
    """The module's ops before the passes run (attributes copied: passes may edit them in place)."""
    ops, blocks = list(module.walk()), list(module_blocks(module))
    place = {}
    for block in blocks:
        for i, op in enumerate(block.ops):
            place[id(op)] = (id(block), i)
    return Snapshot(Counter(op.name for op in ops), place, {id(op): dict(op.attributes) for op in ops},
                    ops + blocks)


@dataclass
class ChangeStats:
    """Op counts per name before and after, and the ops added, removed, moved and re-attributed."""

    before: dict[str, int]
    after: dict[str, int]
    added: int
    removed: int
    moved: int
    attributes_changed: int

    def as_dict(self) -> dict:
        names = sorted(set(self.before) | set(self.after))
        return {"ops": {n: {"before": self.before.get(n, 0), "after": self.after.get(n, 0)} for n in names},
                "added": self.added, "removed": self.removed, "moved": self.moved,
                "attributes_changed": self.attributes_changed,
                "total": {"before": sum(self.before.values()), "after": sum(self.after.values())}}

    def text(self, only_changed: bool = False) -> str:
        """A table of op counts per name (only those that changed, if asked) and a one-line summary."""
        d = self.as_dict()
        rows = [(n, c["before"], c["after"]) for n, c in d["ops"].items()
                if not only_changed or c["before"] != c["after"]]
        rows.append(("total", d["total"]["before"], d["total"]["after"]))
        width = max(len("ops by name"), *(len(r[0]) for r in rows))
        lines = [f"{'ops by name':<{width}}  {'before':>8}  {'after':>8}  {'change':>8}"]
        lines += [f"{n:<{width}}  {b:>8}  {a:>8}  {a - b:>+8}" for n, b, a in rows]
        lines.append(f"changed: {self.added} ops added, {self.removed} removed, {self.moved} moved, "
                     f"{self.attributes_changed} with attributes changed")
        return "\n".join(lines) + "\n"


def change_stats(before: Snapshot, module: Module) -> ChangeStats:
    """What happened between `before` and the module now."""
    after_ops = list(module.walk())
    kept = [op for op in after_ops if id(op) in before.place]
    changed = sum(1 for op in kept if op.attributes != before.attributes[id(op)])
    return ChangeStats(before=dict(sorted(before.counts.items())),
                       after=dict(sorted(Counter(op.name for op in after_ops).items())),
                       added=len(after_ops) - len(kept), removed=len(before.place) - len(kept),
                       moved=_moved(before, module), attributes_changed=changed)


def _moved(before: Snapshot, module: Module) -> int:
    """Ops kept but not in their old order: those outside the longest run kept in order within
    each block, plus every op now in another block."""
    moved = 0
    for block in module_blocks(module):
        old = [before.place.get(id(op)) for op in block.ops]
        here = [i for place in old if place is not None and place[0] == id(block) for i in [place[1]]]
        moved += sum(1 for place in old if place is not None and place[0] != id(block))
        moved += len(here) - _longest_increasing(here)
    return moved


def _longest_increasing(xs: list[int]) -> int:
    """The length of the longest strictly increasing subsequence (patience sorting)."""
    tails: list[int] = []
    for x in xs:
        k = bisect.bisect_left(tails, x)
        if k == len(tails):
            tails.append(x)
        else:
            tails[k] = x
    return len(tails)
