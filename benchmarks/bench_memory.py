"""Peak memory of a training step: ours (cache, routed, reversal BiGRU) vs the authors' step.

Each configuration runs in its own fresh Python subprocess, all started at once (tracemalloc
does not see torch's allocations), as the recipes train: freed memory kept for reuse
(``surprisal_cc.training.allocator.reuse_freed_memory``, the recipes' ``malloc_reuse: True``), set before
the model is built. The worker reads its resident memory once its modules are imported, builds
the model, optimiser and two synthetic batches (batch 32), runs one warm-up step (which creates
Adam's state and the allocator's pools, one-off costs), resets the kernel's peak-RSS mark to the
current RSS (``/proc/self/clear_refs`` = 5), runs the measured second step (forward, CTC,
backward, clip, Adam) and reads the peak (``VmHWM``, the counter behind
``getrusage().ru_maxrss``). Reported, in MiB:

* the headline: the measured step's peak above the RSS after the imports (model, optimiser
  state, batches and the step's working memory; the interpreter and libraries left out);
* the process peak during that step, the RSS before it, and the peak's increase over that RSS
  (memory the step needed beyond what the warm-up step left for reuse);
* where the peak mark could not be reset and the step set no new peak, the figures are upper
  bounds (the peak of the whole process so far).

Configurations are those of ``bench_training``, in fp32 on random-length batches:

* ours: APC features and surprisal from the feature cache (tensors in memory), routed small/big
  networks, the project's reversal BiGRU;
* authors' step (the baseline): a faithful copy of the authors' public training step. The
  waveform batch goes through the Kaldi-compatible filterbank and the APC model (forward only,
  ``no_grad``, left in train mode as in their code) on every step, both networks run on every
  frame (masked execution), and pre-net and post-net are ``nn.GRU(bidirectional=True)`` over the
  padded batch without packing. The waveforms are part of its batch, made before the steps;
* at full size also ours with masked execution.

Usage: ``python -m benchmarks.bench_memory [--quick|--smoke] [--json] [--threads N]``
"""
from __future__ import annotations

import json
import resource
from typing import Dict, Optional

from benchmarks.bench_training import AUTHORS, OURS
from benchmarks.common import (BenchResult, SummaryRow, check_size, finish_worker, print_result, set_threads, size_of,
                               start_worker, worker_parser)

SIZES = {
    "full": dict(batch=32, t_min=300, t_max=800, configs=("ours", "authors", "ours_masked")),
    "quick": dict(batch=32, t_min=40, t_max=80, configs=("ours", "authors")),
    "smoke": dict(batch=2, t_min=4, t_max=8, configs=("ours", "authors")),
}
CONFIG_NAMES = {"ours": OURS, "authors": AUTHORS, "ours_masked": "ours + masked execution"}  # bench_training's names
GOAL = 1.0  # the authors' step / ours, peak memory: reported, not a goal of the project ("info")


def _proc_status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def worker(config: str, batch: int, t_min: int, t_max: int, seed: int, threads: int) -> Dict[str, float]:
    """Runs inside the subprocess: a warm-up step, then the measured step; memory figures in MiB."""
    import gc
    import importlib

    import torch

    from benchmarks.bench_training import build_model, configs, make_batches, training_step
    from surprisal_cc.training.allocator import reuse_freed_memory

    reuse = reuse_freed_memory()  # as the recipes do, before the model is built
    torch.set_num_threads(threads)
    for module in ("surprisal_cc.model.apc", "surprisal_cc.model.architectures", "surprisal_cc.model.features"):  # build_model's imports
        importlib.import_module(module)
    gc.collect()
    rss_imports = _proc_status_kib("VmRSS")
    torch.manual_seed(seed)
    spec = configs()[CONFIG_NAMES[config]]
    model = build_model(spec, seed=seed)
    warmup, measured = make_batches(2, batch, t_min, t_max, seed, waveforms=spec.features == "recompute")
    training_step(model, warmup)
    gc.collect()
    reset = _reset_peak()
    rss_before = _proc_status_kib("VmRSS")
    peak_before = _proc_status_kib("VmHWM")
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    training_step(model, measured)
    peak_after = _proc_status_kib("VmHWM")
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"rss_imports_mib": rss_imports / 1024, "rss_before_mib": rss_before / 1024,
            "peak_after_mib": peak_after / 1024, "step_peak_mib": (peak_after - rss_imports) / 1024,
            "step_peak_delta_mib": (peak_after - rss_before) / 1024,
            "ru_maxrss_delta_mib": (maxrss_after - maxrss_before) / 1024,
            "exact": reset or peak_after > peak_before, "malloc_reuse": reuse}


def measure_all(configs, batch: int, t_min: int, t_max: int, seed: int, threads: int) -> Dict[str, Dict]:
    """One fresh subprocess per configuration, run concurrently (the peak is per process)."""
    procs = {c: start_worker("benchmarks.bench_memory", c, batch=batch, t_min=t_min, t_max=t_max, seed=seed,
                             threads=threads) for c in configs}
    return {c: finish_worker(proc, f"memory {c}") for c, proc in procs.items()}


def run(size: str = "full", seed: int = 0, threads: Optional[int] = None) -> BenchResult:
    cfg = SIZES[check_size(size)]
    threads = set_threads(threads)
    m = measure_all(cfg["configs"], cfg["batch"], cfg["t_min"], cfg["t_max"], seed, threads)
    res = BenchResult("memory", params=dict(size=size, batch=cfg["batch"], frames=f"{cfg['t_min']}-{cfg['t_max']}",
                                            threads=threads, seed=seed,
                                            method="second step after a warm-up step, VmHWM after a clear_refs "
                                                   "reset, freed memory kept for reuse, fresh subprocess each"))
    ours, authors = m["ours"]["step_peak_mib"], m["authors"]["step_peak_mib"]
    notes = [] if all(v["malloc_reuse"] for v in m.values()) else ["freed memory not kept for reuse (not glibc)"]
    if not all(v["exact"] for v in m.values()):
        notes.append("upper bounds: the peak mark could not be reset")
    res.summary.append(SummaryRow("training-step peak memory above the imports: ours vs the authors' step (fbank + APC "
                                  "every step, masked, unpacked nn.GRU)", ours, authors, "MiB",
                                  authors / ours if ours > 0 else None, "baseline/ours", f"info (>= {GOAL:g}x)",
                                  None if ours <= 0 else authors / ours >= GOAL, note="; ".join(notes)))
    res.add_detail(f"Peak memory of the second training step, batch {cfg['batch']} (fresh process per configuration, "
                   f"freed memory kept for reuse)",
                   ["configuration", "step peak above imports MiB", "vs ours", "RSS after imports MiB",
                    "RSS before step MiB", "process peak MiB", "peak increase over RSS before MiB",
                    "ru_maxrss increase MiB", "exact?"],
                   [[CONFIG_NAMES[c], v["step_peak_mib"], v["step_peak_mib"] / ours if ours > 0 else None,
                     v["rss_imports_mib"], v["rss_before_mib"], v["peak_after_mib"], v["step_peak_delta_mib"],
                     v["ru_maxrss_delta_mib"], "yes" if v["exact"] else "upper bound"] for c, v in m.items()])
    return res


def main(argv=None) -> int:
    ap = worker_parser(__doc__, CONFIG_NAMES)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.batch, a.t_min, a.t_max, a.seed, a.threads)))
        return 0
    print_result(run(size_of(a), threads=a.threads), a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
