"""The model a command reads: a model file, a preset of the bundled example, or a Hugging Face config.

`ratc compile`, `plan`, `report`, `diagram` and `train` take the same sources with the same
flags, checks and messages (a config.json given as a file or as a model id in the local
Hugging Face cache); only the help texts differ. A model the user did not name is said on stderr.
"""

from __future__ import annotations

import argparse
import sys

from ratc.input_files import not_a_file
from ratc.errors import RatcError

HF_SEQ_LEN = 2048      # an HF config.json names no training sequence length


def add_model_arguments(p: argparse.ArgumentParser, model_help: str, tracer: bool = False,
                        seq_len: bool = True) -> None:
    """The positional model file, --preset, --seq-len (if `seq_len`), --hf-config and --hf-model
    (and --trace if `tracer`)."""
    p.add_argument("model", nargs="?", help=model_help)
    p.add_argument("--preset", help="preset of the model file (default: its DEFAULT_PRESET), or without a "
                                    "file one of the bundled examples/llama.py's, e.g. llama2-7b, qwen2.5-32b, tiny")
    if seq_len:
        p.add_argument("--seq-len", type=int, default=None,
                       help=f"sequence length (default: the model file's input_spec; {HF_SEQ_LEN} for --hf-config)")
    p.add_argument("--hf-config", metavar="CONFIG_JSON",
                   help="trace a Hugging Face causal LM from its config.json instead (needs ratc[hf])")
    p.add_argument("--hf-model", metavar="ORG/NAME[@REV]",
                   help="as --hf-config, with the config.json of this model id in the local Hugging Face cache "
                        "($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub; no network), "
                        "e.g. meta-llama/Llama-2-7b-hf")
    if tracer:
        p.add_argument("--trace", choices=("auto", "fx", "export"), default="auto",
                       help="tracer for model files: torch.fx, torch.export, or fx then export (default)")


def named(args: argparse.Namespace) -> bool:
    """Whether the arguments name a model at all."""
    return bool(args.model or args.preset or args.hf_config or getattr(args, "hf_model", None))


def _resolve_hf_model(args: argparse.Namespace) -> None:
    """--hf-model ID[@REV] becomes --hf-config with the cached config.json (kept in args.hf_config)."""
    model_id = getattr(args, "hf_model", None)
    if not model_id or getattr(args, "hf_model_config", None):
        return
    if args.hf_config:
        raise RatcError("give either --hf-config or --hf-model, not both")
    from ratc.frontend.hf_cache import cached_config

    name, _, revision = model_id.partition("@")
    args.hf_config = args.hf_model_config = str(cached_config(name, revision or "main"))


def check_model_source(args: argparse.Namespace, default_preset: str | None = None) -> None:
    """One source, and a file that exists; checked before anything slow runs."""
    _resolve_hf_model(args)
    if args.hf_config and args.model:
        raise RatcError("give either a model file or --hf-config, not both")
    if args.hf_config and args.preset:
        raise RatcError("--preset applies to model files, not to --hf-config")
    if not named(args) and default_preset is None:
        raise RatcError("no model: give a model file, --preset NAME (the bundled examples/llama.py), "
                        "--hf-config CONFIG_JSON or --hf-model ORG/NAME")
    if getattr(args, "seq_len", None) is not None:
        from ratc.limits import MAX_SEQ_LEN

        if args.seq_len < 2:
            raise RatcError(f"--seq-len: sequence length must be at least 2, got {args.seq_len}")
        MAX_SEQ_LEN.check(args.seq_len, "--seq-len")
    source = args.hf_config or args.model
    problem = not_a_file(source) if source else None
    if problem:
        raise RatcError(problem)


def load_model(args: argparse.Namespace, default_preset: str | None = None):
    """The ModelProfile the arguments name (traced, or from the trace cache)."""
    check_model_source(args, default_preset)
    if args.hf_config:
        from ratc.frontend.hf import trace_hf_config
        if args.seq_len is None:
            picked(args, f"{HF_SEQ_LEN}-token sequences (a config.json names no training length; "
                         "--seq-len sets it)")
        return trace_hf_config(args.hf_config, HF_SEQ_LEN if args.seq_len is None else args.seq_len)
    from ratc.io import note_input
    from ratc.frontend.modelfile import trace_model_file

    # A preset alone is the bundled example's: the same as naming the file, trace cache
    # included (the file checks the preset when it is imported, which a cached trace skips).
    path = model_file(args)
    note_input(path)        # (a preset alone reads the bundled example: no output may replace it)
    preset = args.preset or (None if args.model else default_preset)
    profile = trace_model_file(path, preset, args.seq_len, method=getattr(args, "trace", "auto"))
    if not args.model and not args.preset:
        picked(args, f"the bundled examples/llama.py --preset {profile.name} (no model named; "
                     "name one with --preset, a model file, --hf-config or --hf-model)")
    elif not args.preset:
        picked(args, f"{args.model}'s default preset '{profile.name}' (--preset chooses another)")
    return profile


def picked(args: argparse.Namespace, what: str) -> None:
    """One line on stderr naming a choice the command made for the user."""
    command = getattr(args, "command", None)
    print(printable(f"ratc {command}: using {what}" if command else f"ratc: using {what}"), file=sys.stderr)


def model_file(args: argparse.Namespace) -> str | None:
    """The model file the arguments name: the file, the bundled example for a preset alone,
    or None for --hf-config."""
    from ratc.frontend.presets import example_model

    if args.hf_config:
        return None
    return args.model or str(example_model())


def describe(args: argparse.Namespace) -> str:
    """The source as command-line words, to reproduce an output: 'FILE --preset X --seq-len N'."""
    hf_model = getattr(args, "hf_model", None)
    words = [f"--hf-model {hf_model}" if hf_model else f"--hf-config {args.hf_config}" if args.hf_config
             else args.model or ""]
    words += [f"--{flag} {v}" for flag, v in (("preset", args.preset), ("seq-len", args.seq_len)) if v]
    return printable(" ".join(w for w in words if w))


def printable(text: str) -> str:
    """Text as it can be written into a UTF-8 output: a file name's undecodable bytes (kept
    by Python as lone surrogates) become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode(
        "utf-8", "replace").decode("utf-8")
