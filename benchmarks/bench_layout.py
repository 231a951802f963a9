"""Training throughput of two ways to lay runs out on a machine's cores: one run on all N cores
(N torch threads) or N runs side by side with one thread each.

The GRUs' per-time-step matrix products are small (batch 32 × 256 by 256 × 768) and do not
spread well over threads, so N one-thread runs may train more frames per second in all than one
N-thread run, at the price of each run taking longer. Each configuration runs in fresh worker
subprocesses: ours (fp32, length-bucketed batches, freed memory kept for reuse, as the recipes
train), one warm-up step and then the timed steps. The layouts alternate (one run, side by side,
one run, ...). Reported: the total real frames per second of each layout (side by side: the sum
over the runs of real frames per step / median step time), the ratio of the two, each run's step
time, and how much of the side-by-side runs' timed windows overlapped.

Usage: ``python -m benchmarks.bench_layout [--quick|--smoke] [--json] [--cores N]``
(N: the cores to share; default all of them: ``os.cpu_count()``, whatever the suite's ``--threads``,
which this benchmark does not take: its layouts are N threads and N times 1 thread).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional

from benchmarks.common import (BenchResult, SummaryRow, check_size, finish_worker, median, positive_int, print_result,
                               size_of, start_worker, worker_parser)
from benchmarks.bench_training import timed_training_steps

SIZES = {  # batch, min frames, max frames, timed steps per process, rounds of both layouts
    "full": dict(batch=32, t_min=300, t_max=800, steps=3, rounds=2),
    "quick": dict(batch=8, t_min=30, t_max=60, steps=3, rounds=1),
    "smoke": dict(batch=2, t_min=4, t_max=8, steps=1, rounds=1),
}
MODULE = "benchmarks.bench_layout"


def _side_by_side(cfg: Dict, seed: int, jobs: int, threads: int) -> List[Dict]:
    """``jobs`` workers started together, ``threads`` threads each; their results."""
    procs = [start_worker(MODULE, "ours", batch=cfg["batch"], t_min=cfg["t_min"], t_max=cfg["t_max"],
                          steps=cfg["steps"], seed=seed, threads=threads) for _ in range(jobs)]
    return [finish_worker(p, f"layout ({jobs} × {threads} threads)") for p in procs]


def _frames_per_s(result: Dict) -> float:
    return median(result["real_frames"]) / median(result["times"])


def overlap(windows: List[List[float]]) -> float:
    """Fraction of the union of the wall-clock windows during which all of them ran.

    Example
    -------
    >>> overlap([[0.0, 10.0], [2.0, 12.0]])
    0.6666666666666666
    >>> overlap([[0.0, 1.0], [2.0, 3.0]])
    0.0
    """
    start, end = max(w[0] for w in windows), min(w[1] for w in windows)
    union = max(w[1] for w in windows) - min(w[0] for w in windows)
    return max(0.0, end - start) / union if union > 0 else 1.0


def run(size: str = "full", seed: int = 0, cores: Optional[int] = None) -> BenchResult:
    cfg = SIZES[check_size(size)]
    cores = cores or (2 if size == "smoke" else os.cpu_count() or 1)  # smoke: both layouts, on any machine
    res = BenchResult("layout", params=dict(size=size, batch=cfg["batch"], frames=f"{cfg['t_min']}-{cfg['t_max']}",
                                            timed_steps=cfg["steps"], rounds=cfg["rounds"], cores=cores, seed=seed,
                                            method="fresh subprocesses; the layouts alternate"))
    if cores < 2:
        res.skipped = "one core: there is only one layout"
        return res
    one: List[Dict] = []
    side: List[List[Dict]] = []
    for _ in range(cfg["rounds"]):
        one += _side_by_side(cfg, seed, 1, cores)
        side.append(_side_by_side(cfg, seed, cores, 1))
    one_fps = median([_frames_per_s(r) for r in one])
    side_fps = median([sum(_frames_per_s(r) for r in runs) for runs in side])
    one_step = median([t for r in one for t in r["times"]])
    side_step = median([t for runs in side for r in runs for t in r["times"]])
    res.summary.append(SummaryRow(f"training throughput: {cores} runs × 1 thread side by side vs 1 run × {cores} "
                                  f"threads (ours, fp32, bucketed)", side_fps, one_fps, "real frames/s",
                                  side_fps / one_fps, "ours/baseline", "info", None))
    res.add_detail("Per layout (medians over the timed steps)",
                   ["layout", "runs", "threads each", "s/step of a run", "real frames/s in all", "vs one run",
                    "timed windows overlapping"],
                   [[f"1 × {cores} threads", 1, cores, one_step, one_fps, 1.0, "-"],
                    [f"{cores} × 1 thread", cores, 1, side_step, side_fps, side_fps / one_fps,
                     f"{min(overlap([r['window'] for r in runs]) for runs in side):.0%} (least)"]])
    return res


def main(argv=None) -> int:
    ap = worker_parser(__doc__, ["ours"], threads=False)  # --threads: the workers'
    ap.add_argument("--steps", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--cores", type=positive_int, help="the cores to share (default: all of them)")
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(timed_training_steps(True, a.batch, a.t_min, a.t_max, a.steps, a.seed, a.threads)))
        return 0
    print_result(run(size_of(a), cores=a.cores), a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
