"""What crosses each unit boundary: the values later units still read (an activation is a set).

A life `!life.act` value "the input of unit i" is, for a real model, every tensor computed by
units < i and read by units >= i (LLaMA: the hidden state plus the rotary cos/sin tables the
embedding unit computed). Its gradient is the gradients of the grad-carrying ones.
"""

from __future__ import annotations

from ratc.vm.functional.units import UnitSet


def live_in(units: UnitSet) -> list[list[str]]:
    """live_in[i]: values produced by units < i and read by units >= i (data inputs excluded)."""
    producer = units.producer()
    n = len(units.units)
    live = [set() for _ in range(n + 1)]
    for unit in units.units:
        for name in unit.inputs:
            if name in producer:
                for j in range(producer[name] + 1, unit.index + 1):
                    live[j].add(name)
    return [sorted(s) for s in live]
