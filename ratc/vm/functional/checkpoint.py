"""Training checkpoints: one directory per step, written with torch.distributed.checkpoint.

A checkpoint holds, per unit and per segment of its flat parameter vector (a tied copy is
a segment of its own), the fp32 master parameters and AdamW's two moments at their
unpadded length, and the unit's AdamW step count; its manifest (`checkpoint.json`) holds
the step counter, the data position, what the run trained (model, sequence length, global
batch, seed, learning rate, the units' segment sizes) and the sha256 of every file, checked
before DCP reads any (DCP has no checksums: a changed float would load silently).

Under `ratc launch` each rank saves exactly its state: its stage's units, as DTensors over
the stage's dp group -- its own shard under ZeRO >= 1 (an uneven last shard at its true
length), one replicated copy under ZeRO-0. `ratc train` saves the same keys as whole
tensors. Loading reads each replica's shard of what it holds sharded (whole tensors in
`ratc train`, cut there), so a checkpoint loads into any P, D and ZeRO stage of the same
model and global batch, from either executor.

A checkpoint appears whole or not at all: it is written into a locked sibling directory
and renamed into place (ratc.atomic), so a crash while saving leaves the last complete
one, and the next save removes the dead writer's leftovers.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ratc.errors import RatcError
from ratc.io import file_sha256

FORMAT, VERSION = "ratc-checkpoint", 1
MANIFEST = "checkpoint.json"
_STEP_DIR = re.compile(r"step-(\d{8})")
MOMENTS = ("exp_avg", "exp_avg_sq")


class CheckpointError(RatcError):
    """A checkpoint that is missing, damaged or does not fit the run."""


@dataclass(frozen=True)
class RunIdentity:
    """What a checkpoint must agree with to resume a run: the same training, any layout."""

    model: str
    seq_len: int
    global_batch: int
    seed: int
    lr: float
    segments: tuple        # per unit, the element counts of its flat vector's segments (a tied copy's apart)


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint found on disk (its files' hashes checked)."""

    path: Path
    step: int               # optimizer steps done: the run resumes at step `step`
    data_position: int      # sequences of the synthetic data consumed
    identity: RunIdentity
    config: str             # the layout it was saved from (P, D, Z, ...), for messages


def step_dir(root: str | Path, step: int) -> Path:
    """The directory of the checkpoint after `step` optimizer steps."""
    return Path(root) / f"step-{step:08d}"


def segments_of(units) -> tuple:
    """Per unit of a UnitSet, the element counts of its flat vector's segments."""
    return tuple(tuple(u.segments) or (u.numel,) for u in units.units)


def identity_of(executor, model: str, seq_len: int, seed: int, lr: float) -> RunIdentity:
    """The run an executor trains, as a checkpoint records it."""
    return RunIdentity(model, seq_len, executor.D * executor.M * executor.b, seed, lr, segments_of(executor.units))


# ---- the state dictionary ------------------------------------------------------------------

def _key(u: int, seg: int, what: str) -> str:
    return f"units.{u}.seg{seg}.{what}"


def _sharded(state) -> bool:
    """Whether each replica holds only its shard of the unit's state (ZeRO >= 1)."""
    from ratc.step.rules import syncs_by_reduce_scatter

    return syncs_by_reduce_scatter(state.Z)


def _moments(state) -> dict | None:
    """AdamW's state of a replica's master shard, or None before its first step (or frozen)."""
    return state.optimizer.state.get(state.master) or None


def _tensors(held: list) -> dict:
    """{'master' | moment: per replica held here, its vector} of one unit."""
    out = {"master": [s.master.detach() for s in held]}
    if _moments(held[0]) is not None:
        out.update({m: [_moments(s)[m].detach() for s in held] for m in MOMENTS})
    return out


def _whole_segments(state, vectors: list) -> list:
    """A unit's segments, whole, from every replica's shard (or from one copy under ZeRO-0)."""
    if not _sharded(state):
        return list(state.unshard(vectors[0]).split(list(state.segments)))
    if len(vectors) != state.D:
        raise CheckpointError(f"a ZeRO-{state.Z} unit's state is split over {state.D} replicas; "
                              f"{len(vectors)} of them are here")
    return list(state.unshard(torch.cat(vectors)).split(list(state.segments)))


def _replica_pieces(state, vector: torch.Tensor, mesh) -> list:
    """One replica's part of each segment as a DTensor over its stage's dp group: its shard's
    valid elements under ZeRO >= 1 (the last shards may be short or empty), else a replica
    of the whole segment (saved once)."""
    from torch.distributed.tensor import DTensor, Replicate

    if not _sharded(state):
        return [DTensor.from_local(seg.clone(), mesh, [Replicate()], run_check=False)
                for seg in state.unshard(vector).split(list(state.segments))]
    out, offset = [], 0
    for n, w in zip(state.segments, state.widths):
        out.append(_sharded_tensor(vector[offset:offset + _valid(state, n, w)].clone(), n, mesh))
        offset += w
    return out


def _valid(state, n: int, w: int) -> int:
    """How many of a segment's n elements this replica's shard (w wide) holds: the last
    shards of a segment that does not divide evenly are short or empty."""
    return max(0, min(w, n - state.replica * w))


def _sharded_tensor(local: torch.Tensor, n: int, mesh):
    """A DTensor of a whole segment of n elements over the dp mesh, `local` this rank's part."""
    from torch.distributed.tensor import DTensor, Shard

    return DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size([n]), stride=(1,))


def _shard_from(state, parts: list) -> torch.Tensor:
    """This replica's shard from a unit's segments: whole tensors (cut here) or DTensors read
    as this replica's parts (each padded to its shard width, as the shard lays them out)."""
    if not hasattr(parts[0], "to_local"):
        return state.shard(torch.cat(parts))
    pieces = []
    for part, w in zip(parts, state.widths):
        local = part.to_local()
        pieces += [local, torch.zeros(w - local.numel(), dtype=local.dtype)]
    return torch.cat(pieces)


def local_state(executor, mesh=None) -> dict:
    """The state dictionary this process saves: with `mesh` (the DeviceMesh of this rank's dp
    group; one replica here) DTensors of this replica's part, else whole tensors assembled
    from the replicas held here (`ratc train` holds them all)."""
    out: dict = {}
    for u in range(len(executor.units.units)):
        held = [executor.state[r][u] for r in executor.replicas
                if executor.state[r] is not None and executor.state[r][u] is not None]
        if not held:
            continue
        moments = _moments(held[0])
        if moments is not None:
            out[f"units.{u}.adam_step"] = moments["step"].detach().reshape(1).clone()
        for what, vectors in _tensors(held).items():
            pieces = (_whole_segments(held[0], vectors) if mesh is None
                      else _replica_pieces(held[0], vectors[0], mesh))
            for seg, piece in enumerate(pieces):
                out[_key(u, seg, what)] = piece
    return out


def _held(executor) -> dict:
    """{unit: the states of its replicas held here} of the units this process holds."""
    held = {u: [executor.state[r][u] for r in executor.replicas if executor.state[r] is not None
                and executor.state[r][u] is not None] for u in range(len(executor.units.units))}
    return {u: states for u, states in held.items() if states}


def restore(executor, path: Path, mesh=None) -> None:
    """Load a checkpoint into the executor's replicas held here, resharded to its layout.

    With `mesh` (the DeviceMesh of this rank's dp group, one replica here; collective over
    the default process group) a ZeRO-sharded replica reads only its shard of the moments,
    and under ZeRO-3 of the masters too (DCP reshards from whatever D saved them); the
    masters a replica keeps whole views of (ZeRO <= 2) are read whole. Without, every
    tensor is read whole and each replica cuts its shard."""
    import torch.distributed.checkpoint as dcp

    from ratc.step.rules import gathers

    saved = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    want: dict = {}
    held = _held(executor)
    for u, states in held.items():
        kinds = ["master"] + ([m for m in MOMENTS] if _key(u, 0, MOMENTS[0]) in saved else [])
        s = states[0]
        for what in kinds:
            by_shard = mesh is not None and _sharded(s) and (what != "master" or gathers(s.Z))
            for seg, (n, w) in enumerate(zip(s.segments, s.widths)):
                want[_key(u, seg, what)] = (_sharded_tensor(torch.empty(_valid(s, n, w)), n, mesh) if by_shard
                                            else torch.empty(n, dtype=torch.float32))
        if len(kinds) > 1:
            want[f"units.{u}.adam_step"] = torch.empty(1, dtype=torch.float32)
    missing = sorted(set(want) - set(saved))
    if missing:
        raise CheckpointError(f"{path}: holds no {missing[0]} ({len(missing)} tensors missing): "
                              "it was saved from another model")
    dcp.load(want, checkpoint_id=str(path), no_dist=mesh is None)
    apply_state(executor, want)


def apply_state(executor, loaded: dict) -> None:
    """Set the replicas held here from tensors keyed as local_state() keys them: whole ones
    (each replica cuts its shard) or, read by shard, this replica's DTensor parts; the next
    step's parameter view is rebuilt from the masters."""
    from ratc.step.rules import gathers

    for u, states in _held(executor).items():
        parts = {what: [loaded[_key(u, seg, what)] for seg in range(len(states[0].segments))]
                 for what in ("master", *MOMENTS) if _key(u, 0, what) in loaded}
        for s in states:
            s.master.data.copy_(_shard_from(s, parts["master"]))
            if MOMENTS[0] in parts:
                s.optimizer.state[s.master] = {"step": loaded[f"units.{u}.adam_step"].reshape(()).clone(),
                                               **{m: _shard_from(s, parts[m]).clone() for m in MOMENTS}}
            else:
                s.optimizer.state.pop(s.master, None)
            # the view the next step starts from, as the last step's PrefetchW (or update) left it
            s.view = None if gathers(s.Z) else (s.master.detach()[:s.N] if not _sharded(s)
                                                else torch.cat(parts["master"]))


# ---- on disk ---------------------------------------------------------------------------------

def write_manifest(directory: Path, step: int, data_position: int, identity: RunIdentity, config: str) -> None:
    """The manifest of a checkpoint whose tensors are in `directory` (written last)."""
    from ratc.atomic import write_file

    files = {p.name: file_sha256(p) for p in sorted(directory.iterdir()) if p.is_file() and p.name != MANIFEST}
    doc = {"format": FORMAT, "version": VERSION, "step": step, "data_position": data_position, "config": config,
           "run": {**asdict(identity), "segments": [list(s) for s in identity.segments]},
           "files": files}
    write_file(directory / MANIFEST, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def is_checkpoint(path: Path) -> bool:
    """Whether a directory holds a ratc checkpoint's manifest (so a save may replace it)."""
    try:
        return json.loads((path / MANIFEST).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def refuse_foreign(target: Path) -> None:
    """A save replaces only an older checkpoint of the same step, nothing ratc did not write."""
    if target.exists() and not is_checkpoint(target):
        raise CheckpointError(f"{target} exists and is not a ratc checkpoint; a save does not replace it")


def save_local(executor, root: str | Path, step: int, identity: RunIdentity, config: str) -> Path:
    """Save the checkpoint after `step` steps of a one-process run under `root`; returns its path."""
    import torch.distributed.checkpoint as dcp

    from ratc.atomic import recover, staged

    target = step_dir(prepare_root(root), step)
    recover(target)
    with staged(target) as staging:
        dcp.save(local_state(executor), checkpoint_id=str(staging.path), no_dist=True)
        write_manifest(staging.path, step, step * identity.global_batch, identity, config)
        staging.swap_in(refuse_foreign)
    return target


def prepare_root(root: str | Path) -> Path:
    """The checkpoint root, created (refused if it is a file)."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise CheckpointError(f"--checkpoint-dir {root}: it is a file, not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"--checkpoint-dir {root}: cannot create it ({exc.strerror})") from None
    return root


def find(path: str | Path) -> Checkpoint:
    """The checkpoint at `path` (a step directory), or the latest complete one under it, its
    files checked against the manifest's hashes."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"--resume {path}: no such checkpoint directory")
    if (path / MANIFEST).is_file():
        chosen = path
    else:
        steps = sorted((p for p in path.iterdir() if _STEP_DIR.fullmatch(p.name) and (p / MANIFEST).is_file()),
                       reverse=True)
        if not steps:
            raise CheckpointError(f"--resume {path}: holds no complete checkpoint (no step-NNNNNNNN/{MANIFEST})")
        chosen = steps[0]
    return _read(chosen)


def _read(path: Path) -> Checkpoint:
    """A checkpoint directory's manifest, validated, and its files' hashes checked."""
    where = path / MANIFEST
    try:
        doc = json.loads(where.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{where}: not a readable checkpoint manifest ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{where}: not a ratc checkpoint manifest (format {doc.get('format')!r})"
                              if isinstance(doc, dict) else f"{where}: not a ratc checkpoint manifest")
    if doc.get("version") != VERSION:
        raise CheckpointError(f"{where}: checkpoint format version {doc.get('version')!r}; this ratc reads {VERSION}")
    try:
        run = doc["run"]
        identity = RunIdentity(str(run["model"]), int(run["seq_len"]), int(run["global_batch"]), int(run["seed"]),
                               float(run["lr"]), tuple(tuple(int(n) for n in s) for s in run["segments"]))
        step, position, files = int(doc["step"]), int(doc["data_position"]), dict(doc["files"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: malformed manifest ({type(exc).__name__}: {exc})") from None
    for name, digest in sorted(files.items()):
        f = path / name
        if Path(name).name != name or not f.is_file():
            raise CheckpointError(f"{path}: the manifest lists {name!r}, which is missing (an incomplete copy?)")
        if file_sha256(f) != digest:
            raise CheckpointError(f"{f}: its sha256 differs from the manifest's: the file changed after the save")
    if ".metadata" not in files:
        raise CheckpointError(f"{where}: lists no .metadata (the DCP index): not a complete checkpoint")
    return Checkpoint(path, step, position, identity, str(doc.get("config", "?")))


def check_fits(ckpt: Checkpoint, run: RunIdentity) -> None:
    """Refuse a checkpoint of another training (any layout of the same one resumes)."""
    saved = ckpt.identity
    wrong = [f"{name} {getattr(saved, key)!r} (this run: {getattr(run, key)!r})"
             for key, name in (("model", "model"), ("seq_len", "sequence length"), ("global_batch", "global batch"),
                               ("seed", "data seed"), ("lr", "learning rate"))
             if getattr(saved, key) != getattr(run, key)]
    if not wrong and saved.segments != run.segments:
        wrong.append(f"units of {[sum(s) for s in saved.segments]} parameters "
                     f"(this model: {[sum(s) for s in run.segments]})")
    if wrong:
        raise CheckpointError(f"{ckpt.path} was saved by another training ({ckpt.config}): " + "; ".join(wrong))
