"""Stage programs in torch.distributed.pipelining's action notation, extended for ratc.

A token is `<stage><action><index>`. Main-path tokens are torch's own: `0F3` forward of
micro-batch 3, `0B3` its backward (every layer of the stage; consecutive per-layer ops of
one micro-batch form one token). ratc adds, indexed by micro-batch:
  `0R3`  Recover (activation recomputation) of micro-batch 3 on stage 0
and, indexed by unit (0 = embedding, 1..L = decoder layers, L+1 = head):
  `0G5`  GradSync(5)   `0U5`  UpdateShard(5)   `0P5`  PrefetchW(5)
PrefetchW is `P`, not `W`, because torch's notation already uses `W` (weight-gradient
backward) and `I` (input-gradient backward). With comms shown, torch's `SEND_F`, `RECV_F`,
`SEND_B`, `RECV_B` appear, plus `0RS5.2` (ZeRO-2 reduce-scatter of unit 5's micro-batch-2
gradient) and `0AG5.2f` (ZeRO-3 parameter all-gather of unit 5 for micro-batch 2's forward;
`r` recovery, `b` backward).
"""

from __future__ import annotations

_MB = {"life.fwd": "F", "life.bwd": "B", "life.recover": "R"}
_UNIT = {"life.grad_sync": "G", "life.update": "U", "life.prefetch": "P"}
_COMM = {("life.send", "fwd"): "SEND_F", ("life.recv", "fwd"): "RECV_F",
         ("life.send", "bwd"): "SEND_B", ("life.recv", "bwd"): "RECV_B"}


def stage_actions(stage, comms: bool = False) -> list[str]:
    """One stage's issue order as action tokens."""
    return tokens(stage.region.ops, stage.attributes["stage"], comms)


def tokens(ops, p: int, comms: bool = False) -> list[str]:
    """Action tokens of a list of stage-p ops."""
    out: list[str] = []
    prev = None
    for op in ops:
        a = op.attributes
        if op.name in _MB:
            tok = f"{p}{_MB[op.name]}{a['mb']}"
            if tok != prev:
                out.append(tok)
            prev = tok
            continue
        if op.name in _UNIT:
            out.append(f"{p}{_UNIT[op.name]}{a['unit']}")
        elif comms and op.name in ("life.send", "life.recv"):
            out.append(f"{p}{_COMM[op.name, a['dir']]}{a['mb']}")
        elif comms and op.name == "life.reduce":
            out.append(f"{p}RS{a['unit']}.{a['mb']}")
        elif comms and op.name == "life.gather":
            out.append(f"{p}AG{a['unit']}.{a['mb']}{a['phase'][0]}")
        else:
            continue
        prev = None
    return out


def format_pipeline(pipe, comms: bool = False) -> str:
    """Every stage's order, one line per stage: 'stage 0: 0F0 0F1 0B0 ...'."""
    return "".join(f"stage {s.attributes['stage']}: {' '.join(stage_actions(s, comms))}\n"
                   for s in pipe.region.ops)
