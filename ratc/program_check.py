"""What a compiled program's files mean, checked before `ratc run`, `report` and `train` trust them.

ratc.program.load_program checks that the files are the ones the manifest lists (hashes
guard against accidents); a manifest can be regenerated after an edit, so open_program
also checks their content: program.ir parses, verifies and its life.plan is the plan of
meta.config with every value in range; model.ir is the model the plan was made for;
kernels.json has its schema and is what program.ir's kernels say; every kernels/*.rasm
assembles and runs for the cycles kernels.json gives it; each task's cycles are its
kernels' and its dur those cycles at the clock. Every refusal is a ProgramError naming
the file and the field or line.
"""

from __future__ import annotations

import math
import operator

from ratc.errors import LocatedError, RatcError
from ratc.input_files import json_value
from ratc import limits
from ratc.program import Program, ProgramError, load_program
from ratc.units import in_range

# Limits on a program's values (docs/reliability.md, "Program directories"). Far above any
# real program, far below where arithmetic on them stops meaning anything.
MAX_CLUSTERS = 2 ** 20          # P x D x T
MAX_MICRO_BATCH = 4096          # sequences per micro-batch (b)
MAX_SEQ_LEN = 2 ** 24           # tokens per sequence
MAX_KERNEL_CYCLES = 2 ** 48     # one kernel call: ~5 days at the MT-3000's 659 MHz
MAX_CALLS = 2 ** 40             # kernel calls per step on one stage
MAX_TASK_SECONDS = 1e6          # one task's duration (~11.6 days), and any per-unit cost in seconds

PROGRAM_IR, MODEL_IR, KERNELS_JSON, PLATFORM_TOML = "program.ir", "model.ir", "kernels.json", "platform.toml"
KERNEL_DIMS = {"gemm": 3, "attn_bwd": 4, "flash_bwd": 4, "flash_fwd": 4}


class LocatedProgramError(LocatedError, ProgramError):
    """A program file whose text is wrong at a line (printed as file:line:col: error: ...)."""


def open_program(root, compiled=None) -> Program:
    """The one loader of a compiled program: load_program (manifest, hashes, regular files),
    then every file's meaning checked. The Program returned carries its parsed life module
    (`module`), model profile (`profile`, None without model.ir), kernel table (`kernel_table`,
    None without kernels) and platform (`own_platform`). `compiled` = (verified module,
    profile) when this process just wrote the program from them: its IR files are not
    parsed and verified again."""
    program = load_program(root)
    check_program(program, compiled)
    return program


def check_program(program: Program, compiled=None) -> None:
    """Check a loaded program's content; sets its module, profile, kernel_table, own_platform."""
    platform = _platform(program)
    module = _life_module(program) if compiled is None else compiled[0]
    check_life_module(module, program.path(PROGRAM_IR), platform.cycles_per_second)
    _check_meta(program, module)
    profile = None
    if MODEL_IR in program.files:
        profile = _model_profile(program) if compiled is None else compiled[1]
        check_model_matches(module, profile, program.path(MODEL_IR))
    table = _check_kernels(program, module, platform)
    program.module, program.profile, program.kernel_table, program.own_platform = module, profile, table, platform


def program_platform(program: Program, override: str | None = None):
    """The platform a program was compiled for (its platform.toml), unless overridden by a
    profile name or file."""
    from ratc.platform import load_platform

    if override:
        return load_platform(override)
    return program.own_platform if program.own_platform is not None else _platform(program)


def _platform(program: Program):
    from ratc.platform import load_platform, parse_platform

    if PLATFORM_TOML in program.files:
        return parse_platform(program.text(PLATFORM_TOML), program.path(PLATFORM_TOML))
    name = program.meta.get("platform", "mt3000")
    if not isinstance(name, str):
        raise ProgramError(f"{program.path('manifest.json')}: meta.platform must be a platform name, got {name!r}")
    return load_platform(name)


def _parse(program: Program, rel: str):
    """The verified module of an IR file of the program (errors located in that file)."""
    from ratc.ir import parse_module, verify

    try:
        module = parse_module(program.text(rel), program.path(rel))
        verify(module)
    except LocatedError as exc:
        raise LocatedProgramError(exc.message, exc.loc) from None
    except RecursionError:
        raise ProgramError(f"{program.path(rel)}: nested too deeply to read") from None
    return module


def _life_module(program: Program):
    if PROGRAM_IR not in program.files:
        raise ProgramError(f"{program.root}: the program has no {PROGRAM_IR} (its scheduled life program); "
                           "recompile with `ratc compile`")
    module = _parse(program, PROGRAM_IR)
    names = [op.name for op in module.body.ops]
    for want in ("life.plan", "life.pipeline"):
        if names.count(want) != 1:
            raise ProgramError(f"{program.path(PROGRAM_IR)}: needs exactly one {want} op, found "
                               f"{names.count(want)}; recompile with `ratc compile`")
    return module


def _fail(where: str, op, message: str):
    """A refusal at an op of an IR file: located when the op has a location."""
    if op is not None and getattr(op, "loc", None) is not None:
        return LocatedProgramError(message, op.loc)
    return ProgramError(f"{where}: {message}")


def check_life_module(module, where: str, clock: float | None = None) -> None:
    """Ranges a verified life module's plan and tasks must be in (the verifier checks their
    structure): cluster counts, batch sizes, seconds and cycles; with the platform's clock,
    each costed task's cycles are its kernels' and its dur those cycles at the clock."""
    from ratc.lifecycle.lowering import find_pipeline, find_plan

    plan = find_plan(module)
    a = plan.attributes
    for key, high in (("P", MAX_CLUSTERS), ("D", MAX_CLUSTERS), ("T", MAX_CLUSTERS), ("b", MAX_MICRO_BATCH),
                      ("A", limits.MAX_MICRO_BATCHES), ("seq_len", MAX_SEQ_LEN)):
        if not (type(a.get(key)) is int and 1 <= a[key] <= high):
            raise _fail(where, plan, f"life.plan {key} = {a.get(key)!r} is out of range (1..{high})")
    if a["P"] * a["D"] * a["T"] > MAX_CLUSTERS:
        raise _fail(where, plan, f"life.plan P x D x T = {a['P'] * a['D'] * a['T']} clusters is out of range "
                                 f"(at most {MAX_CLUSTERS})")
    if not 0 < int(a["budget"]):
        raise _fail(where, plan, f"life.plan budget = {a['budget']} must be positive")
    units = [u for u in plan.region.ops if u.name == "life.unit"]
    for u in units:
        for key, value in u.attributes.items():
            if isinstance(value, float) and not in_range(value, 0.0, MAX_TASK_SECONDS):
                raise _fail(where, u, f"life.unit #{u.attributes['index']} {key} = {value!r} is out of range "
                                      f"(0..{MAX_TASK_SECONDS:g} s)")
    kernels = {op.sym_name: op for op in module.body.ops if op.name == "life.kernel"}
    for sym, op in kernels.items():
        if not 1 <= op.attributes["cycles"] <= MAX_KERNEL_CYCLES:
            raise _fail(where, op, f"life.kernel @{sym} cycles = {op.attributes['cycles']} is out of range "
                                   f"(1..{MAX_KERNEL_CYCLES})")
    cycles = {sym: op.attributes["cycles"] for sym, op in kernels.items()}
    work: dict = {}     # (task name, unit) -> the unit's work of that task (most tasks repeat one)
    for stage in find_pipeline(module).region.ops:
        for op in stage.region.ops:
            _check_task(op, units, cycles, clock, where, work)




def _check_task(op, units, kernel_cycles: dict, clock: float | None, where: str, work: dict) -> None:
    a = op.attributes
    if "dur" in a and not in_range(a["dur"], 0.0, MAX_TASK_SECONDS):
        raise _fail(where, op, f"'{op.name}' dur = {a['dur']!r} s is out of range (0..{MAX_TASK_SECONDS:g} s)")
    if "cycles" not in a or clock is None:
        return
    if not 0 <= a["cycles"] <= MAX_TASK_SECONDS * clock:
        raise _fail(where, op, f"'{op.name}' cycles = {a['cycles']} is out of range "
                               f"(0..{MAX_TASK_SECONDS * clock:.4g}, {MAX_TASK_SECONDS:g} s at the clock)")
    if not math.isclose(a["dur"], a["cycles"] / clock, rel_tol=1e-9, abs_tol=1e-15):
        raise _fail(where, op, f"'{op.name}' dur = {a['dur']!r} s is not its cycles ({a['cycles']}) at the "
                               f"platform's clock ({a['cycles'] / clock!r} s)")
    refs, calls = a.get("kernels", []), a.get("calls", [])
    i = a.get("unit", -1)
    done = work.get((op.name, i), work)         # (the dict itself: not looked up yet)
    if done is work:
        done = work[op.name, i] = _unit_work(op.name, units, i)
    if done is None or len(refs) != len(calls):
        raise _fail(where, op, f"'{op.name}' has cycles but no matching kernels, calls and unit")
    names = [r.name for r in refs]
    missing = [n for n in names if n not in kernel_cycles]
    if missing:
        raise _fail(where, op, f"'{op.name}' calls @{missing[0]}, which is no life.kernel of the program")
    other = units[i].attributes.get(done[1], 0.0) if done[1] is not None else 0.0
    want = (sum(map(operator.mul, calls, map(kernel_cycles.__getitem__, names)))
            + int(round(other * clock)) + int(round(a.get("corun", 0.0) * clock)))
    if a["cycles"] != want:
        raise _fail(where, op, f"'{op.name}' cycles = {a['cycles']}, but its kernel calls and other work "
                               f"take {want}")


def _unit_work(task: str, units: list, i) -> tuple | None:
    """(kernel list, other seconds) attributes of unit i for a task of that name, or None."""
    from ratc.codegen.program_kernels import task_work

    return task_work(task, units[i].attributes) if 0 <= i < len(units) else None


def _check_meta(program: Program, module) -> None:
    """meta.config and meta.model, when the manifest has them, name the plan of program.ir."""
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.config import parse_config
    from ratc.step.plan import Plan

    a = find_plan(module).attributes
    where = program.path("manifest.json")
    model = program.meta.get("model")
    if model is not None and model != a["model"]:
        raise ProgramError(f"{where}: meta.model is {model!r}, but {PROGRAM_IR} plans model {a['model']!r}")
    config = program.meta.get("config")
    if config is None:
        return
    if not isinstance(config, str):
        raise ProgramError(f"{where}: meta.config must be a configuration label, got {config!r}")
    try:
        cand = parse_config(config)
    except RatcError as exc:
        raise ProgramError(f"{where}: meta.config: {exc}") from None
    plan = Plan.from_ir(find_plan(module)).config
    for key in ("P", "D", "T", "Z", "b", "A", "act", "pref", "balance"):
        value = getattr(plan, key)
        if getattr(cand, key) != value:
            raise ProgramError(f"{where}: meta.config {config!r} has {key}={getattr(cand, key)}, but the "
                               f"life.plan of {PROGRAM_IR} has {key}={value}; recompile with `ratc compile`")


def _model_profile(program: Program):
    from ratc.frontend.graph_ir import profile_from_module

    module = _parse(program, MODEL_IR)
    try:
        return profile_from_module(module)
    except LocatedError as exc:
        if exc.loc is not None:
            raise LocatedProgramError(exc.message, exc.loc) from None
        raise ProgramError(f"{program.path(MODEL_IR)}: {exc.message}") from None


def check_model_matches(module, profile, where: str) -> None:
    """The model of model.ir is the one the plan was made for: its name, sequence length,
    layers (one unit each, by name) and each layer's input size (hidden x sequence)."""
    from ratc.lifecycle.lowering import find_plan

    plan = find_plan(module)
    a = plan.attributes
    if profile.name != a["model"] or profile.seq_len != a["seq_len"]:
        raise ProgramError(f"{where}: model '{profile.name}' at sequence length {profile.seq_len}, but the plan "
                           f"is for '{a['model']}' at {a['seq_len']}")
    layers = [profile.pre, *profile.decoder_layers(), profile.post]
    units = [u for u in plan.region.ops if u.name == "life.unit"]
    if len(units) != len(layers):
        raise ProgramError(f"{where}: {len(layers)} layers ({profile.num_layers} decoder layers), but the plan "
                           f"has {len(units)} units")
    for u, layer in zip(units, layers):
        ua = u.attributes
        if ua["name"] != layer.name or int(ua["input_bytes"]) != a["b"] * layer.input_bytes:
            raise ProgramError(f"{where}: layer '{layer.name}' ({layer.input_bytes} input bytes per sequence) "
                               f"is not the plan's unit #{ua['index']} '{ua['name']}' ({int(ua['input_bytes'])} "
                               f"bytes for b={a['b']}): model.ir is another model's")


def check_kernel_table(table, where: str) -> dict:
    """A kernels.json table checked against its schema and ranges (ProgramError naming the field)."""
    def bad(field: str, why: str) -> ProgramError:
        return ProgramError(f"{where}: malformed kernel table: {field}: {why}; recompile with `ratc compile`")

    if not isinstance(table, dict) or not isinstance(table.get("kernels"), list):
        raise ProgramError(f"{where}: malformed kernel table: expected an object with a 'kernels' list")
    clock = table.get("clock_hz")
    if "clock_hz" in table and not (in_range(clock, 1.0, 1e15)):
        raise bad("clock_hz", f"{clock!r} is not a positive clock rate")
    for i, e in enumerate(table["kernels"]):
        f = f"kernels[{i}]"
        if not isinstance(e, dict):
            raise bad(f, "expected an object")
        if not isinstance(e.get("kernel"), str) or not e["kernel"]:
            raise bad(f"{f}.kernel", f"expected a kernel symbol, got {e.get('kernel')!r}")
        if type(e.get("cycles")) is not int or not 1 <= e["cycles"] <= MAX_KERNEL_CYCLES:
            raise bad(f"{f}.cycles", f"{e.get('cycles')!r} is not an integer in 1..{MAX_KERNEL_CYCLES}")
        if not in_range(e.get("seconds"), 0.0, MAX_TASK_SECONDS) or e["seconds"] <= 0:
            raise bad(f"{f}.seconds", f"{e.get('seconds')!r} is not in (0, {MAX_TASK_SECONDS:g}]")
        if clock is not None and not math.isclose(e["seconds"], e["cycles"] / clock, rel_tol=1e-9):
            raise bad(f"{f}.seconds", f"{e['seconds']!r} is not its {e['cycles']} cycles at clock_hz {clock!r}")
        if not in_range(e.get("mac_utilization"), 0.0, 1.0):
            raise bad(f"{f}.mac_utilization", f"{e.get('mac_utilization')!r} is not in [0, 1]")
        calls = e.get("calls_per_step")
        if not isinstance(calls, dict):
            raise bad(f"{f}.calls_per_step", "expected an object of stage -> calls")
        for stage, n in calls.items():
            if not stage.isdigit() or type(n) is not int or not 0 <= n <= MAX_CALLS:
                raise bad(f"{f}.calls_per_step[{stage!r}]", f"{n!r} is not an integer in 0..{MAX_CALLS} "
                                                              "for a stage number")
        if "kind" in e and (not isinstance(e["kind"], str) or e["kind"] not in KERNEL_DIMS):
            raise bad(f"{f}.kind", f"{e['kind']!r} is not one of {', '.join(KERNEL_DIMS)}")
        if "ddr_bytes" in e and (type(e["ddr_bytes"]) is not int or e["ddr_bytes"] < 0):
            raise bad(f"{f}.ddr_bytes", f"{e['ddr_bytes']!r} is not an integer >= 0")
    return table


def read_kernel_table(text: str, where: str) -> dict:
    """kernels.json text, parsed and checked against its schema."""
    try:
        table = json_value(text)
    except ValueError as exc:
        raise ProgramError(f"{where}: malformed kernel table: not JSON ({exc}); recompile with "
                           "`ratc compile`") from None
    return check_kernel_table(table, where)


def _check_kernels(program: Program, module, platform) -> dict | None:
    """kernels.json is what program.ir's life.kernel ops and calls make of it, and each
    kernels/<symbol>.rasm assembles and takes the cycles both give it."""
    from ratc.codegen.program_kernels import kernel_entries

    want = kernel_entries(module, platform)
    rasm = set(program.names("kernels/"))
    if KERNELS_JSON not in program.files:
        if want or rasm:
            raise ProgramError(f"{program.root}: the program has kernels but no {KERNELS_JSON}; "
                               "recompile with `ratc compile`")
        return None
    where = program.path(KERNELS_JSON)
    table = read_kernel_table(program.text(KERNELS_JSON), where)
    if len(table["kernels"]) != len(want):
        raise ProgramError(f"{where}: {len(table['kernels'])} kernels, but {PROGRAM_IR} has {len(want)} "
                           "life.kernel ops")
    for i, (got, w) in enumerate(zip(table["kernels"], want)):
        for field in ("kernel", "kind", "shape", "cycles", "ddr_bytes", "tiles", "calls_per_step"):
            if got.get(field) != w[field]:
                raise ProgramError(f"{where}: kernels[{i}].{field} is {got.get(field)!r}, but {PROGRAM_IR} "
                                   f"says {w[field]!r}")
        for field in ("seconds", "mac_utilization"):
            if not math.isclose(got[field], w[field], rel_tol=1e-9, abs_tol=1e-15):
                raise ProgramError(f"{where}: kernels[{i}].{field} is {got[field]!r}, but {PROGRAM_IR} "
                                   f"says {w[field]!r}")
    named = {f"kernels/{w['kernel']}.rasm": w for w in want}
    extra = sorted(rasm - set(named))
    if extra:
        raise ProgramError(f"{program.path(extra[0])}: no kernel of {KERNELS_JSON} is called so")
    for rel, w in sorted(named.items()):
        if rel not in program.files:
            raise ProgramError(f"{program.root}: kernel @{w['kernel']} has no {rel}; recompile with `ratc compile`")
        cycles = kernel_cycles(program.text(rel), platform, program.path(rel))
        if cycles != w["cycles"]:
            raise ProgramError(f"{program.path(rel)}: runs for {cycles} cycles, but {KERNELS_JSON} and "
                               f"{PROGRAM_IR} say {w['cycles']}")
    return table


def kernel_cycles(text: str, platform, where: str) -> int:
    """Cycles of a program's .rasm kernel on the kernel VM's timing mode (kernel_cache.text_cycles),
    its errors as the program's."""
    from ratc.codegen import kernel_cache

    try:
        return kernel_cache.text_cycles(text, platform, where)
    except LocatedError as exc:
        raise LocatedProgramError(exc.message, exc.loc) from None
    except RatcError as exc:
        raise ProgramError(f"{where}: {exc}") from None


def open_life_program(path: str):
    """The verified, range-checked life module of a program directory (open_program) or of
    one life IR file (as `ratc train --emit-program` writes); `ratc train --program` reads
    either."""
    import os

    if os.path.isdir(path):
        return open_program(path).module
    from ratc.io import read_input
    from ratc.ir import parse_module, verify
    from ratc.lifecycle.lowering import find_pipeline, find_plan
    from ratc.limits import MAX_IR_BYTES

    if path != "-":
        MAX_IR_BYTES.check_file(path)
    name, text = read_input(path)
    module = parse_module(text, name)
    verify(module)
    try:
        find_plan(module), find_pipeline(module)
    except RatcError as exc:
        raise ProgramError(f"{name}: {exc}") from None
    check_life_module(module, name)
    return module
