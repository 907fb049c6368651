"""The candidate configuration c = (P, D, T, Z, b, A, act, pref), its policy names, its
`--plan` text form, and the training recipe."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ratc.errors import RatcError

ACT_POLICIES = ("full", "ckpt", "fsr")
# What commands and pass options call them (`--act-policy`, `lower-to-life{act-policy=...}`),
# and how the paper's tables label them.
ACT_OPTION_NAMES = {"full-save": "full", "checkpoint": "ckpt", "fsr": "fsr"}
ACT_LABELS = {"full": "Full", "ckpt": "Ckpt", "fsr": "FSR"}
# bulk: GradSync, UpdateShard and PrefetchW all at the accumulation boundary (conventional
# DP/ZeRO); layerwise: per-layer GradSync overlapped with backward (the layer-wise state
# pipeline) but bulk update and prefetch; deadline: layer-wise pipeline plus deadline-aware
# update-prefetch scheduling (paper Eq. 2-4).
PREF_POLICIES = ("bulk", "layerwise", "deadline")
ZERO_STAGES = (0, 1, 2, 3)
# How layers are split into pipeline stages: equal compute time, or equal training-state bytes.
BALANCES = ("time", "memory")
# What a recovered layer keeps for its Backward (ratc.step.rules.save_choice), and the
# letters a plan's `keep` text writes them with.
SAVE_CHOICES = ("full", "selective", "layer")
KEEP_LETTERS = {"f": "full", "s": "selective", "l": "layer"}
# The pipeline schedule of an interleaved plan (v > 1): interleaved 1F1B, or a zero-bubble
# schedule, which splits each backward into its input-gradient (I) and weight-gradient (W)
# tasks: ZB1P (interleaved layout) or ZBV (v = 2 chunks laid out in a V) (ratc.step.schedules).
SCHEDULES = ("1f1b", "zb1p", "zbv")
# Under FSR with a zero-bubble schedule, which task hosts each I's first Recover
# (ratc.step.schedules.recover_hosts): the one its rank runs right before the I (the deadline
# placement), or the latest W before it (the W and the Recover share the idle slot).
CORUNS = ("prev", "w")
# The attention kernels: the paper's (unfused forward, whose probabilities the memory-resident
# backward of Alg. 1 reloads) or fused (an online-softmax forward, ratc.codegen.flash_fwd, saving
# each row's max and 1/sum; a FlashAttention-style backward recomputes the probabilities on chip
# from them: ratc.codegen.flash).
ATTENTION = ("paper", "fused")


@dataclass(frozen=True, order=True)
class Candidate:
    """One training configuration (paper Eq. 8 plus the tensor-parallel degree T)."""

    P: int          # pipeline stages
    D: int          # data-parallel replicas
    T: int          # tensor-parallel degree
    Z: int          # ZeRO stage
    b: int          # sequences per micro-batch
    A: int          # micro-batches (gradient-accumulation steps) per replica per step
    act: str        # activation policy: full | ckpt | fsr
    pref: str       # state/prefetch policy: bulk | layerwise | deadline
    balance: str = "time"   # how layers are split into stages: time | memory
    # what each decoder layer keeps for its Backward under ckpt / FSR, as run-length text
    # ('24s8l': 24 selective, then 8 whole-layer recomputed; ratc.step.rules.SAVE_CHOICES);
    # "" is every layer whole-layer recomputed, as before the choice existed
    keep: str = ""
    # virtual stages (model chunks) per pipeline rank: interleaved 1F1B when > 1
    # (ratc.step.schedules.interleaved_1f1b)
    v: int = 1
    # the pipeline schedule (SCHEDULES); zb1p needs v >= 2, zbv v = 2
    sched: str = "1f1b"
    # FSR under a zero-bubble schedule: the task hosting each I's first Recover (CORUNS)
    corun: str = "prev"
    # the attention kernels (ATTENTION)
    attn: str = "paper"

    @property
    def clusters(self) -> int:
        return self.P * self.D * self.T

    @property
    def global_batch(self) -> int:
        return self.D * self.b * self.A

    def label(self) -> str:
        """Compact text as the paper's tables write configurations."""
        parts = [f"P={self.P}", f"D={self.D}"]
        if self.T > 1:
            parts.append(f"T={self.T}")
        parts += [f"Z={self.Z}", f"b={self.b}", f"A={self.A}", ACT_LABELS[self.act], self.pref]
        if self.balance != "time":
            parts.append(f"balance={self.balance}")
        if self.keep:
            parts.append(f"keep={self.keep}")
        if self.v > 1:
            parts.append(f"v={self.v}")
        if self.sched != "1f1b":
            parts.append(f"sched={self.sched}")
        if self.corun != "prev":
            parts.append(f"corun={self.corun}")
        if self.attn != "paper":
            parts.append(f"attn={self.attn}")
        return ",".join(parts)

    def as_dict(self) -> dict:
        d = {"P": self.P, "D": self.D, "T": self.T, "Z": self.Z, "b": self.b, "A": self.A,
             "act": self.act, "pref": self.pref, "balance": self.balance}
        if self.keep:
            d["keep"] = self.keep
        if self.v > 1:
            d["v"] = self.v
        if self.sched != "1f1b":
            d["sched"] = self.sched
        if self.corun != "prev":
            d["corun"] = self.corun
        if self.attn != "paper":
            d["attn"] = self.attn
        return d


@dataclass(frozen=True)
class TrainingRecipe:
    """Bytes per parameter of mixed-precision Adam and of its update (ZeRO paper, Sec. 3.1).

    Rajbhandari et al. 2020: fp16 parameters (2 B) and gradients (2 B), and K = 12 B of
    optimizer state (fp32 master weights, Adam momentum and variance, 4 B each).
    """

    param_bytes: int = 2
    grad_bytes: int = 2
    optimizer_bytes: int = 12
    # One Adam step per parameter shard: read the fp16 gradient (2), read and write the fp32
    # master weight, momentum and variance (2 x 12), write the fp16 parameter (2).
    update_traffic_bytes: int = 28
    # A host's measured update ((traffic bytes, seconds) rows, priced by
    # ratc.step.rules.streamed_seconds); without them the traffic streams at the DDR bandwidth.
    update_rows: tuple = ()
    # Whether UpdateShard runs in the rank's compute stream (a host: Platform.updates_in_compute_stream)
    # rather than on a DDR engine beside it: then it delays the compute that follows it.
    update_in_stream: bool = False


RECIPE = TrainingRecipe()


def keep_text(choices) -> str:
    """Save choices per decoder layer as a run-length text: ('selective',) * 24 + ('layer',) * 8
    -> '24s8l' (how --plan and labels write a plan's `keep`)."""
    letter = {v: k for k, v in KEEP_LETTERS.items()}
    out, prev, n = [], None, 0
    for c in list(choices) + [None]:
        if c == prev:
            n += 1
            continue
        if prev is not None:
            out.append(f"{n}{letter[prev]}")
        prev, n = c, 1
    return "".join(out)


def parse_keep(text: str) -> tuple:
    """The save choices per decoder layer of a run-length text ('24s8l'); raises ValueError."""
    if not re.fullmatch(r"(\d+[fsl])+", text):
        raise ValueError(f"keep {text!r}: expected runs like '24s8l' (f full, s selective, l layer)")
    return tuple(KEEP_LETTERS[c] for n, c in re.findall(r"(\d+)([fsl])", text) for _ in range(int(n)))


# every name of each activation policy that --plan reads (case aside)
_ACT_NAMES = {**{a: a for a in ACT_POLICIES}, **ACT_OPTION_NAMES}
_INT_KEYS = ("P", "D", "T", "Z", "b", "A", "v")


def parse_config(text: str) -> Candidate:
    """A candidate from the planner's label form: 'P=2,D=4,Z=2,b=1,A=128,FSR,deadline'.

    T, Z, b default to 1, 2, 1; the activation policy to FSR and the state policy to deadline.
    """
    values = {"T": 1, "Z": 2, "b": 1, "v": 1, "act": "fsr", "pref": "deadline", "balance": "time", "keep": "",
              "sched": "1f1b", "corun": "prev", "attn": "paper"}
    if not text.strip():
        raise RatcError("--plan is empty (expected e.g. 'P=2,D=4,Z=2,b=1,A=128,FSR,deadline')")
    given: set = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, val = part.partition("=")
        key, val = key.strip(), val.strip()
        what = key if eq else ("act" if part.lower() in _ACT_NAMES else "pref" if part.lower() in PREF_POLICIES
                               else part)
        if what in given:
            raise RatcError(f"--plan {text!r}: {what} is given twice")
        given.add(what)
        if eq and key in _INT_KEYS:
            if not re.fullmatch(r"\d+", val):
                raise RatcError(f"--plan: {key} must be a positive integer, got {val!r}")
            values[key] = int(val)
        elif eq and key in ("act", "pref", "balance", "keep", "sched", "corun", "attn"):
            values[key] = val.lower()
        elif not eq and part.lower() in _ACT_NAMES:
            values["act"] = _ACT_NAMES[part.lower()]
        elif not eq and part.lower() in PREF_POLICIES:
            values["pref"] = part.lower()
        else:
            raise RatcError(f"--plan: cannot read {part!r} in {text!r} (expected e.g. "
                            "'P=2,D=4,Z=2,b=1,A=128,FSR,deadline')")
    missing = [k for k in ("P", "D", "A") if k not in values]
    if missing:
        raise RatcError(f"--plan {text!r}: missing {', '.join(missing)}")
    values["act"] = _ACT_NAMES.get(values["act"], values["act"])
    if values["act"] not in ACT_POLICIES or values["pref"] not in PREF_POLICIES:
        raise RatcError(f"--plan {text!r}: activation policy must be one of {', '.join(ACT_POLICIES)} and state "
                        f"policy one of {', '.join(PREF_POLICIES)}")
    if min(values[k] for k in ("P", "D", "T", "b", "A", "v")) < 1 or values["Z"] > 3:
        raise RatcError(f"--plan {text!r}: P, D, T, b, A, v must be >= 1 and Z in 0..3")
    if values["v"] > 1 and values["P"] < 2:
        raise RatcError(f"--plan {text!r}: v = {values['v']} virtual stages per rank interleave a pipeline of "
                        "P >= 2 ranks")
    if values["attn"] not in ATTENTION:
        raise RatcError(f"--plan {text!r}: attn must be one of {', '.join(ATTENTION)}, got {values['attn']!r}")
    if values["keep"]:
        try:
            values["keep"] = keep_text(fused_keep(parse_keep(values["keep"]), values["attn"]))
        except ValueError as e:
            raise RatcError(f"--plan {text!r}: {e}") from None
        if values["act"] == "full":
            raise RatcError(f"--plan {text!r}: keep= chooses what recomputed layers save; full-save recomputes "
                            "none (use ckpt or fsr)")
        if set(parse_keep(values["keep"])) == {"layer"}:
            values["keep"] = ""     # every layer whole-layer recomputed: the default
    _check_schedule(text, values)
    return Candidate(**{k: values[k] for k in (*_INT_KEYS, "act", "pref", "balance", "keep", "sched", "corun", "attn")})


def fused_keep(choices, attn: str) -> tuple:
    """Save choices as they run under the attention kernels: fused attention saves no
    probabilities, so a selective layer has no core to drop and keeps what a full one does."""
    return tuple("full" if attn == "fused" and c == "selective" else c for c in choices)


def _check_schedule(text: str, values: dict) -> None:
    """Refuse a `sched=` the plan cannot run (zb1p: v >= 2, zbv: v = 2), and a `corun=` but
    FSR's under a zero-bubble schedule."""
    sched = values["sched"]
    if sched not in SCHEDULES:
        raise RatcError(f"--plan {text!r}: sched must be one of {', '.join(SCHEDULES)}, got {sched!r}")
    why = schedule_shape_error(sched, values["v"])
    if why:
        raise RatcError(f"--plan {text!r}: {why}")
    if values["corun"] not in CORUNS:
        raise RatcError(f"--plan {text!r}: corun must be one of {', '.join(CORUNS)}, got {values['corun']!r}")
    if values["corun"] != "prev" and (sched == "1f1b" or values["act"] != "fsr"):
        raise RatcError(f"--plan {text!r}: corun={values['corun']} places FSR's Recovers under a zero-bubble "
                        "schedule (needs FSR and sched=zb1p or zbv)")


def schedule_shape_error(sched: str, v: int) -> str:
    """Why a schedule cannot run v chunks per rank ("" when it can)."""
    if sched == "zb1p" and v < 2:
        return "sched=zb1p interleaves v >= 2 virtual stages per rank (add v=2)"
    if sched == "zbv" and v != 2:
        return f"sched=zbv lays v = 2 chunks per rank out in a V (rank r holds stages r and 2P-1-r), got v = {v}"
    return ""
