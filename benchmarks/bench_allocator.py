"""Training step time with glibc's default ``malloc`` vs with freed memory kept for reuse.

The recipes call :func:`surprisal_cc.training.allocator.reuse_freed_memory` (hparams key ``malloc_reuse``),
which turns off glibc's ``mmap`` for large blocks and its trimming, so that a step reuses the
pages of the previous step instead of having the kernel map and zero them anew. The setting is
per process, so each configuration runs in its own fresh subprocess: ours (fp32, length-bucketed
batches, as the recipes train) for a warm-up step and then the timed steps; the subprocesses run
one after the other, alternating (default, reuse, default, reuse, ...). Reported: median step
time over all timed steps of a configuration (and its min-max), kernel (system) CPU time, minor
page faults and peak RSS.

Usage: ``python -m benchmarks.bench_allocator [--quick|--smoke] [--json] [--threads N]``
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List, Optional

from benchmarks.common import (BenchResult, SummaryRow, check_size, finish_worker, median, print_result, set_threads,
                               size_of, spread, start_worker, worker_parser)
from benchmarks.bench_training import timed_training_steps

SIZES = {  # batch, min frames, max frames, timed steps per process, processes per configuration
    "full": dict(batch=32, t_min=300, t_max=800, steps=5, rounds=2),
    "quick": dict(batch=8, t_min=30, t_max=60, steps=5, rounds=1),
    "smoke": dict(batch=2, t_min=4, t_max=8, steps=1, rounds=1),
}
CONFIG_NAMES = {"default": "glibc malloc as it comes", "reuse": "freed memory kept for reuse (malloc_reuse)"}


def _measure(config: str, cfg: Dict, seed: int, threads: int) -> Dict:
    proc = start_worker("benchmarks.bench_allocator", config, batch=cfg["batch"], t_min=cfg["t_min"],
                        t_max=cfg["t_max"], steps=cfg["steps"], seed=seed, threads=threads)
    return finish_worker(proc, f"allocator {config}")


def run(size: str = "full", seed: int = 0, threads: Optional[int] = None) -> BenchResult:
    cfg = SIZES[check_size(size)]
    threads = set_threads(threads)
    runs: Dict[str, List[Dict]] = {c: [] for c in CONFIG_NAMES}
    for _ in range(cfg["rounds"]):
        for config in CONFIG_NAMES:
            runs[config].append(_measure(config, cfg, seed, threads))
    res = BenchResult("allocator", params=dict(size=size, batch=cfg["batch"], frames=f"{cfg['t_min']}-{cfg['t_max']}",
                                               timed_steps=cfg["steps"], processes=cfg["rounds"], threads=threads,
                                               seed=seed, method="fresh subprocess each, run alternately"))
    steps = {c: [t for r in rs for t in r["times"]] for c, rs in runs.items()}
    step = {c: median(v) for c, v in steps.items()}
    applied = all(r["applied"] for r in runs["reuse"])
    res.summary.append(SummaryRow("training step (ours, fp32, length-bucketed): freed memory kept for reuse vs "
                                  "glibc's default malloc", step["reuse"], step["default"], "s/step",
                                  step["default"] / step["reuse"], "baseline/ours", "info", None,
                                  note=f"min–max {spread(steps['reuse'])} vs {spread(steps['default'])} s"
                                       + ("" if applied else "; the setting did not take effect (not glibc)")))
    res.add_detail(f"Per configuration (medians over the {cfg['steps'] * cfg['rounds']} timed steps, each process "
                   f"after its own warm-up step; CPU time and faults per step)",
                   ["malloc", "s/step", "min–max", "user CPU s", "kernel CPU s", "minor page faults", "peak RSS MiB",
                    "vs default"],
                   [[CONFIG_NAMES[c], step[c], spread(steps[c]), median([r["user_s"] for r in rs]),
                     median([r["sys_s"] for r in rs]),
                     median([r["minflt"] for r in rs]), max(r["maxrss_mib"] for r in rs), step["default"] / step[c]]
                    for c, rs in runs.items()])
    return res


def main(argv=None) -> int:
    ap = worker_parser(__doc__, CONFIG_NAMES)
    ap.add_argument("--steps", type=int, default=5, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(timed_training_steps(a.worker == "reuse", a.batch, a.t_min, a.t_max, a.steps, a.seed,
                                              a.threads)))
        return 0
    print_result(run(size_of(a), threads=a.threads), a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
