"""Frontend speed and memory: trace LLaMA-2-70B (hand-written and from an HF config).

Each run is a fresh process, so imports are cold, and the trace cache is off; the figures
are medians. Budgets (issue 3): hand-written 70B <= 3 s, HF 70B config <= 15 s, peak RSS
<= 2 GB. The last row is the hand-written model again from a filled trace cache
(ratc.frontend.trace_cache), imports included: what a re-compile of it pays.

    python benchmarks/bench_trace.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMA2_70B_HF = dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                     num_key_value_heads=8, num_hidden_layers=80, vocab_size=32000,
                     max_position_embeddings=4096, rms_norm_eps=1e-5)
BUDGET = {"hand": 3.0, "hf": 15.0}
BUDGET["cached"] = BUDGET["hand"]      # a cache hit must not cost more than the trace it replaces
RSS_BUDGET_MB = 2048


def child(case: str) -> None:
    """One measurement: imports, then the trace, then peak RSS; prints JSON."""
    import resource

    t0 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    from ratc.frontend import trace_hf_config, trace_model_file
    if case != "cached":
        # ratc imports torch lazily, on the first trace; import it here so the trace column
        # measures tracing, as it did when importing ratc.frontend pulled torch in
        import torch  # noqa: F401
    if case == "hf":
        import transformers  # noqa: F401  (import cost reported separately)
    t1 = t0 if case == "cached" else time.perf_counter()
    if case in ("hand", "cached"):
        profile = trace_model_file(str(ROOT / "examples" / "llama.py"), "llama2-70b", 2048)
    else:
        profile = trace_hf_config(LLAMA2_70B_HF, 2048)
    t2 = time.perf_counter()
    assert profile.param_count == 68_976_648_192
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"import_s": t1 - t0, "trace_s": t2 - t1, "rss_mb": rss_mb}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--child", choices=sorted(BUDGET), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return 0
    ok = True
    print(f"{'case':<22}{'trace s (median)':>18}{'min':>8}{'max':>8}{'imports s':>11}{'peak RSS MB':>13}")
    cache = tempfile.TemporaryDirectory()
    for case, label in (("hand", "llama2-70b (llama.py)"), ("hf", "llama2-70b (HF config)"),
                        ("cached", "llama2-70b, cached")):
        env = {**os.environ, "RATC_CACHE_DIR": cache.name if case == "cached" else "off"}
        runs = []
        for i in range(args.runs + (case == "cached")):      # (the first cached run fills the cache)
            out = subprocess.run([sys.executable, __file__, "--child", case], capture_output=True, text=True,
                                 check=True, env=env).stdout
            if case != "cached" or i:
                runs.append(json.loads(out.strip().splitlines()[-1]))
        trace = [r["trace_s"] for r in runs]
        rss = max(r["rss_mb"] for r in runs)
        med = statistics.median(trace)
        print(f"{label:<22}{med:>18.3f}{min(trace):>8.3f}{max(trace):>8.3f}"
              f"{statistics.median(r['import_s'] for r in runs):>11.2f}{rss:>13.0f}")
        ok &= med <= BUDGET[case] and rss <= RSS_BUDGET_MB
    cache.cleanup()
    print("within budget" if ok else "OVER BUDGET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
