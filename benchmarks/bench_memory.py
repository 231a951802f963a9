"""Peak memory of one training step: ours (cache, routed, reversal BiGRU) vs the authors' step.

Each configuration runs in its own fresh Python subprocess, all started at once (tracemalloc
does not see torch's allocations). The worker builds the model, optimiser and one synthetic batch
(batch 32), resets the kernel's peak-RSS mark to the current RSS (``/proc/self/clear_refs`` = 5),
runs one training step (forward, CTC, backward, clip, Adam) and reads the peak (``VmHWM``, the
counter behind ``getrusage().ru_maxrss``; ru_maxrss alone would also carry the set-up's peak and,
across fork+exec, the parent's, so its increase is shown only as a cross-check). Reported: the
step's peak increase (peak after the step - RSS before it) and the process peak. Configurations
are those of ``bench_training``, in fp32 on random-length batches:

* ours: APC features and surprisal from the feature cache (tensors in memory), routed small/big
  networks, the project's reversal BiGRU;
* authors' step (the baseline): a faithful copy of the authors' public training step. The
  waveform batch goes through the Kaldi-compatible filterbank and the APC model (forward only,
  ``no_grad``, left in train mode as in their code) on every step, both networks run on every
  frame (masked execution), and pre-net and post-net are ``nn.GRU(bidirectional=True)`` over the
  padded batch without packing. The waveforms are part of its batch, made before the step;
* at full size also ours with masked execution.

Usage: ``python -m benchmarks.bench_memory [--quick|--smoke] [--json]``
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
from typing import Dict, Optional

from benchmarks.bench_training import AUTHORS, OURS
from benchmarks.common import (REPO, BenchResult, SummaryRow, check_size, format_result, set_threads,
                               worker_command, worker_parser)

SIZES = {
    "full": dict(batch=32, t_min=300, t_max=800, configs=("ours", "authors", "ours_masked")),
    "quick": dict(batch=32, t_min=40, t_max=80, configs=("ours", "authors")),
    "smoke": dict(batch=2, t_min=4, t_max=8, configs=("ours", "authors")),
}
CONFIG_NAMES = {"ours": OURS, "authors": AUTHORS, "ours_masked": "ours + masked execution"}  # bench_training's names


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
    """Runs inside the subprocess: one training step, memory figures in MiB."""
    import gc

    import torch

    from benchmarks.bench_training import build_model, configs, make_batches, training_step

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    spec = configs()[CONFIG_NAMES[config]]
    model = build_model(spec, seed=seed)
    data = make_batches(1, batch, t_min, t_max, seed, waveforms=spec.features == "recompute")[0]
    gc.collect()
    reset = _reset_peak()
    rss_before = _proc_status_kib("VmRSS")
    peak_before = _proc_status_kib("VmHWM")
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    training_step(model, data)
    peak_after = _proc_status_kib("VmHWM")
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"rss_before_mib": rss_before / 1024, "peak_after_mib": peak_after / 1024,
            "step_peak_delta_mib": (peak_after - rss_before) / 1024,
            "ru_maxrss_delta_mib": (maxrss_after - maxrss_before) / 1024,
            "exact": reset or peak_after > peak_before}


def _command(config: str, batch: int, t_min: int, t_max: int, seed: int, threads: int):
    return worker_command("benchmarks.bench_memory", config, batch=batch, t_min=t_min, t_max=t_max, seed=seed,
                          threads=threads)


def measure_all(configs, batch: int, t_min: int, t_max: int, seed: int, threads: int) -> Dict[str, Dict]:
    """One fresh subprocess per configuration, run concurrently (ru_maxrss is per process)."""
    procs = {c: subprocess.Popen(_command(c, batch, t_min, t_max, seed, threads), cwd=REPO,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in configs}
    out = {}
    for config, proc in procs.items():
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"memory worker {config} failed:\n{stderr[-2000:]}")
        out[config] = json.loads(stdout.strip().splitlines()[-1])
    return out


def run(size: str = "full", seed: int = 0, threads: Optional[int] = None) -> BenchResult:
    cfg = SIZES[check_size(size)]
    threads = set_threads(threads, size)
    m = measure_all(cfg["configs"], cfg["batch"], cfg["t_min"], cfg["t_max"], seed, threads)
    res = BenchResult("memory", params=dict(size=size, batch=cfg["batch"], frames=f"{cfg['t_min']}-{cfg['t_max']}",
                                            threads=threads, seed=seed, method="VmHWM after clear_refs reset, fresh subprocess each"))
    ours, authors = m["ours"]["step_peak_delta_mib"], m["authors"]["step_peak_delta_mib"]
    res.summary.append(SummaryRow("training-step peak memory: ours vs the authors' step (fbank + APC every step, "
                                  "masked, unpacked nn.GRU)", ours, authors, "MiB",
                                  authors / ours if ours > 0 else None, "baseline/ours", "info (>= 1.0x)",
                                  None if ours <= 0 else authors / ours >= 1.0))
    res.add_detail(f"Peak memory of one training step, batch {cfg['batch']} (fresh process per configuration)",
                   ["configuration", "step peak increase MiB", "RSS before step MiB", "process peak MiB",
                    "ru_maxrss increase MiB", "vs ours", "exact?"],
                   [[CONFIG_NAMES[c], v["step_peak_delta_mib"], v["rss_before_mib"], v["peak_after_mib"],
                     v["ru_maxrss_delta_mib"],
                     v["step_peak_delta_mib"] / ours if ours > 0 else None,
                     "yes" if v["exact"] else "lower bound"] for c, v in m.items()])
    return res


def main(argv=None) -> int:
    ap = worker_parser(__doc__, CONFIG_NAMES)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.batch, a.t_min, a.t_max, a.seed, a.threads or (os.cpu_count() or 1))))
        return 0
    res = run("smoke" if a.smoke else "quick" if a.quick else "full")
    print(json.dumps(res.as_dict(), indent=2) if a.json else format_result(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
