"""Task names: torch.distributed.pipelining's action notation, extended for ratc.

A task is named `<stage><kind>[<micro-batch>][@<unit>]`: the micro-batch before `@`, the
unit after it (0 the embedding, 1..L the decoder layers, L+1 the head). torch's own
`0F3` (Forward of micro-batch 3 on stage 0) becomes `0F3@12` with the layer; a state task
has no micro-batch (`0G@12`), a stage-boundary transfer no unit (`0SEND_F3`; interleaved,
v > 1, the boundary's: the later virtual stage's first unit, `0SEND_F3@5`). In a
listing, consecutive per-layer tokens of one task collapse into a range in issue order
(`0F3@0-4`, `0B3@4-0`); a ring collective's steps on the system VM carry `#<step>`
(`0G@12#1`). This module is the one definition: the VM, the distributed runtime, the
diagram and `schedule.txt` write names with `token`, and readers parse them with `parse`.
PrefetchW is `P`, not `W`, because torch's notation already uses `W` (weight-gradient
backward) and `I` (input-gradient backward), which zero-bubble schedules run (`0I3@12`,
`0W3@12`: the two parts of `0B3@12`).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ratc.errors import RatcError

# kind -> (long name, op, needs a micro-batch, needs a unit)
KINDS = {
    "F": ("Forward", "life.fwd", True, True),
    "R": ("Recover (recomputation)", "life.recover", True, True),
    "B": ("Backward", "life.bwd", True, True),
    "I": ("Backward to the input (input gradient)", "life.bwd_i", True, True),
    "W": ("Backward to the weights (weight gradient)", "life.bwd_w", True, True),
    "G": ("GradSync", "life.grad_sync", False, True),
    "U": ("UpdateShard", "life.update", False, True),
    "P": ("PrefetchW", "life.prefetch", False, True),
    "RS": ("Reduce-scatter", "life.reduce", True, True),
    "AG": ("All-gather", "life.gather", True, True),
    "T": ("TieSum", "life.tie_sum", False, True),
    "SEND_F": ("Send", "life.send", True, False),
    "RECV_F": ("Receive", "life.recv", True, False),
    "SEND_B": ("Send", "life.send", True, False),
    "RECV_B": ("Receive", "life.recv", True, False),
    "PARAM": ("Parameters", "life.param", False, True),
    "OPT": ("Optimizer state", "life.opt", False, True),
    "STEP_END": ("End of the step", "life.step_end", False, False),
}
_KIND_OF_OP = {op: k for k, (_, op, _, _) in KINDS.items() if op not in ("life.send", "life.recv")}
_TRANSFERS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
_PHASE = {"fwd": "F", "rec": "R", "bwd": "B"}         # a ZeRO-3 gather's phase -> letter
_PHASE_NAME = {"F": "forward", "R": "recovery", "B": "backward"}
# Longer kinds first, so `0PARAM@3` is not read as `0P`, nor `0RS0@8` as `0R`.
_NAME = re.compile(r"(?P<stage>\d+)(?P<kind>SEND_[FB]|RECV_[FB]|AG_(?P<phase>[FRB])|RS|PARAM|OPT|STEP_END|[FRBIWGUPT])"
                   r"(?P<mb>\d+)?(?:@(?P<unit>\d+)(?:-(?P<last>\d+))?)?(?:#(?P<ring>\d+))?")

LEGEND = """\
# Each stage's tasks in issue order, in torch.distributed.pipelining's action notation
# <stage><kind><micro-batch>, with the unit after '@': 0 the embedding, 1..L the decoder
# layers, L+1 the head. 0F3@12 is stage 0's Forward of micro-batch 3 through layer 12.
#   F Forward   R Recover (recomputation)   B Backward          (<stage><kind><mb>@<unit>)
#   I, W a zero-bubble Backward's input- and weight-gradient parts (0I3@12, then 0W3@12)
#   G GradSync  U UpdateShard (optimizer)   P PrefetchW         (<stage><kind>@<unit>)
#   SEND_F / RECV_F activation to / from the next stage, SEND_B / RECV_B gradient to / from
#   the previous one (<stage><kind><mb>); RS ZeRO-2 reduce-scatter of a micro-batch's
#   gradient (0RS3@12); AG_F / AG_R / AG_B ZeRO-3 parameter all-gather for a Forward,
#   Recover or Backward (0AG_F3@12); T TieSum of a tied gradient (0T@0).
# Consecutive layers of one task collapse into a range in issue order: 0F3@0-4 is the
# Forward of micro-batch 3 through units 0 to 4, 0B3@4-0 its Backward back down.
"""


class Action(NamedTuple):
    """A parsed task name; `last` is a range's last unit (= unit when one), `phase` a
    gather's F/R/B, `ring` a ring collective's step on the system VM."""

    stage: int
    kind: str
    mb: int | None = None
    unit: int | None = None
    last: int | None = None
    phase: str | None = None
    ring: int | None = None

    def __str__(self) -> str:
        kind = f"AG_{self.phase}" if self.kind == "AG" else self.kind
        mb = "" if self.mb is None else self.mb
        unit = "" if self.unit is None else f"@{self.unit}" if self.last in (None, self.unit) else \
            f"@{self.unit}-{self.last}"
        return f"{self.stage}{kind}{mb}{unit}{'' if self.ring is None else f'#{self.ring}'}"


def action(op, p: int) -> Action:
    """The Action of a life op on stage p."""
    a = op.attributes
    n = op.name
    if n in ("life.send", "life.recv"):
        # (interleaved, the boundary unit: two stages then exchange several per micro-batch)
        return Action(p, f"{n[5:].upper()}_{'F' if a['dir'] == 'fwd' else 'B'}", a["mb"], a.get("unit"), a.get("unit"))
    kind = _KIND_OF_OP.get(n)
    if kind is None:
        raise RatcError(f"{n} has no task name (not a task of a stage program)")
    _, _, has_mb, has_unit = KINDS[kind]
    unit = a["unit"] if has_unit else None
    return Action(p, kind, a["mb"] if has_mb else None, unit, unit, _PHASE[a["phase"]] if kind == "AG" else None)


# Kinds written straight from the op's attributes (the system VM names every op of a
# program: this skips building an Action for the common tasks; the round-trip test
# checks both paths against parse).
_MB_UNIT = {op: k for op, k in _KIND_OF_OP.items() if k in ("F", "R", "B", "I", "W", "RS")}
_UNIT_ONLY = {op: k for op, k in _KIND_OF_OP.items() if k in ("G", "U", "P", "T", "PARAM", "OPT")}


def token(op, p: int) -> str:
    """The op's task name on stage p, e.g. '0F3@12', '0G@12', '0SEND_F3'."""
    name = op.name
    kind = _MB_UNIT.get(name)
    if kind is not None:
        a = op.attributes
        return f"{p}{kind}{a['mb']}@{a['unit']}"
    kind = _UNIT_ONLY.get(name)
    if kind is not None:
        return f"{p}{kind}@{op.attributes['unit']}"
    return str(action(op, p))


def parse(name: str) -> Action:
    """The Action a task name (or a listing's range token) stands for; refuses anything else."""
    m = _NAME.fullmatch(name)
    if m is None:
        raise RatcError(f"task {name!r} is not in action notation (stage number, then F, B, R, G, U, P, "
                        "SEND_F, ...; see `ratc.lifecycle.actions`)")
    kind = m["kind"][:2] if m["phase"] else m["kind"]
    _, _, has_mb, has_unit = KINDS[kind]
    # (an interleaved transfer names its boundary unit: `0SEND_F3@5`)
    unit_ok = m["unit"] is None or m["last"] is None if kind in _TRANSFERS else (m["unit"] is not None) == has_unit
    if (m["mb"] is not None) != has_mb or not unit_ok:
        parts = " and ".join(w for w, has in (("a micro-batch", has_mb), ("a unit after '@'", has_unit)) if has)
        raise RatcError(f"task {name!r}: a {m['kind']} task names {parts or 'neither micro-batch nor unit'}")
    num = (lambda g: None if m[g] is None else int(m[g]))  # noqa: E731
    unit = num("unit")
    return Action(int(m["stage"]), kind, num("mb"), unit, unit if m["last"] is None else int(m["last"]),
                  m["phase"], num("ring"))


def try_parse(name: str) -> Action | None:
    """parse(name), or None when the name is not in action notation (a checkpoint's task)."""
    try:
        return parse(name)
    except RatcError:
        return None


def extend(run: Action, nxt: Action) -> Action | None:
    """`run` grown by `nxt` when nxt is the same task on the unit after run's last in run's
    direction (a single unit goes either way); else None."""
    if run.unit is None or run.ring is not None or nxt.ring is not None or nxt.last != nxt.unit \
            or run[:3] != nxt[:3] or run.phase != nxt.phase:
        return None
    step = run.last - run.unit
    want = (run.last + 1, run.last - 1) if step == 0 else (run.last + (1 if step > 0 else -1),)
    return run._replace(last=nxt.unit) if nxt.unit in want else None


def collapse(actions) -> list[Action]:
    """Actions in order with consecutive per-unit runs of one task merged into ranges."""
    out: list[Action] = []
    for a in actions:
        grown = extend(out[-1], a) if out else None
        if grown is None:
            out.append(a)
        else:
            out[-1] = grown
    return out


def _unit_name(unit: int, units: int | None) -> str:
    if units is None:
        return f"unit {unit}"
    return "the embedding" if unit == 0 else "the head" if unit == units - 1 else f"layer {unit}"


def _where(a: Action, units: int | None) -> str:
    """The unit or range an action covers, in words."""
    if a.last == a.unit:
        return _unit_name(a.unit, units)
    lo, hi = sorted((a.unit, a.last))
    word = "layers" if units is not None and lo > 0 and hi < units - 1 else "units"
    return f"{word} {a.unit} to {a.last}"


def describe(a: Action, units: int | None = None) -> str:
    """The long form, e.g. 'Forward of micro-batch 3 through layer 12 on stage 0'; `units`
    (the program's unit count) names unit 0 the embedding and the last the head."""
    name = KINDS[a.kind][0]
    if a.kind in _TRANSFERS:
        # activations go down the pipeline (stage p to p + 1), their gradients back up
        peer = a.stage + (1 if a.kind in ("SEND_F", "RECV_B") else -1)
        what = "activation" if a.kind[-1] == "F" else "gradient"
        way = "to" if a.kind.startswith("SEND") else "from"
        peer_text = f"stage {peer}"
        if a.unit is not None:      # interleaved: the peer holds the adjacent virtual stage
            side = "next" if a.kind in ("SEND_F", "RECV_B") else "previous"
            peer_text = f"the {side} virtual stage (the boundary before {_unit_name(a.unit, units)})"
        text = f"{name} of micro-batch {a.mb}'s {what} {way} {peer_text} on stage {a.stage}"
    elif a.kind == "STEP_END":
        text = f"{name} on stage {a.stage}"
    else:
        where = _where(a, units)
        if a.kind in ("F", "R", "B", "I", "W"):
            text = f"{name} of micro-batch {a.mb} through {where}"
        elif a.kind == "RS":
            text = f"{name} of micro-batch {a.mb}'s gradient of {where}"
        elif a.kind == "AG":
            text = f"{name} of {where}'s parameters for the {_PHASE_NAME[a.phase]} of micro-batch {a.mb}"
        else:
            text = f"{name} of {where}"
        text += f" on stage {a.stage}"
    return text if a.ring is None else f"{text} (ring step {a.ring})"


def stage_actions(stage, comms: bool = False) -> list[str]:
    """One stage's issue order as action tokens."""
    return tokens(stage.region.ops, stage.attributes["stage"], comms)


# Ops listed without comms; with comms, the transfers and collectives too (markers never).
_LISTED = frozenset(("life.fwd", "life.bwd", "life.bwd_i", "life.bwd_w", "life.recover", "life.grad_sync",
                     "life.update", "life.prefetch"))
_COMMS = frozenset(("life.send", "life.recv", "life.reduce", "life.gather", "life.tie_sum"))


def tokens(ops, p: int, comms: bool = False) -> list[str]:
    """Action tokens of a list of stage-p ops, consecutive layers of one task collapsed."""
    shown = _LISTED | _COMMS if comms else _LISTED
    return [str(a) for a in collapse(action(op, p) for op in ops if op.name in shown)]


def format_pipeline(pipe, comms: bool = False) -> str:
    """The legend, then every stage's order, one line per stage: 'stage 0: 0F0@0-2 0F1@0-2 ...'."""
    return LEGEND + "".join(f"stage {s.attributes['stage']}: {' '.join(stage_actions(s, comms))}\n"
                            for s in pipe.region.ops)


# `ratc run --kernel STAGE:TASK`: the tasks whose kernels it runs
_STAGE = re.compile(r"\s*(\d+)\s*:\s*(\S+)\s*")
_TASK_OPS = {"F": "life.fwd", "B": "life.bwd", "R": "life.recover"}


def task_ops(pipe, spec: str) -> tuple[int, list]:
    """(stage, ops) of a task named 'STAGE:TASK' in schedule.txt's notation, e.g. '0:F3' (every
    layer of the stage), '0:F3@12' or '1:1B0@16-9' (those layers)."""
    m = _STAGE.fullmatch(spec)
    task = m[2] if m else ""
    name = task if task[:1].isdigit() else f"{m[1] if m else ''}{task}"
    a = try_parse(name if "@" in name else f"{name}@0")       # without '@': every layer
    if a is None or a.kind not in _TASK_OPS or a.ring is not None:
        raise RatcError(f"--kernel {spec!r}: expected STAGE:TASK such as 0:F3, 1:B0@5 or 0:R2@1-3 "
                        "(forward, backward or recover of a micro-batch, of every layer of the stage or "
                        "of those after '@')")
    stage = int(m[1])
    if a.stage != stage:
        raise RatcError(f"--kernel {spec!r}: the task names stage {a.stage}, not {stage}")
    stages = {s.attributes["stage"]: s for s in pipe.region.ops}
    if stage not in stages:
        raise RatcError(f"--kernel {spec!r}: the program has stages 0..{len(stages) - 1}")
    units = range(min(a.unit, a.last), max(a.unit, a.last) + 1) if "@" in name else None
    ops = [op for op in stages[stage].region.ops if op.name == _TASK_OPS[a.kind] and op.attributes["mb"] == a.mb
           and (units is None or op.attributes["unit"] in units)]
    if not ops:
        raise RatcError(f"--kernel {spec!r}: stage {stage} runs no task {name} (see schedule.txt for its tasks)")
    return stage, ops
