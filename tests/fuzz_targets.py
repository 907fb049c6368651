"""Fuzz targets over every ratc parser and loader, shared by tests/test_fuzz.py and benchmarks/fuzz.py.

A target turns a seed into one mutated input (`Case`) from real files: the tiny compiled
program, the golden IR, the shipped platform profiles and the example HF configs. Running a
case must end in success or a `RatcError` whose message names the file or the place; any
other exception is a `Failure`. A seed always makes the same case, so (target, seed) is the
reproducer.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
import shutil
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import testdialect  # noqa: F401  (the golden IR uses the 'test' dialect)
from ratc.errors import RatcError

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
PROFILES = ROOT / "ratc" / "platform" / "profiles"
HF_CONFIGS = ROOT / "examples" / "hf"


class Failure(Exception):
    """A case that ended neither in success nor in a RatcError naming its place."""


class Refused(RatcError):
    """A CLI run that exited with a user error (its stderr is the message)."""


# ---------------------------------------------------------------------------------------------
# The environment: the real inputs each case mutates (built once per session)


@dataclass
class Env:
    """The pristine inputs: a tiny compiled program and the texts the mutators start from."""

    program: Path                     # never edited: each case copies it
    work: Path                        # cases write their inputs below here
    ir_texts: list[str] = field(default_factory=list)
    rasm_texts: list[str] = field(default_factory=list)
    toml_texts: list[str] = field(default_factory=list)
    hf_texts: list[str] = field(default_factory=list)
    tokens: dict[str, list[str]] = field(default_factory=dict)
    kernel_symbols: list[str] = field(default_factory=list)
    _cache: dict = field(default_factory=dict)

    def cached(self, key: str, make: Callable):
        """A value made once per environment (the parsed platform, the plan's units)."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def scratch(self, name: str) -> Path:
        """A fresh, empty directory for one case's files."""
        path = self.work / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path


def compile_tiny_program(outdir: Path) -> None:
    """`ratc compile --preset tiny --clusters 2 --no-run -o OUTDIR` (the caller sets RATC_CACHE_DIR)."""
    from ratc.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["compile", "--preset", "tiny", "--clusters", "2", "--no-run", "-o", str(outdir)])
    if code != 0:
        raise RuntimeError(f"compiling the tiny program failed:\n{err.getvalue()}")


_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[%@#^!]?[A-Za-z_][A-Za-z0-9_.$-]*|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\S')


def make_env(program: Path, work: Path) -> Env:
    """The environment over an already compiled tiny program."""
    env = Env(program=program, work=work)
    env.ir_texts = [p.read_text() for p in sorted(GOLDEN.rglob("*.ir"))] + \
        [(program / n).read_text() for n in ("model.ir", "program.ir")]
    env.rasm_texts = [p.read_text() for p in sorted((program / "kernels").glob("*.rasm"))]
    env.toml_texts = [p.read_text() for p in sorted(PROFILES.glob("*.toml"))]
    env.hf_texts = [p.read_text() for p in sorted(HF_CONFIGS.glob("*.json"))]
    for kind, texts in (("ir", env.ir_texts), ("rasm", env.rasm_texts)):
        env.tokens[kind] = sorted({t for text in texts for t in _TOKEN.findall(text)})
    env.kernel_symbols = [e["kernel"] for e in json.loads((program / "kernels.json").read_text())["kernels"]]
    return env


# ---------------------------------------------------------------------------------------------
# Mutators: text (byte flips, deletions, duplications, tokens, numbers, nesting) and values


SPECIAL = ["0", "-0", "-1", "1e999", "-1e999", "nan", "inf", "-inf", "NaN", "Infinity", "9" * 40, "-" + "9" * 40,
           "18446744073709551616", "0x10", "1_000", "1.5", "-0.0", "5e-324", '"', "'", "\\", "{", "}", "(", ")", "[",
           "]", "<", ">", "%", "@", "#", ":", ",", "=", "\n", "\t", "\r", "\x00", "\u2028", "\ufeff", "é", "💥",
           "\x85", "//", "/*", "..", "../", "/etc/passwd", "true", "null", " "]
HUGE = ["0", "-1", "-7", "1", "3", "65536", "2147483648", "9223372036854775808", "1" + "0" * 30, "1e9", "1e300",
        "1e999", "nan", "-inf", "0.5", "-0", "99999999999999999999999999999999999999999999"]
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
NEST_DEPTHS = [3, 50, 200, 1000, 5000, 50_000]


EDITS = ["flip", "delete", "duplicate", "token", "token", "number", "number", "nest", "truncate", "swap_lines"]


def mutate_text(rng: random.Random, text: str, tokens: list[str] = (), kinds: list[str] = EDITS) -> tuple[str, list[str]]:
    """1..4 random edits of text (of the given kinds); returns the result and a description of each."""
    done = []
    for _ in range(rng.randint(1, 4)):
        n = len(text)
        at = rng.randint(0, n)
        kind = rng.choice(kinds)
        if kind == "flip" and n:
            at = min(at, n - 1)
            ch = rng.choice([chr(rng.randint(0, 127)), chr(rng.randint(128, 0x10FFFF) & ~0x800 | 0x80),
                             rng.choice(SPECIAL)])
            if 0xD800 <= ord(ch[0]) <= 0xDFFF:
                ch = "\ufffd"
            text = text[:at] + ch + text[at + 1:]
        elif kind == "delete" and n:
            size = rng.choice([1, 1, 2, 5, 20, 200, n])
            text = text[:at] + text[at + size:]
        elif kind == "duplicate" and n:
            size = rng.choice([1, 10, 100, 1000])
            src = rng.randint(0, n)
            piece = text[src:src + size] * rng.choice([1, 1, 2, 50])
            text = text[:at] + piece + text[at:]
        elif kind == "token":
            tok = rng.choice(tokens) if tokens and rng.random() < 0.7 else rng.choice(SPECIAL)
            text = text[:at] + (" " if rng.random() < 0.5 else "") + tok + text[at:]
        elif kind == "number":
            numbers = list(_NUMBER.finditer(text))
            if numbers:
                m = rng.choice(numbers)
                text, at = text[:m.start()] + rng.choice(HUGE) + text[m.end():], m.start()
        elif kind == "nest":
            depth = rng.choice(NEST_DEPTHS)
            opener, closer = rng.choice([("{", "}"), ("(", ")"), ("[", "]"), ("<", ">"), ("{ test.op {", "}")])
            inner = opener * depth + (closer * depth if rng.random() < 0.6 else "")
            text = text[:at] + inner + text[at:]
        elif kind == "truncate":
            text = text[:at]
        elif kind == "swap_lines":
            lines = text.split("\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        else:
            continue
        done.append(f"{kind}@{at}")
    return text, done


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """Flip a few raw bytes (invalid UTF-8 included)."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


DEEP = re.compile(r'"@@DEEP(\d+)([\[{])@@"')


def deep_json(text: str) -> str:
    """Expand the deep-nesting placeholders random_value puts in (json.dumps cannot nest 50 000 deep)."""
    def expand(m):
        depth, opener = int(m.group(1)), m.group(2)
        if opener == "[":
            return "[" * depth + "]" * depth
        return '{"a":' * depth + "1" + "}" * depth
    return DEEP.sub(expand, text)


def random_value(rng: random.Random, depth: int = 0):
    """Any JSON/TOML-ish value: odd numbers, odd strings, wrong types, deep nesting."""
    kind = rng.choice(["int", "int", "float", "float", "str", "str", "bool", "none", "list", "dict", "deep"])
    if kind == "int":
        return rng.choice([0, -1, 1, 2, 3, -2 ** 63, 2 ** 63, 2 ** 64 + 1, 10 ** rng.randint(1, 400),
                           rng.randint(-10 ** 6, 10 ** 6)])
    if kind == "float":
        return rng.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, -1e308, 5e-324, 0.5, -2.5, 1e-9,
                           rng.uniform(-1e6, 1e6)])
    if kind == "str":
        return rng.choice(["", "x", "0", "-5GB", "1e999", "nan", "NaN MAC/s", "5 GHz", "1 TB", "-1us", "abc GB/s",
                           "9" * 400 + "GB", "../escape", "/etc/passwd", "a/../../b", "é💥\u2028", "\x00",
                           "ring", "tree", "a" * 10_000, "kernels/x.rasm", "manifest.json", "0" * 64,
                           "ratc-program/1", "float16", "llama"])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))] if depth < 3 else []
    if kind == "dict":
        return {rng.choice(["a", "x", "", "kernel", "cycles", "files"]): random_value(rng, depth + 1)
                for _ in range(rng.randint(0, 3))} if depth < 3 else {}
    return f"@@DEEP{rng.choice(NEST_DEPTHS)}{rng.choice('[{')}@@"


def _places(obj, path=()):
    """Every (path, value) inside a parsed JSON/TOML document."""
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _places(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _places(v, path + (i,))


def mutate_document(rng: random.Random, doc, keys: list[str] = ()) -> tuple[object, list[str]]:
    """1..3 structural edits of a parsed document: replace, delete or add a value somewhere."""
    done = []
    for _ in range(rng.randint(1, 3)):
        places = list(_places(doc))
        path, value = rng.choice(places)
        action = rng.choice(["replace", "replace", "replace", "delete", "add"])
        if not path:
            if action == "replace" and rng.random() < 0.1:
                doc = random_value(rng)
                done.append("replace document")
            continue
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        last = path[-1]
        if action == "replace":
            parent[last] = random_value(rng)
        elif action == "delete":
            del parent[last]
        elif isinstance(parent, dict):
            parent[rng.choice(list(keys) + ["extra", ""]) if keys else "extra"] = random_value(rng)
        else:
            parent.insert(rng.randint(0, len(parent)), random_value(rng))
        done.append(f"{action} {'/'.join(map(str, path))}")
    return doc, done


def dump_json(rng: random.Random, doc) -> str:
    """JSON text of doc (NaN/Infinity literals included), deep placeholders expanded."""
    return deep_json(json.dumps(doc, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5))


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        m = DEEP.fullmatch(json.dumps(v))
        if m:
            depth = int(m.group(1))
            return "[" * depth + "]" * depth if m.group(2) == "[" else "{a = " * depth + "1" + "}" * depth
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return "null"       # not TOML: a parse error, as a user's typo would be


def dump_toml(doc) -> str:
    """TOML text of a profile-shaped document: [tables] of key = value (anything else inline)."""
    lines = []
    if not isinstance(doc, dict):
        return f"value = {_toml_value(doc)}\n"
    plain = {k: v for k, v in doc.items() if not isinstance(v, dict)}
    for k, v in plain.items():
        lines.append(f"{json.dumps(str(k))} = {_toml_value(v)}")
    for name, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{json.dumps(str(name))}]")
            lines += [f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Cases and targets


@dataclass
class Case:
    """One mutated input: what was done to it, how to run it, and what its errors must name."""

    what: str
    run: Callable[[], None]
    where: tuple[str, ...] = ()       # any of these must appear in a RatcError's message


def run_case(case: Case) -> str:
    """'ok' or 'error' (a RatcError naming its place); raises Failure for anything else."""
    try:
        case.run()
    except RatcError as exc:
        text = str(exc)
        if case.where and not any(w in text for w in case.where):
            raise Failure(f"{type(exc).__name__} does not name {' or '.join(case.where)}: {text[:500]}") from exc
        return "error"
    except Failure:
        raise
    except BaseException as exc:  # noqa: BLE001 - every other outcome is the finding
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, MemoryError):
            raise Failure("MemoryError: over the memory limit") from exc
        tb = "".join(traceback.format_exception(exc, limit=-8))
        raise Failure(f"{type(exc).__name__}: {str(exc)[:300]}\n{tb[-3000:]}") from exc
    return "ok"


def _platform(env: Env):
    from ratc.platform import load_platform

    return env.cached("platform", lambda: load_platform("mt3000"))


def _grammar_ir(rng: random.Random) -> str:
    """A module from a small grammar of the 'test' dialect: ops with odd attribute values and
    types, use-before-def, unknown names and regions nested up to hundreds deep."""
    values: list[str] = []

    def attr() -> str:
        if rng.random() < 0.5:
            return rng.choice(["1.0", "2"])
        return rng.choice(["1.0", "-0.0", "1e999", "nan", "inf", str(10 ** rng.randint(0, 40)), "-1", "true",
                           '"s"', '"\\u00e9\\n"', "64KiB", "1e30GB", "@f0", "[1, 2]", "[]", "{a = 1}", "[" * 30 + "]" * 30])

    def typ() -> str:
        if rng.random() < 0.6:
            return "tensor<4xf32>"
        dims = "x".join(rng.choice(["1", "4", "0", "-1", "?", "99999999999999999999"]) for _ in range(rng.randint(0, 3)))
        return rng.choice([f"tensor<{dims + 'x' if dims else ''}{rng.choice(['f32', 'f16', 'bf16', 'i8', 'q9'])}>",
                           "!test.tok", "!x", "tensor<>", "i32"])

    def ops(depth: int, n: int) -> list[str]:
        lines = []
        for _ in range(n):
            ind = "  " * (depth + 1)
            kind = rng.choice(["const", "const", "add", "print", "func", "split", "token", "call", "attrs", "bogus"])
            use = lambda: rng.choice(values) if values and rng.random() < 0.9 else f"%undef{rng.randint(0, 9)}"  # noqa: E731
            if kind == "func" and depth < 400:
                inner = ops(depth + 1, rng.choice([0, 1, 1, 2]) if depth > 3 else rng.randint(0, 3))
                lines.append(f"{ind}test.func @f{depth}_{len(lines)} {{repeat = {attr()}}} {{")
                lines += inner + [f"{ind}}}"]
                continue
            name = f"%v{len(values)}"
            if kind == "const":
                lines.append(f"{ind}{name} = test.const {{value = {attr()}}} : {typ()}")
            elif kind == "add":
                lines.append(f"{ind}{name} = test.add({use()}, {use()}) : {typ()}")
            elif kind == "print":
                lines.append(f"{ind}test.print({use()})")
                continue
            elif kind == "split":
                lines.append(f"{ind}{name}, {name}b = test.split({use()}) : {typ()}, {typ()}")
            elif kind == "token":
                lines.append(f"{ind}{name} = test.token : !test.tok")
            elif kind == "call":
                lines.append(f"{ind}test.call({use()}) {{callee = @f{rng.randint(0, 3)}_{rng.randint(0, 3)}}}")
                continue
            elif kind == "attrs":
                key = rng.choice("ifsbnrldeal") + rng.choice(["", "", "i", "s"])
                lines.append(f"{ind}test.attrs {{{key} = {attr()}}}")
                continue
            else:
                lines.append(f"{ind}{name} = test.{rng.choice(['nope', 'const.x', ''])}() : {typ()}")
            values.append(name)
        return lines

    deep = rng.random() < 0.1
    body = ops(0, rng.randint(0, 12))
    if deep:    # a chain of funcs: each region holds the next
        depth = rng.choice([50, 300, 2000])
        body += [f"test.func @d{i} {{" for i in range(depth)] + ["}"] * depth
    return "module @fuzz {\n" + "\n".join(body) + "\n}\n"


def ir_text(rng: random.Random, env: Env) -> Case:
    """IR text: a real module with text edits, or tokens of the IR's vocabulary strung together."""
    from ratc.ir import load_dialects, parse_module, verify

    load_dialects()
    if rng.random() < 0.25:
        text, what = _grammar_ir(rng), "IR from the test-dialect grammar"
    elif rng.random() < 0.15:
        toks = env.tokens["ir"] + SPECIAL
        text = " ".join(rng.choice(toks) for _ in range(rng.randint(1, 200)))
        if rng.random() < 0.5:
            text = "module {\n" + text + "\n}\n"
        what = "random IR tokens"
    else:
        # a third change numbers only: the text still parses, and the verifier has to judge it
        kinds = ["number"] if rng.random() < 0.33 else EDITS
        text, edits = mutate_text(rng, rng.choice(env.ir_texts), env.tokens["ir"], kinds)
        what = "IR edits " + ", ".join(edits)

    def run():
        verify(parse_module(text, "fuzz.ir"))
    return Case(what, run, ("fuzz.ir",))


def platform_toml(rng: random.Random, env: Env) -> Case:
    """A shipped platform profile with values of other types, signs and sizes, keys missing or added."""
    from ratc.platform import parse_platform

    base = rng.choice(env.toml_texts)
    if rng.random() < 0.3:
        text, edits = mutate_text(rng, base)
        what = "TOML text edits " + ", ".join(edits)
    else:
        doc = tomllib.loads(base)
        keys = sorted({k for t in doc.values() if isinstance(t, dict) for k in t})
        doc, edits = mutate_document(rng, doc, keys)
        text, what = dump_toml(doc), "TOML value edits " + ", ".join(edits)
    return Case(what, lambda: parse_platform(text, "fuzz.toml"), ("fuzz.toml",))


def _copy_program(env: Env, name: str) -> Path:
    dest = env.scratch(name) / "prog"
    shutil.copytree(env.program, dest, symlinks=True)
    return dest


def _rehash(prog: Path) -> None:
    """Make the manifest list every file with its current hash, as a tamperer would."""
    import hashlib

    mpath = prog / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["files"] = {p.relative_to(prog).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                         for p in sorted(prog.rglob("*")) if p.is_file() and p.name != "manifest.json"}
    mpath.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def program_manifest(rng: random.Random, env: Env) -> Case:
    """The tiny program with an edited manifest.json (hashes, names, types, deep JSON), then loaded."""
    from ratc.program import load_program

    prog = _copy_program(env, "manifest")
    mpath = prog / "manifest.json"
    if rng.random() < 0.25:
        text, edits = mutate_text(rng, mpath.read_text())
        what = "manifest text edits " + ", ".join(edits)
    else:
        doc = json.loads(mpath.read_text())
        files = doc["files"]
        if rng.random() < 0.4 and files:
            # the interesting part: names and digests of the listed files
            name = rng.choice(sorted(files))
            choice = rng.choice(["rename", "digest", "add"])
            if choice == "rename":
                files[rng.choice(["../x", "/etc/passwd", "kernels", ".", "", "kernels/../model.ir", "a\x00b",
                                  "é.ir", "model.ir/", "//model.ir", name.upper()])] = files.pop(name)
            elif choice == "digest":
                files[name] = rng.choice(["", "0" * 64, files[name].upper(), files[name][:-1], "x" * 10_000])
            else:
                files[rng.choice(["missing.txt", "kernels", "manifest.json", "."])] = "0" * 64
            edits = [f"{choice} {name}"]
        else:
            doc, edits = mutate_document(rng, doc, ["files", "meta", "format", "ratc"])
        text, what = dump_json(rng, doc), "manifest edits " + ", ".join(edits)
    mpath.write_bytes(text.encode("utf-8", "surrogatepass") if rng.random() < 0.9
                      else mutate_bytes(rng, text.encode("utf-8", "surrogatepass")))

    def run():
        program = load_program(prog)
        for name in program.names():
            program.files[name].decode("utf-8", "replace")
    return Case(what, run, (str(prog),))


def kernels_json(rng: random.Random, env: Env) -> Case:
    """The tiny program's kernels.json with values edited, read as `ratc run` reads it."""
    from ratc.codegen.program_kernels import kernel_shares
    from ratc.program_check import read_kernel_table

    base = (env.program / "kernels.json").read_text()
    if rng.random() < 0.25:
        text, edits = mutate_text(rng, base)
        what = "kernels.json text edits " + ", ".join(edits)
    else:
        doc, edits = mutate_document(rng, json.loads(base), ["kernel", "cycles", "seconds", "calls_per_step"])
        text, what = dump_json(rng, doc), "kernels.json edits " + ", ".join(edits)

    def run():
        kernel_shares(read_kernel_table(text, "prog/kernels.json"), rng.choice([1e-3, 1e-300, 1.0]))
    return Case(what, run, ("prog/kernels.json",))


def rasm_text(rng: random.Random, env: Env) -> Case:
    """A real kernel's .rasm with text edits, assembled for its platform."""
    from ratc.codegen.assembler import assemble

    if rng.random() < 0.1:
        text = "\n".join(" ".join(rng.choice(env.tokens["rasm"] + SPECIAL) for _ in range(rng.randint(1, 8)))
                         for _ in range(rng.randint(1, 40)))
        what = "random rasm tokens"
    else:
        kinds = ["number"] if rng.random() < 0.33 else EDITS
        text, edits = mutate_text(rng, rng.choice(env.rasm_texts), env.tokens["rasm"], kinds)
        what = "rasm edits " + ", ".join(edits)
    platform = _platform(env)
    return Case(what, lambda: assemble(text, platform, "fuzz.rasm"), ("fuzz.rasm",))


def hf_config(rng: random.Random, env: Env) -> Case:
    """An example config.json with edited sizes and types, read and checked (no model is built)."""
    from ratc.frontend.hf import check_hf_config, load_hf_config

    base = rng.choice(env.hf_texts)
    if rng.random() < 0.2:
        text, edits = mutate_text(rng, base)
        what = "config.json text edits " + ", ".join(edits)
    else:
        doc = json.loads(base)
        doc, edits = mutate_document(rng, doc, ["hidden_size", "intermediate_size", "num_hidden_layers",
                                                "num_attention_heads", "num_key_value_heads", "vocab_size",
                                                "model_type", "head_dim"])
        text, what = dump_json(rng, doc), "config.json edits " + ", ".join(edits)
    path = env.scratch("hf") / "config.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))

    def run():
        from ratc.frontend.trace_cache import hf_config_key

        # as trace_hf_config reads one: the trace cache's key first, then the checks
        config = load_hf_config(path)
        hf_config_key(config, 2048, None)
        check_hf_config(config, str(path))
    return Case(what, run, (str(path),))


def _cli(argv: list[str]) -> Callable[[], None]:
    """Run `ratc ARGV` in process: exit 0 is success, exit 1 or 2 with an error message a Refused."""
    from ratc.cli.main import main

    def run():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:           # argparse's usage errors
                code = exc.code
        message = err.getvalue()
        if "Traceback" in message:
            raise Failure(f"traceback on stderr:\n{message[-3000:]}")
        if code == 0:
            return
        if code in (1, 2) and "error" in message:
            raise Refused(message.strip())
        raise Failure(f"exit status {code!r} with stderr {message[-1000:]!r}")
    return run


NUMBERS = ["0", "1", "2", "3", "4", "8", "16", "-1", "-5", "1e9", "1e12", "2.5", "nan", "inf", "", " ", "x", "0x10",
           "1_000", "99999999999999999999", "1000000000", "65536", "2048", "4096", "٣", "+4", "4.0", "-0"]
BUDGETS = ["30GB", "-5GB", "0", "0GB", "1B", "1e999GB", "nanGB", "infGB", "1 TB", "10MB", "x", "", "5", "1e30GB",
           "30 GiB", "-0GB", "9" * 30 + "GB"]


def _plan_config(rng: random.Random) -> str:
    """A --plan CONFIG string: keys, values and policies from the label form, some of them wrong."""
    parts = []
    for key in rng.sample(["P", "D", "T", "Z", "b", "A", "M", "act", "pref", "balance", "Q"], rng.randint(0, 7)):
        parts.append(f"{key}={rng.choice(NUMBERS + ['FSR', 'full', 'deadline', 'eager', 'time'])}")
    parts += rng.sample(["FSR", "Full", "deadline", "eager", "ckpt", "none", "=", ",", "P", "P=1=2"], rng.randint(0, 2))
    rng.shuffle(parts)
    return ",".join(parts)


def _tiles_spec(rng: random.Random, env: Env) -> str:
    parts = []
    for _ in range(rng.randint(0, 3)):
        sym = rng.choice(env.kernel_symbols + ["gemm_1x1x1_f16", "", "@x", "attn"])
        opts = ",".join(f"{rng.choice(['gm', 'gn', 'md', 'nd', 'kt', 'groups', 'unroll', 'br', 'bc', 'zz', 'KT'])}="
                        f"{rng.choice(NUMBERS)}" for _ in range(rng.randint(0, 3)))
        parts.append(f"{sym}{rng.choice([':', ':', ''])}{opts}")
    return rng.choice([";", "; ", ";;"]).join(parts)


def cli_options(rng: random.Random, env: Env) -> Case:
    """Size and option values on cheap commands: `ratc plan --preset tiny`, `ratc run --plan`,
    `ratc kernel` (no --run) and the codegen pass's --tiles."""
    which = rng.choice(["plan", "plan", "plan", "run", "kernel", "tiles"])
    if which == "plan":
        argv = ["plan", "--preset", "tiny", "--global-batch", rng.choice(NUMBERS + ["32"] * 5)]
        for flag, values in (("--clusters", NUMBERS + ["2"] * 3), ("--seq-len", NUMBERS + ["64"] * 3),
                             ("--memory-budget", BUDGETS), ("--micro-batch", NUMBERS), ("--pipeline", NUMBERS + ["any"]),
                             ("--max-clusters", NUMBERS), ("--top", NUMBERS)):
            if rng.random() < 0.4:
                for _ in range(rng.choice([1, 1, 1, 2]) if flag == "--micro-batch" else 1):
                    value = rng.choice(values)
                    # '--flag -5GB' is one of the cases: argparse reads -5GB as an option
                    argv += [f"{flag}={value}"] if rng.random() < (0.7 if value.startswith("-") else 0.3) \
                        else [flag, value]
        if rng.random() < 0.1:
            argv.append("--min-clusters")
        if rng.random() < 0.2:
            argv.append("--json")
    elif which == "run":
        argv = ["run", str(env.program), "--plan", _plan_config(rng), "--steps", rng.choice(["1"] * 5 + NUMBERS)]
    elif which == "kernel":
        kind = rng.choice(["gemm", "attention-backward"])
        argv = ["kernel", kind] + [rng.choice(NUMBERS + ["64", "128", "32"] * 4) for _ in range(rng.choice([3, 3, 2, 4]))]
        for _ in range(rng.randint(0, 2)):
            argv += ["--tile", f"{rng.choice(['gm', 'gn', 'md', 'nd', 'kt', 'groups', 'unroll', 'br', 'bc', 'q'])}="
                               f"{rng.choice(NUMBERS)}"]
        if kind != "gemm" and rng.random() < 0.5:
            argv += ["--kv-heads", rng.choice(NUMBERS)]
        argv += ["-o", str(env.scratch("kernel") / "k.rasm")]
    else:
        spec = _tiles_spec(rng, env)
        # errors name the spec ('tiles: ...') or the kernel and its option ('kernel @gemm_...: ...')
        return Case(f"--tiles {spec!r}", lambda: _retile(env, spec), ("tiles", "@"))
    return Case("ratc " + " ".join(argv), _cli(argv))


def _retile(env: Env, spec: str) -> None:
    """What `ratc compile --tiles SPEC` does before compiling: parse the spec, price the plan's kernels."""
    from ratc.codegen.program_kernels import parse_tiles, retiled_by
    from ratc.ir import parse_module
    from ratc.lifecycle.lowering import find_plan

    units = env.cached("units", lambda: find_plan(parse_module((env.program / "program.ir").read_text(),
                                                               "program.ir")).region.ops)
    retiled_by(units, _platform(env), parse_tiles(spec))


EDITABLE = ["program.ir", "model.ir", "kernels.json", "platform.toml", "plan.json", "schedule.txt"]


def _parsed(path: Path):
    """The JSON or TOML document in a file, or None when it is neither or does not parse."""
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text())
        if path.suffix == ".toml":
            return tomllib.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return None


def program_dir(rng: random.Random, env: Env) -> Case:
    """The tiny program with random file edits and its manifest regenerated to match, run as
    `ratc run` runs it."""
    prog = _copy_program(env, "progdir")
    files = sorted(p.relative_to(prog).as_posix() for p in prog.rglob("*") if p.is_file() and p.name != "manifest.json")
    edits = []
    for _ in range(rng.randint(1, 2)):
        action = rng.choice(["edit"] * 6 + ["add", "remove", "bytes"])
        name = rng.choice(EDITABLE * 3 + files)
        path = prog / name
        if action == "edit" and path.is_file():
            # an earlier edit of this case may have left the file unparsable: then edit its text
            doc = _parsed(path) if rng.random() < 0.6 else None
            if doc is not None:
                doc, e = mutate_document(rng, doc)
                path.write_text(dump_json(rng, doc) if name.endswith(".json") else dump_toml(doc))
            else:
                # half change numbers only: the files still parse, and their meaning is what is judged
                kinds = ["number"] if rng.random() < 0.5 else EDITS
                text, e = mutate_text(rng, path.read_bytes().decode("utf-8", "surrogateescape"),
                                      env.tokens["rasm" if name.endswith(".rasm") else "ir"], kinds)
                path.write_bytes(text.encode("utf-8", "surrogatepass"))
            edits.append(f"{name}: {', '.join(e)}")
        elif action == "bytes" and path.is_file():
            path.write_bytes(mutate_bytes(rng, path.read_bytes()))
            edits.append(f"{name}: byte flips")
        elif action == "remove" and path.is_file():
            path.unlink()
            edits.append(f"removed {name}")
        elif action == "add":
            extra = rng.choice(["notes.txt", "kernels/extra.rasm", "extra.ir", "sub/dir/x.json"])
            (prog / extra).parent.mkdir(parents=True, exist_ok=True)
            (prog / extra).write_text(rng.choice(env.rasm_texts + env.ir_texts + ["", "{}"]))
            edits.append(f"added {extra}")
    _rehash(prog)
    return Case("; ".join(edits) or "unchanged", _cli(["run", str(prog), "--steps", "1"]), (str(prog),))


TARGETS: dict[str, Callable[[random.Random, Env], Case]] = {
    "ir": ir_text,
    "platform": platform_toml,
    "manifest": program_manifest,
    "kernels-json": kernels_json,
    "rasm": rasm_text,
    "hf-config": hf_config,
    "cli": cli_options,
    "program-dir": program_dir,
}


def warm(env: Env) -> None:
    """Run the unmutated inputs through every parser once (imports, grammars, the kernel cache),
    so that each case pays only for itself."""
    from ratc.codegen.assembler import assemble
    from ratc.frontend.hf import check_hf_config
    from ratc.ir import load_dialects, parse_module, verify
    from ratc.platform import parse_platform

    load_dialects()
    for text in env.ir_texts:
        verify(parse_module(text, "warm.ir"))
    for text in env.toml_texts:
        parse_platform(text, "warm.toml")
    for text in env.rasm_texts:
        assemble(text, _platform(env), "warm.rasm")
    for text in env.hf_texts:
        check_hf_config(json.loads(text), "warm.json")
    _retile(env, "")
    for argv in (["plan", "--preset", "tiny", "--global-batch", "32", "--clusters", "2"],
                 ["run", str(env.program), "--steps", "1"]):
        _cli(argv)()


def make_case(target: str, seed: int, env: Env) -> Case:
    """The case a target makes of a seed (always the same one)."""
    return TARGETS[target](random.Random(f"{target}:{seed}"), env)


def reproducer(target: str, seed: int) -> str:
    """The command that runs one case again."""
    return f"python benchmarks/fuzz.py --target {target} --replay {seed}"

