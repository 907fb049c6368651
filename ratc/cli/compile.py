"""`ratc compile`: a model file or Hugging Face config through the frontend to IR."""

from __future__ import annotations

import argparse
import sys

from ratc.errors import RatcError


def _emit_graph(profile) -> str:
    from ratc.ir import print_module, verify
    from ratc.ir.dialects.graph import module_from_profile

    module = module_from_profile(profile)
    verify(module)
    return print_module(module)


# One printer per --emit stage, in pipeline order; later stages extend this table.
EMITTERS = {"graph": _emit_graph}


def register(sub) -> None:
    p = sub.add_parser("compile", help="trace a model and compile it to IR",
                       description="Trace a PyTorch model file (or a Hugging Face config.json) on the meta "
                                   "device and print its IR.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n"
                              "  ratc compile examples/llama.py --preset llama2-7b --emit=graph\n"
                              "  ratc compile --hf-config examples/hf/qwen2.json --seq-len 512 -o qwen2.ir")
    p.add_argument("model", nargs="?", help="model file following the model-file protocol (docs/frontend.md)")
    p.add_argument("--preset", help="preset of the model file (default: its DEFAULT_PRESET)")
    p.add_argument("--seq-len", type=int, help="sequence length to trace (default: the model's input_spec)")
    p.add_argument("--hf-config", metavar="CONFIG_JSON",
                   help="trace a Hugging Face causal LM from its config.json instead (needs ratc[hf])")
    p.add_argument("--trace", choices=("auto", "fx", "export"), default="auto",
                   help="tracer for model files: torch.fx, torch.export, or fx then export (default)")
    p.add_argument("--emit", choices=sorted(EMITTERS), default="graph", help="what to print (default: graph)")
    p.add_argument("-o", "--output", help="write here instead of stdout")
    p.set_defaults(func=run)


def trace_inputs(args: argparse.Namespace):
    """The ModelProfile the arguments describe (model file or HF config)."""
    from ratc.frontend import trace_hf_config, trace_model_file

    if args.hf_config and args.model:
        raise RatcError("give either a model file or --hf-config, not both")
    if args.hf_config:
        if args.preset:
            raise RatcError("--preset applies to model files, not to --hf-config")
        return trace_hf_config(args.hf_config, args.seq_len or 2048)
    if not args.model:
        raise RatcError("no model: give a model file or --hf-config CONFIG_JSON")
    return trace_model_file(args.model, args.preset, args.seq_len, method=args.trace)


def _header(command: str, profile) -> str:
    """Comment lines that say how to reproduce the output and how it was traced."""
    meta = profile.meta
    return f"// {command}\n// tracer: {meta.get('tracer')}, layers traced: {meta.get('traced_layers')}\n"


def run(args: argparse.Namespace) -> int:
    from ratc.cli.io import write_output

    profile = trace_inputs(args)
    unmodeled = profile.meta.get("unmodeled_ops") or []
    if unmodeled:
        print(f"ratc: warning: no cost formula for {', '.join(unmodeled)}; "
              "costed as generic elementwise ops", file=sys.stderr)
    source = args.hf_config and f"--hf-config {args.hf_config}" or args.model
    extra = "".join(f" --{flag} {v}" for flag, v in (("preset", args.preset), ("seq-len", args.seq_len)) if v)
    text = _header(f"ratc compile {source}{extra} --emit={args.emit}", profile) + EMITTERS[args.emit](profile)
    write_output(args.output, text)
    return 0
