"""The VMAC micro-kernel: one (vmac_rows*groups) x vector_lanes tile of C += A B.

Operand layouts: the left operand sits in SM as [k][rows] (so the vmac_rows values a VMAC
broadcasts for one k are one quad load), the right operand in AM as [k][cols], the
accumulator in AM as [rows][cols] FP32. Registers: v0..v(mr-1) accumulate, v(mr) and
v(mr+1) hold right-operand vectors, quads alternate between two sets of `groups`, so the
next k step's operands load while the current step's VMACs issue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Operand:
    """A tile operand: buffer, base register, leading dimension (elements between k rows / C rows)."""

    buffer: str
    reg: str
    ld: int


def _off(x: int) -> str:
    return f"+{x}" if x > 0 else (f"-{-x}" if x < 0 else "")


def micro_tile(e, *, rows: int, lanes: int, groups: int, unroll: int, k: int,
               left: Operand, right: Operand, acc_in: Operand | None, acc_out: Operand,
               ptrs: tuple[str, str], advance: bool = True) -> None:
    """Emit one micro-tile over k (a multiple of unroll); acc_in=None starts the sum at zero.

    With advance, the right and output base registers move one vector to the right,
    ready for the next tile of the row group.
    """
    g, mr, u = groups, rows * groups, unroll
    rq, rb = ptrs
    vl = [f"vld v{mr}, {right.buffer}[{right.reg}]"]
    if acc_in is not None:
        vl += [f"vld v{r}, {acc_in.buffer}[{acc_in.reg}{_off(r * acc_in.ld)}]" for r in range(mr)]
    sl = [f"sldq q{j}, {left.buffer}[{left.reg}{_off(rows * j)}]" for j in range(g)]
    for b in range(max(len(sl), math.ceil(len(vl) / 2))):
        ins = vl[2 * b:2 * b + 2] + sl[b:b + 1]
        if b == 0:
            ins += [f"mov {rq}, {left.reg}", f"mov {rb}, {right.reg}"]
        e.bundle(*ins)
    n_groups = k // u

    def k_group(first: bool, last: bool):
        for kr in range(u):
            final_k = last and kr == u - 1
            for j in range(g):
                op = "vmacz" if acc_in is None and first and kr == 0 else "vmac"
                ins = [f"{op} v{rows * j}, q{(kr % 2) * g + j}, v{mr + kr % 2}"]
                if not final_k:
                    ins.append(f"sldq q{((kr + 1) % 2) * g + j}, {left.buffer}[{rq}{_off((kr + 1) * left.ld + rows * j)}]")
                    if j == 0:
                        ins.append(f"vld v{mr + (kr + 1) % 2}, {right.buffer}[{rb}{_off((kr + 1) * right.ld)}]")
                if kr == u - 1 and j == g - 1:
                    ins += [f"addi {rq}, {rq}, {u * left.ld}", f"addi {rb}, {rb}, {u * right.ld}"]
                e.bundle(*ins)

    k_group(first=True, last=n_groups == 1)
    if n_groups > 2:
        label = e.open_loop("k", n_groups - 2)
        k_group(first=False, last=False)
        e.close_loop(label)
    if n_groups > 1:
        k_group(first=False, last=True)
    stores = [f"vst v{r}, {acc_out.buffer}[{acc_out.reg}{_off(r * acc_out.ld)}]" for r in range(mr)]
    for b in range(0, mr, 2):
        ins = stores[b:b + 2]
        if advance and b + 2 >= mr:
            ins += [f"addi {acc_out.reg}, {acc_out.reg}, {lanes}", f"addi {right.reg}, {right.reg}, {lanes}"]
        e.bundle(*ins)


def gemm_tile(e, *, rows: int, lanes: int, groups: int, unroll: int, m: int, n: int, k: int,
              left: tuple[str, int, int], right: tuple[str, int, int], out: tuple[str, int, int],
              accumulate: bool, regs: tuple[str, str, str, str, str]) -> None:
    """C[m,n] (+)= L^T-layout x R for whole local buffers: (buffer, element offset or register, leading dim).

    m must be a multiple of rows*groups and n of lanes. regs: left, right and C base
    registers, then the two micro-kernel pointers.
    """
    rl, rr, ra, rq, rb = regs
    mr = rows * groups
    (lbuf, loff, lld), (rbuf, roff, rld), (obuf, ooff, old) = left, right, out
    e.bundle(_set(rl, loff), _set(ra, ooff))
    label = e.open_loop("mg", m // mr) if m > mr else None
    e.bundle(_set(rr, roff))
    inner = e.open_loop("ng", n // lanes) if n > lanes else None
    micro_tile(e, rows=rows, lanes=lanes, groups=groups, unroll=unroll, k=k,
               left=Operand(lbuf, rl, lld), right=Operand(rbuf, rr, rld),
               acc_in=Operand(obuf, ra, old) if accumulate else None, acc_out=Operand(obuf, ra, old),
               ptrs=(rq, rb))
    if inner:
        e.close_loop(inner)
    e.bundle(f"addi {rl}, {rl}, {mr}", f"addi {ra}, {ra}, {mr * old - n}")
    if label:
        e.close_loop(label)


def _set(reg: str, value) -> str:
    """Load a base address: an immediate offset, or a copy of a register holding one."""
    return f"mov {reg}, {value}" if isinstance(value, str) else f"li {reg}, {value}"
