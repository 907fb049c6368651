"""System VM throughput: simulated tasks per second, and one LLaMA-2-7B step end to end.

Every program is a preset's, compiled by the lifecycle passes (as `ratc compile` does); the
VM's part is translating it into tasks and simulating them.

    python benchmarks/bench_system_vm.py [--runs 5]

Reports medians over --runs of wall-clock and process CPU time (CPU time is what the VM
costs when the machine is shared). Targets (issue 6): >= 200,000 simulated tasks/s, and
one step of LLaMA-2-7B at P=2, D=4, A=128 simulated in <= 10 s.
"""

from __future__ import annotations

import argparse
import statistics
import time


def timed(fn, runs):
    """(median wall s, median CPU s, last result) of fn() over runs."""
    wall, cpu, out = [], [], None
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu), out


def compiled(runs, preset, plan, symmetric=True):
    """One step of a preset's program compiled by the lifecycle passes for a --plan."""
    from ratc.frontend.presets import trace_preset
    from ratc.platform import load_platform
    from ratc.step.config import parse_config
    from ratc.vm.system.driver import compile_candidate
    from ratc.vm.system.engine import simulate
    from ratc.vm.system.life import translate
    from ratc.vm.system.results import summarize

    platform = load_platform("mt3000")
    model = trace_preset(preset)
    cw, _, module = timed(lambda: compile_candidate(model, parse_config(plan), platform), 1)
    tw, tc, prog = timed(lambda: translate(module, platform, symmetric=symmetric, memory_limit=False), runs)
    sw, sc, tl = timed(lambda: simulate(prog), runs)
    res = summarize(tl)
    return {"case": f"{preset} {plan} ({'symmetric' if symmetric else 'explicit replicas'})",
            "tasks": len(prog.tasks), "compile_s": cw, "translate_wall_s": tw, "translate_cpu_s": tc,
            "sim_wall_s": sw, "sim_cpu_s": sc, "vm_wall_s": tw + sw, "step_time_s": res.step_seconds,
            "peak_gb": max(res.stage_peak_bytes) / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    # LLaMA-2-7B at P=2, D=4, b=1, A=128 (Table 3), with one replica standing for all and
    # with every replica simulated; then a long pipeline (8 stages of 10 layers, 128
    # micro-batches, 32 replicas: about 10^5 tasks).
    rows = [compiled(args.runs, "llama2-7b", "P=2,D=4,Z=2,b=1,A=128,FSR,deadline"),
            compiled(max(1, args.runs // 2), "llama2-7b", "P=2,D=4,Z=2,b=1,A=128,FSR,deadline", symmetric=False),
            compiled(args.runs, "llama2-70b", "P=8,D=32,Z=1,b=1,A=128,FSR,deadline")]
    for r in rows:
        print(r["case"])
        print(f"  tasks {r['tasks']}, simulate median {r['sim_wall_s']:.3f} s wall / {r['sim_cpu_s']:.3f} s CPU "
              f"-> {r['tasks'] / r['sim_wall_s']:,.0f} tasks/s wall, {r['tasks'] / r['sim_cpu_s']:,.0f} tasks/s CPU")
        print(f"  lifecycle compile {r['compile_s']:.2f} s (not the VM); "
              f"VM translate {r['translate_wall_s']:.2f} s + simulate {r['sim_wall_s']:.2f} s "
              f"= {r['vm_wall_s']:.2f} s wall per step; simulated step {r['step_time_s']:.2f} s, "
              f"peak {r['peak_gb']:.2f} GB")


if __name__ == "__main__":
    main()
