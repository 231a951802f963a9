"""Run the whole benchmark suite and print one combined table plus per-benchmark details.

    surprisal-cc bench [--quick] [--json] [--only training,rnn]
    python -m benchmarks.run_all [--quick|--smoke] [--json] [--only training,rnn] [--threads N] [--device cuda]

``python -m`` from the repository root; ``surprisal-cc bench`` runs it there from any folder.

Every figure is a ratio against a baseline measured in the same process and run (the memory
benchmark uses one fresh subprocess per configuration). Sizes: full (the plan's), quick (the
whole suite in well under a minute on an idle machine), smoke (tiniest shapes, for the tests;
timings meaningless, torch runs with 1 thread). Returns 0 when every benchmark ran (skips for
missing data included), 1 when one raised or the command line names an unknown benchmark (one
``error: ...`` line). Unmet targets are shown in the table (``met?`` = NO), not turned into a
failing exit status. ``--device cuda`` runs the GPU-capable benchmarks (``training`` and ``rnn``)
on the GPU and reports the others as skipped (they measure CPU work: decoding, data preparation,
CPU inference and memory).
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
import traceback
from typing import Callable, Dict, List, Optional, Sequence

import torch

from benchmarks.common import (
    SUMMARY_HEADERS,
    BenchResult,
    SummaryRow,
    check_size,
    format_result,
    machine_info,
    markdown_table,
    resolve_device,
    set_threads,
    summary_cells,
)

DECODING_SIZES = {
    "full": dict(T=300, V=42, n_utts=8, beam=10, repeats=2, kinds=("peaky", "flat")),
    "quick": dict(T=300, V=42, n_utts=4, beam=10, repeats=1, kinds=("peaky",)),
    "smoke": dict(T=20, V=42, n_utts=1, beam=10, repeats=1, kinds=("peaky",)),
}
DECODING_TARGET_MS = 30.0


def run_decoding(size: str = "full", seed: int = 0) -> BenchResult:
    """Native CTC prefix beam search vs SpeechBrain ``CTCBeamSearcher``, via ``bench_decoding``."""
    from benchmarks.bench_decoding import benchmark_beam_search

    cfg = DECODING_SIZES[check_size(size)]
    threads_before = torch.get_num_threads()
    try:  # benchmark_beam_search sets 1 thread (the per-utterance unit of the plan)
        rows = benchmark_beam_search(cfg["T"], cfg["V"], cfg["n_utts"], cfg["beam"], seed, cfg["repeats"],
                                     skip_slow=True, kinds=cfg["kinds"])
        threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    res = BenchResult("decoding", params=dict(size=size, T=cfg["T"], V=cfg["V"], beam=cfg["beam"],
                                              n_utts=cfg["n_utts"], repeats=cfg["repeats"], threads=threads,
                                              seed=seed))
    ref = "SpeechBrain CTCBeamSearcher defaults (per utt)"
    for kind in cfg["kinds"]:
        by_method = {r["method"]: r for r in rows if r["posteriors"] == kind}
        ours, base = by_method["native (per utt)"]["ms_per_utt"], by_method[ref]["ms_per_utt"]
        res.summary.append(SummaryRow(f"CTC beam search ({kind} posteriors)", ours, base, "ms/utt", base / ours,
                                      "baseline/ours", f"ours <= {DECODING_TARGET_MS:g} ms/utt",
                                      ours <= DECODING_TARGET_MS))
    res.add_detail(f"CTC beam search, T={cfg['T']}, V={cfg['V']}, beam {cfg['beam']}, {cfg['n_utts']} utts "
                   f"(best of {cfg['repeats']}, {threads} thread)",
                   ["posteriors", "method", "ms/utt", "speed vs SB CTCBeamSearcher", "= native", "mean log p(y|x)"],
                   [[r["posteriors"], r["method"], r["ms_per_utt"], r["speedup_vs_sb"], r["agree_native"],
                     r["mean_loglik"]] for r in rows])
    return res


def _runners() -> Dict[str, Callable[[str], BenchResult]]:
    from benchmarks import (bench_allocator, bench_dataprep, bench_inference, bench_layout, bench_memory, bench_rnn,
                            bench_training)

    return {
        "training": bench_training.run,
        "inference": bench_inference.run,
        "rnn": bench_rnn.run,
        "decoding": run_decoding,
        "dataprep": bench_dataprep.run,
        "memory": bench_memory.run,
        "allocator": bench_allocator.run,
        "layout": bench_layout.run,
    }


BENCHMARKS = ("training", "inference", "rnn", "decoding", "dataprep", "memory", "allocator", "layout")
ON_ANY_DEVICE = ("training", "rnn")  # the others measure CPU work


def collect(size: str = "full", only: Optional[Sequence[str]] = None, threads: Optional[int] = None,
            log: Callable[[str], None] = lambda s: None, device: str = "cpu") -> Dict:
    """Run the benchmarks; returns ``{"machine", "size", "benchmarks": {name: result dict}, "errors"}``."""
    check_size(size)
    device = str(resolve_device(device))
    on_cpu = device == "cpu"
    names = list(only) if only else list(BENCHMARKS)
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        raise ValueError(f"unknown benchmarks {sorted(unknown)}; choose from {BENCHMARKS}")
    runners = _runners()
    threads_before = torch.get_num_threads()
    set_threads(threads, size)
    machine = machine_info(device)
    results: Dict[str, BenchResult] = {}
    errors: Dict[str, str] = {}
    for name in names:
        log(f"[bench] {name} ({size}) ...")
        t0 = time.perf_counter()
        try:
            kwargs = {"threads": threads} if threads and "threads" in inspect.signature(runners[name]).parameters else {}
            if not on_cpu and name in ON_ANY_DEVICE:
                kwargs["device"] = device
            if not on_cpu and name not in ON_ANY_DEVICE:
                result = BenchResult(name, skipped=f"measures CPU work: run it without --device {device}")
            else:
                result = runners[name](size, **kwargs)
        except Exception as err:  # report and go on with the other benchmarks
            errors[name] = "".join(traceback.format_exception_only(type(err), err)).strip()
            log(traceback.format_exc())
            result = BenchResult(name, skipped=f"error: {errors[name]}")
            result.summary.append(SummaryRow(name, None, None, "", None, "-", "-", None, note="ERROR"))
        finally:
            set_threads(threads, size)
        result.seconds = time.perf_counter() - t0
        results[name] = result
        log(f"[bench] {name} done in {result.seconds:.1f} s")
    machine["load_average_after"] = machine_info()["load_average_1_5_15"]
    torch.set_num_threads(threads_before)  # leave the caller's setting as it was
    return {"machine": machine, "size": size, "benchmarks": {n: r.as_dict() for n, r in results.items()},
            "errors": errors, "_results": results}


def format_report(report: Dict) -> str:
    m = report["machine"]
    results: Dict[str, BenchResult] = report["_results"]
    head = (f"# surprisal_cc benchmarks ({report['size']} sizes)\n\n"
            f"date {m['date']}; device {m['device']}; CPU {m['cpu']}; {m['cores']} cores; torch {m['torch']} with "
            f"{m['torch_threads']} "
            f"threads (decoding: 1); Python {m['python']}; load average before {m['load_average_1_5_15']}, "
            f"after {m['load_average_after']} (1/5/15 min)")
    rows: List[List[str]] = [summary_cells(r) for res in results.values() for r in res.summary]
    table = markdown_table(SUMMARY_HEADERS, rows, align="lrrrll")
    details = "\n\n".join(format_result(r) + f"\n\n(ran in {r.seconds:.1f} s)" for r in results.values())
    return f"{head}\n\n## Summary\n\n{table}\n\n## Details\n\n{details}"


def run_benchmarks(as_json: bool = False, quick: bool = False, size: Optional[str] = None,
                   only: Optional[Sequence[str]] = None, threads: Optional[int] = None, device: str = "cpu") -> int:
    """Run the suite and print Markdown (or JSON); the entry point of ``surprisal-cc bench``."""
    size = size or ("quick" if quick else "full")
    report = collect(size, only, threads, log=lambda s: print(s, file=sys.stderr, flush=True), device=device)
    if as_json:
        print(json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, indent=2, default=str))
    else:
        print(format_report(report))
    return 1 if report["errors"] else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (seconds instead of minutes)")
    ap.add_argument("--smoke", action="store_true", help="tiniest sizes (tests; timings meaningless)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: os.cpu_count())")
    ap.add_argument("--device", default="cpu", help=f"cpu (default) or cuda[:N]: runs {', '.join(ON_ANY_DEVICE)} there")
    a = ap.parse_args(argv)
    size = "smoke" if a.smoke else "quick" if a.quick else "full"
    only = None if a.only is None else [s.strip() for s in a.only.split(",") if s.strip()]
    if only == []:
        ap.error(f"--only names no benchmark; choose from {','.join(BENCHMARKS)}")
    try:
        return run_benchmarks(as_json=a.json, size=size, only=only, threads=a.threads or None, device=a.device)
    except ValueError as err:  # an unknown benchmark name or a missing CUDA device: raised before any benchmark runs
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
