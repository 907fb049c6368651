"""`ratc kernel gemm M N K` / `ratc kernel attention-{backward,forward-fused} ...`: generate (and run) kernels."""

from __future__ import annotations

from ratc.cli.asm import MODES, add_json_argument, check_json, mode_help
from ratc.errors import RatcError


def register(subparsers) -> None:
    p = subparsers.add_parser("kernel", help="generate a GEMM or attention-backward kernel (.rasm)",
                              description="Generate a kernel for one cluster; print its .rasm, or --run it "
                                          "on the kernel VM and print the report.")
    p.add_argument("op", choices=("gemm", "attention-backward", "attention-backward-ddr", "attention-backward-fused",
                                  "attention-forward-fused"),
                   help="gemm: M N K (C[M,N] = A[M,K] B[K,N]); attention-backward[-ddr|-fused]: HEADS SEQ "
                        "HEAD_DIM (fused: P recomputed on chip from Q, K and each row's max and 1/sum); "
                        "attention-forward-fused: HEADS SEQ HEAD_DIM (online softmax, scores kept on chip)")
    p.add_argument("dims", nargs="+", type=int, help="shape")
    p.add_argument("--kv-heads", type=int, help="key/value heads for attention (default: HEADS)")
    p.add_argument("--tile", action="append", default=[], metavar="NAME=VALUE",
                   help="fix a tile option (gemm: gm, gn, md, nd, kt, groups, unroll; attention: br, bc)")
    p.add_argument("--platform", default="mt3000", help="platform profile name or TOML path (default mt3000)")
    p.add_argument("--run", action="store_true", help="execute and print the kernel report")
    p.add_argument("--mode", choices=tuple(MODES), default="timing", help=mode_help("timing"))
    p.add_argument("--random-inputs", type=int, metavar="SEED", default=None,
                   help="with --mode full: fill the DDR inputs with N(0,1) values from this seed")
    p.add_argument("-o", "--output", help="write the .rasm here (default stdout when not running)")
    add_json_argument(p)
    p.set_defaults(func=run, input=[], save=[])


def run(args) -> int:
    from ratc.cli.asm import run_and_report
    from ratc.io import report_written, to_file, write_output
    from ratc.codegen.program_kernels import check_tile_options
    from ratc.platform import load_platform

    check_json(args)
    if args.op == "gemm" and args.kv_heads is not None:
        raise RatcError("--kv-heads applies to attention kernels, not to gemm")
    if args.random_inputs is not None and not args.run:
        raise RatcError("--random-inputs fills the inputs of a run: add --run (and --mode full)")
    platform = load_platform(args.platform)
    options = {}
    for spec in args.tile:
        key, _, value = spec.partition("=")
        try:
            options[key] = int(value)
        except ValueError:
            raise RatcError(f"--tile {spec!r}: expected NAME=INTEGER") from None
    check_tile_options("gemm" if args.op == "gemm" else "attn_bwd", options, "--tile")
    if args.run and args.mode == "full" and args.op == "gemm" and len(args.dims) == 3:
        from ratc.limits import MAX_KERNEL_BYTES

        # A, B and C in DDR (f16) at the least: refused before the kernel is even generated
        m, n, k = args.dims
        MAX_KERNEL_BYTES.check(2 * (m * k + k * n + m * n), f"kernel gemm {m} {n} {k} in full mode",
                               "; --mode timing counts cycles without values")
    kernel = _generate(platform, args, options)
    if args.output or not args.run:
        write_output(args.output, kernel.text)
        if to_file(args.output):
            report_written(args.output, f"kernel {kernel.name}")
    if args.run:
        print(run_and_report(kernel.program, platform, args, kernel.macs, kernel.min_ddr_bytes))
    return 0


def _generate(platform, args, options):
    if args.op == "gemm":
        if len(args.dims) != 3:
            raise RatcError(f"kernel gemm takes M N K, got {len(args.dims)} numbers")
        from ratc.codegen.gemm import generate_gemm

        return generate_gemm(platform, *args.dims, **options)
    if len(args.dims) != 3:
        raise RatcError(f"kernel {args.op} takes HEADS SEQ HEAD_DIM, got {len(args.dims)} numbers")
    from ratc.codegen.attention import generate_attention_backward

    heads, seq, head_dim = args.dims
    if args.op == "attention-forward-fused":
        from ratc.codegen.flash_fwd import generate_flash_forward
        return generate_flash_forward(platform, heads, seq, head_dim,
                                      heads if args.kv_heads is None else args.kv_heads, **options)
    if args.op.endswith("-fused"):
        from ratc.codegen.flash import generate_flash_backward
        return generate_flash_backward(platform, heads, seq, head_dim,
                                       heads if args.kv_heads is None else args.kv_heads, **options)
    staged = args.op.endswith("-ddr")
    return generate_attention_backward(platform, heads, seq, head_dim, heads if args.kv_heads is None else args.kv_heads,
                                       ddr_staged=staged, **options)
