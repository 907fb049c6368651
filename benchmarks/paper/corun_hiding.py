"""How much of a decoder layer's recomputation an FSR co-run hides, per model (docs/planner.md).

For one sequence of each model's decoder layer, on the shipped platform profile: a Recover
(the layer's forward) co-running with the Backward of the layer above and with a Forward
(ratc.planner.corun). Hidden = 1 - (what the pair adds to the host) / (the Recover alone).
"Perfect sharing" is the engines' total work as the only bound (corun.lower_bound).
"Recover stream" co-runs LEAD Recovers with LEAD Backwards as two free chains, i.e. what
FSR could hide with recoveries running any number of layers ahead (more recovery buffers).

    python benchmarks/paper/corun_hiding.py [--platform mt3000] [--models llama2-13b,...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ratc.frontend.presets import trace_preset  # noqa: E402
from ratc.planner.corun import corun, extra, lower_bound, solo  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402

MODELS = ("llama2-7b", "llama2-13b", "baichuan2-13b", "qwen2.5-32b", "llama2-70b")
LEAD = 4    # layers in the free-running Recover / Backward chains


def hiding(planner) -> dict:
    """Fractions of a decoder layer's Recover hidden by a Backward host, a Forward host, and
    under perfect sharing (Backward host)."""
    layer = next(u for u in planner.units(1).units if u.decoder)
    rec = solo(layer.fwd_phases)
    bwd, fwd = layer.bwd_phases, layer.fwd_phases
    perfect = lower_bound(bwd, fwd) - solo(bwd)
    stream = (corun(bwd * LEAD, fwd * LEAD) - LEAD * solo(bwd)) / LEAD
    return {"bwd": 1 - extra(bwd, fwd) / rec, "fwd": 1 - extra(fwd, fwd) / rec, "stream": 1 - stream / rec,
            "perfect": 1 - perfect / rec}


def main(argv=None) -> int:
    from markdown_rows import platform_and_models, progress

    platform, names = platform_and_models(__doc__, MODELS, argv)
    print(f"| model | Backward host hides | Forward host hides | Recover stream, {LEAD} layers "
          "| perfect sharing (Backward host) |")
    print("|---|---|---|---|---|")
    bar = progress(names, "models", "model")
    for name in bar:
        h = hiding(Planner(trace_preset(name, 2048), platform))
        bar.write(f"| {name} | {h['bwd']:.0%} | {h['fwd']:.0%} | {h['stream']:.0%} | {h['perfect']:.0%} |",
                  file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
