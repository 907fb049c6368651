"""The functional executor trains the real tiny LLaMA exactly as plain PyTorch does.

Oracle: torch training the same model on the same global batch with the same AdamW
(ratc.vm.functional.reference); the paper's criterion is the per-step relative loss
deviation. The full matrix (50 steps each) is benchmarks/semantics_matrix.py.
"""

from __future__ import annotations

import re

import pytest
import torch

from ratc.errors import RatcError
from ratc.ir.verifier import VerifyError
from ratc.vm.functional.executor import ExecutionError, FunctionalExecutor
from ratc.vm.functional.session import Session, TrainConfig, build_model, compile_for, relative_deviation
from ratc.vm.functional.units import flat_params, split_model

MODEL = "examples/llama.py"
TOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_thread")


def _train(cfg: TrainConfig, steps: int) -> tuple[float, float, Session]:
    s = Session(cfg)
    worst = max(relative_deviation(*s.step(i)) for i in range(steps))
    return worst, s.parameter_deviation(), s


# A subset covering every policy, ZeRO stage, P, D and state-pipeline setting at least once.
SUBSET = [
    dict(P=4, D=2, Z=3, act="fsr", state_pipeline=True),
    dict(P=2, D=2, Z=2, act="ckpt", state_pipeline=False),
    dict(P=1, D=2, Z=1, act="full", state_pipeline=True),
    dict(P=2, D=1, Z=0, act="fsr", state_pipeline=False),
    dict(P=4, D=1, Z=2, act="full", state_pipeline=True),
    dict(P=1, D=1, Z=3, act="ckpt", state_pipeline=False),
    dict(P=1, D=3, Z=2, act="fsr", state_pipeline=True),     # shards padded: 181504 / 3 is not whole
]


@pytest.mark.parametrize("kw", SUBSET, ids=lambda kw: "P{P}-D{D}-Z{Z}-{act}-{sp}".format(
    sp="sp" if kw["state_pipeline"] else "bulk", **kw))
def test_matches_pytorch(kw):
    worst, param_dev, s = _train(TrainConfig(model=MODEL, M=4, b=1, **kw), steps=5)
    assert worst <= TOL
    assert param_dev <= TOL
    # The comparison has something to compare: the weights moved far beyond the tolerance.
    model, _ = build_model(MODEL, "tiny", 0)
    moved = max(float((now - flat_params(u, model)).norm() / flat_params(u, model).norm())
                for u, now in zip(s.units.units, s.executor.parameters()))
    assert moved > 100 * TOL


# Fewer micro-batches than stages (the 1F1B warm-up never reaches the steady state), a
# single one, odd counts and two sequences per micro-batch, across policies and ZeRO stages.
EDGES = [
    dict(P=4, D=1, Z=3, act="fsr", state_pipeline=True, M=1, b=1),
    dict(P=4, D=2, Z=1, act="fsr", state_pipeline=False, M=3, b=2),
    dict(P=2, D=2, Z=2, act="ckpt", state_pipeline=True, M=1, b=1),
    dict(P=4, D=2, Z=0, act="full", state_pipeline=True, M=2, b=1),
    dict(P=2, D=1, Z=0, act="ckpt", state_pipeline=False, M=3, b=2),
]


@pytest.mark.parametrize("kw", EDGES, ids=lambda kw: "P{P}-D{D}-Z{Z}-{act}-M{M}-b{b}".format(**kw))
def test_few_and_odd_micro_batches_match_pytorch(kw):
    worst, param_dev, _ = _train(TrainConfig(model=MODEL, **kw), steps=2)
    assert worst <= TOL and param_dev <= TOL


def test_rescheduling_changes_nothing_bit_for_bit():
    """Pipeline depth, activation policy and state-task placement only reorder independent work."""
    runs = []
    for kw in (dict(P=1, act="full", state_pipeline=False), dict(P=4, act="fsr", state_pipeline=True),
               dict(P=2, act="ckpt", state_pipeline=True)):
        s = Session(TrainConfig(model=MODEL, D=2, Z=1, M=4, b=1, reference=False, **kw))
        runs.append(([s.step(i)[0] for i in range(3)], s.executor.parameters()))
    for losses, params in runs[1:]:
        assert losses == runs[0][0]
        assert all(torch.equal(a, b) for a, b in zip(params, runs[0][1]))


def test_a_semantic_leak_is_detected(monkeypatch):
    """Negative control: GradSync that keeps only replica 0's gradient must break the match."""
    from ratc.vm.functional.transport import LocalTransport

    monkeypatch.setattr(LocalTransport, "all_reduce_mean", lambda self, p, op, ts: [ts[0].clone()] * len(ts))
    worst, param_dev, _ = _train(TrainConfig(model=MODEL, P=2, D=2, Z=0, M=2, b=1), steps=3)
    assert max(worst, param_dev) > 1e-3


def test_units_chain_equals_the_model():
    """Oracle: the units run in order compute the model's own loss."""
    model, _ = build_model(MODEL, "tiny", 1)
    units = split_model(model)
    assert [u.name for u in units.units] == ["embedding"] + [f"layers.{i}" for i in range(4)] + ["head"]
    assert sum(u.numel for u in units.units) == sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, 512, (3, 64), generator=torch.Generator().manual_seed(1))
    env = {"input_ids": ids, "labels": ids}
    for u in units.units:
        env.update(zip(u.outputs, u.run(u.views(flat_params(u, model)), [env[n] for n in u.inputs])))
    assert torch.equal(env[units.loss], model(ids, ids).detach())


def _session_parts(**kw):
    cfg = TrainConfig(model=MODEL, M=2, b=1, **kw)
    model, _ = build_model(MODEL, "tiny", 0)
    units = split_model(model)
    return cfg, units, [flat_params(u, model) for u in units.units], compile_for(cfg)


def _stage_ops(module, p):
    from ratc.lifecycle.lowering import find_pipeline
    return find_pipeline(module).region.ops[p].region.ops


def test_dropped_recover_is_rejected_before_execution():
    cfg, units, init, module = _session_parts(P=2, D=2, Z=2, act="fsr")
    ops = _stage_ops(module, 0)
    ops.remove(next(op for op in ops if op.name == "life.recover"))
    with pytest.raises(VerifyError, match="recover|undefined|not defined|missing"):
        FunctionalExecutor(module, units, init, cfg.opt)


def test_update_before_its_grad_sync_is_rejected_before_execution():
    cfg, units, init, module = _session_parts(P=2, D=2, Z=1, act="ckpt")
    ops = _stage_ops(module, 1)
    update = next(op for op in ops if op.name == "life.update")
    sync = next(op for op in ops if op.name == "life.grad_sync" and op.attributes["unit"] == update.attributes["unit"])
    ops.remove(update)
    ops.insert(ops.index(sync), update)
    with pytest.raises(VerifyError):
        FunctionalExecutor(module, units, init, cfg.opt)


def test_update_skipping_grad_sync_is_rejected_before_execution():
    """Well-formed SSA, wrong role: UpdateShard fed the local (unsynchronized) gradient."""
    cfg, units, init, module = _session_parts(P=1, D=2, Z=1, act="full")
    ops = _stage_ops(module, 0)
    update = next(op for op in ops if op.name == "life.update")
    sync = next(op for op in ops if op.name == "life.grad_sync" and op.attributes["unit"] == update.attributes["unit"])
    update.operands[0] = sync.operands[0]
    with pytest.raises(VerifyError, match="missing dependency life.grad_sync"):
        FunctionalExecutor(module, units, init, cfg.opt)


def test_follows_the_schedule_and_never_runs_a_whole_model_backward(monkeypatch):
    """Every op runs in its stage's order; gradients come only from per-unit autograd.grad calls."""
    cfg, units, init, module = _session_parts(P=4, D=2, Z=3, act="fsr")
    ex = FunctionalExecutor(module, units, init, cfg.opt)
    ran = {p: [] for p in range(4)}
    original = ex._run
    monkeypatch.setattr(ex, "_run", lambda p, k, op: (ran[p].append(op), original(p, k, op)))

    def forbidden(*a, **k):
        raise AssertionError("a whole-graph backward was called")
    monkeypatch.setattr(torch.Tensor, "backward", forbidden)
    monkeypatch.setattr(torch.autograd, "backward", forbidden)
    grads = []
    real_grad = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: (grads.append(1), real_grad(*a, **k))[1])

    from ratc.vm.functional.data import SyntheticData
    ex.step(SyntheticData(512, 64, 4, seed=0).batch(0))
    for p in range(4):
        assert ran[p] == list(_stage_ops(module, p))
    n_bwd = sum(op.name == "life.bwd" for p in range(4) for op in _stage_ops(module, p))
    assert len(grads) == n_bwd * 2      # one per unit, micro-batch and replica


def test_bad_batch_is_a_clear_error():
    cfg, units, init, module = _session_parts(P=1, D=2, Z=0)
    ex = FunctionalExecutor(module, units, init, cfg.opt)
    ids = torch.zeros(3, 64, dtype=torch.long)
    with pytest.raises(RatcError, match="trains D=2 x M=2 micro-batches of b=1 sequences, the global batch has 3"):
        ex.step({"input_ids": ids, "labels": ids})


def test_runtime_errors_name_the_op():
    """A value missing at run time (here: a stale view) is reported with the op that read it."""
    cfg, units, init, module = _session_parts(P=1, D=1, Z=1)
    ex = FunctionalExecutor(module, units, init, cfg.opt)
    for s in ex.state[0]:
        s.view = None
    ids = torch.zeros(2, 64, dtype=torch.long)
    with pytest.raises(ExecutionError, match=r"stage 0: %x1_0, %saved0_0 = life.fwd \{unit = 0, mb = 0\}: the parameter view is stale"):
        ex.step({"input_ids": ids, "labels": ids})


def test_tied_weights_form_one_tie_group_with_the_copy_last_in_each_unit():
    from ratc.frontend.modelfile import import_model_file
    mod = import_model_file(MODEL)
    cfg = dict(mod.PRESETS["tiny"], tie_embeddings=True)
    units = split_model(mod.build_model(**cfg))
    emb, head = units.units[0], units.units[-1]
    assert units.ties == [[0, emb.index + len(units.units) - 1]]
    shape = emb.param_shapes[-1]
    assert head.param_shapes[-1] == shape and head.segments == (head.numel - shape.numel(), shape.numel())


FROZEN_MODEL = '''
import importlib.util, pathlib
_spec = importlib.util.spec_from_file_location("_llama", {llama!r})
_llama = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_llama)
PRESETS = _llama.PRESETS
DEFAULT_PRESET = _llama.DEFAULT_PRESET
DEFAULT_SEQ_LEN = _llama.DEFAULT_SEQ_LEN
input_spec = _llama.input_spec

def build_model(**config):
    model = _llama.build_model(**config)
    for name, p in model.named_parameters():
        if name.startswith("embed") or name in ("layers.1.self_attn.q_proj.weight", "layers.2.input_layernorm.weight"):
            p.requires_grad_(False)
    return model
'''


def test_frozen_parameters_stay_frozen_as_in_pytorch(tmp_path):
    """Oracle: PyTorch's AdamW skips requires_grad=False parameters (no step, no weight decay)."""
    import pathlib
    path = tmp_path / "frozen.py"
    path.write_text(FROZEN_MODEL.format(llama=str(pathlib.Path(MODEL).resolve())))
    model, _ = build_model(str(path), "tiny", 0)
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert len(frozen) == 3 and "layers.1.self_attn.q_proj.weight" in frozen
    # D=3 with ZeRO-1 splits the frozen mask across shards that also hold trained elements.
    worst, param_dev, s = _train(TrainConfig(model=str(path), P=2, D=3, Z=1, M=2, b=1), steps=3)
    assert worst <= TOL and param_dev <= TOL
    for u, now in zip(s.units.units, s.executor.parameters()):
        before = flat_params(u, model)
        # (the frozen elements from the model's own requires_grad flags, not from ratc's mask)
        mask = torch.cat([torch.full((shape.numel(),), name in frozen)
                          for name, shape in zip(u.param_names, u.param_shapes)]) if u.param_names else None
        if mask is not None and mask.any():
            assert torch.equal(now[mask], before[mask])       # bit-for-bit untouched
            if not mask.all():
                assert not torch.equal(now[~mask], before[~mask])  # the rest trained


def _held_bytes(s: Session) -> int:
    """Bytes of every distinct tensor storage the session keeps between steps."""
    tensors = [p for u in s.units.units for p in u.module.parameters()]
    for states in s.executor.state:
        for st in states:
            tensors += [st.master, *(st.view,) * (st.view is not None)]
            tensors += [v for v in st.optimizer.state[st.master].values() if isinstance(v, torch.Tensor)]
    ref = s.reference
    tensors += [t for p in ref.model.parameters() for t in (p, p.grad) if t is not None]
    tensors += [v for state in ref.optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


@pytest.mark.parametrize("D, Z", [(1, 0), (2, 0), (2, 1), (3, 3)])
def test_host_memory_estimate_bounds_what_a_session_holds(D, Z):
    """Oracle: the storage of every tensor the session keeps after a step, counted directly."""
    from ratc.vm.functional.session import activation_bytes, check_host_memory
    cfg = TrainConfig(model=MODEL, P=2, D=D, Z=Z, M=2, b=1)
    s = Session(cfg)
    s.step(0)
    # between steps no activation is alive: the estimate's other part is what is held
    held, estimate = _held_bytes(s), check_host_memory(cfg) - activation_bytes(cfg)
    # the estimate also counts what lives only during a step (gradient accumulators, the
    # initial flat vectors; ZeRO-3's gathered views)
    assert 0.5 * estimate <= held <= estimate


def test_a_model_too_large_for_the_machine_is_refused_before_any_tensor():
    from ratc.vm.functional.session import activation_bytes, check_host_memory
    cfg = TrainConfig(model=MODEL, preset="tiny", D=2, Z=1)
    need = check_host_memory(cfg) - activation_bytes(cfg)      # the parameters' part
    with pytest.raises(RatcError, match=r"training tiny for real \(.* parameters, D=2, Z=1, with the PyTorch "
                                        r"reference\) needs about .* of host memory, more than this machine's"):
        check_host_memory(cfg, limit=need - 1)


def test_session_checks_host_memory_before_building(monkeypatch):
    """Session (so ratc train) refuses before any real tensor exists."""
    from ratc.vm.functional import session as session_mod
    built = []
    monkeypatch.setattr(session_mod, "machine_bytes", lambda: 10 ** 6)
    monkeypatch.setattr(session_mod, "build_model", lambda *a: built.append(a))
    with pytest.raises(RatcError, match="more than this machine's 1.00 MB"):
        Session(TrainConfig(model=MODEL, M=1, b=1))
    assert built == []


VARIANTS = "tests/train_variants.py"


@pytest.mark.parametrize("preset", ["inplace_input", "unused_branch", "shape_scale", "mask_arg"])
@pytest.mark.parametrize("kw", [dict(P=1, D=1, Z=0, act="full"), dict(P=3, D=2, Z=1, act="fsr"),
                                dict(P=3, D=3, Z=3, act="ckpt")], ids=["P1-full", "P3-D2-Z1-fsr", "P3-D3-Z3-ckpt"])
def test_pytorch_idioms_match_pytorch(preset, kw):
    """Oracle: PyTorch. An in-place residual on a layer's input (its checkpoint must not
    change), a parameter outside the loss (PyTorch's AdamW skips it: no weight decay), a
    Python number handed between units, a defaulted forward argument the batch omits."""
    cfg = TrainConfig(model=VARIANTS, preset=preset, M=2, b=1, **kw)
    worst, param_dev, s = _train(cfg, steps=3)
    assert worst <= TOL and param_dev <= TOL
    if preset == "unused_branch":
        model, _ = build_model(VARIANTS, preset, 0)
        for u, now in zip(s.units.units, s.executor.parameters()):
            if any(".probe." in n or n.startswith("probe.") for n in u.param_names):
                offsets = dict(zip(u.param_names, zip(u.offsets, u.param_shapes)))
                for name in (n for n in u.param_names if "probe" in n):
                    lo, shape = offsets[name]
                    assert torch.equal(now[lo:lo + shape.numel()], flat_params(u, model)[lo:lo + shape.numel()])


@pytest.mark.parametrize("preset, message", [
    ("max_norm", "nn.Embedding(max_norm=...) renormalizes its weight in place"),
    ("sparse", "sparse gradients (sparse=True) are not supported"),
    ("dropout", "'layers.0.drop': dropout p=0.1: checkpoint and FSR recompute a layer"),
    ("weight_norm", "'layers.0.up': parametrized parameters (weight_norm"),
    ("batch_norm", "'layers.0.bn': BatchNorm1d normalizes over the batch"),
    ("shape_tie", "is read by unit 4 (as 'embed_tokens.weight') only for its shape; use the size from the model's config"),
])
def test_idioms_a_unit_cannot_reproduce_are_refused_by_name(preset, message):
    model, _ = build_model(VARIANTS, preset, 0)
    with pytest.raises(RatcError, match=re.escape(message)):
        split_model(model)
