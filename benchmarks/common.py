"""Shared helpers of the benchmark suite: sizes, seeding, machine info, timing and tables.

Every benchmark returns a :class:`BenchResult`: summary rows (one per headline figure: ours,
baseline, ratio, target, met?) and detail tables, all measured in the same process and run.
Sizes come in three levels: ``full`` (the plan's sizes), ``quick`` (the whole suite in a few
minutes) and ``smoke`` (the tiniest shapes, for the unit test; timings meaningless). Every benchmark
runs torch on an explicit thread count (``--threads N``, default :data:`DEFAULT_THREADS`).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor, nn

from surprisal_cc.checks import positive_int
from surprisal_cc.inference.asr import resolve_device  # a ValueError for a missing CUDA device

REPO = Path(__file__).resolve().parents[1]
SIZES = ("full", "quick", "smoke")


def check_size(size: str) -> str:
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    return size


def seed_everything(seed: int = 0) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass


DEFAULT_THREADS = 1  # torch threads of every benchmark unless told (--threads N): explicit, never the core count


def set_threads(n: Optional[int] = None) -> int:
    """Set torch's intra-op threads to ``n`` (default :data:`DEFAULT_THREADS`); returns the count set."""
    n = n or DEFAULT_THREADS
    torch.set_num_threads(n)
    return n


def cpu_model_line() -> str:
    """The first ``model name`` line of ``/proc/cpuinfo`` as it stands, or "" where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    line = cpu_model_line()
    return line.split(":", 1)[1].strip() if ":" in line else platform.processor() or platform.machine()


def device_name(device: str = "cpu") -> str:
    """The GPU's name for a CUDA device, else the CPU model."""
    dev = torch.device(device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_model()


def synchronize(device: str = "cpu") -> None:
    """Wait for the device's queued work (CUDA runs asynchronously); nothing to do on the CPU."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def repeats_on(device: str, repeats: int) -> int:
    """Timed repeats on ``device``: 5x as many on a GPU, whose steps take milliseconds, for stable medians."""
    return repeats * 5 if torch.device(device).type == "cuda" else repeats


@contextlib.contextmanager
def full_fp32():
    """TF32 off for CUDA matrix products and cuDNN inside the block (exact fp32, for equality checks)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def load_average() -> List[float]:
    """The 1, 5 and 15-minute load averages (NaN where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return [float("nan")] * 3


def git_revision() -> Optional[str]:
    """``git rev-parse HEAD`` of the checkout holding the benchmarks, with ``+dirty`` when tracked files differ
    from it; None where git or the repository is missing."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


THREAD_VARIABLES = ("OMP_", "MKL_", "ATEN_")  # prefixes of the environment variables that steer torch's threads


def machine_info(device: str = "cpu", threads: Optional[int] = None) -> Dict[str, Any]:
    """What a timing depends on: the machine, torch, the thread count and settings, the load, the revision."""
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "cpu": cpu_model(),
        "cpu_model_line": cpu_model_line(),
        "cores": os.cpu_count(),
        "device": str(device) if torch.device(device).type == "cpu" else f"{device} ({device_name(device)})",
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": threads if threads is not None else torch.get_num_threads(),
        "thread_environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(THREAD_VARIABLES)},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1_5_15": load_average(),
    }


def load_warning(cores: int, threads: int, before: float, after: Optional[float] = None) -> Optional[str]:
    """One line of warning when the 1-minute load average exceeds the cores the benchmarks leave free plus 0.5,
    ``(cores - threads) + 0.5``: ``before`` the run, or ``after`` it less the benchmarks' own ``threads``; None
    otherwise (and where the system has no load average: NaN).

    Example
    -------
    >>> load_warning(2, 1, before=0.3, after=1.2) is None
    True
    >>> load_warning(2, 1, before=2.1)
    'WARNING: timings from a loaded machine: 1-minute load average 2.10 before the run > (2 cores - 1 threads) + 0.5'
    """
    limit = (cores - threads) + 0.5
    over = []
    if before > limit:  # False for NaN
        over.append(f"{before:.2f} before the run")
    if after is not None and after - threads > limit:
        over.append(f"{after:.2f} after it (less its own {threads})")
    if not over:
        return None
    return (f"WARNING: timings from a loaded machine: 1-minute load average {', '.join(over)} > ({cores} cores - "
            f"{threads} threads) + 0.5")


# ----------------------------------------------------------------------------------------------
# Results and tables
# ----------------------------------------------------------------------------------------------
@dataclass
class SummaryRow:
    """One headline figure. ``ratio`` is defined by ``ratio_def`` (e.g. "baseline/ours")."""

    benchmark: str
    ours: Optional[float]
    baseline: Optional[float]
    unit: str
    ratio: Optional[float]
    ratio_def: str
    target: str
    met: Optional[bool]
    note: str = ""


@dataclass
class BenchResult:
    name: str
    summary: List[SummaryRow] = field(default_factory=list)
    details: List[Dict[str, Any]] = field(default_factory=list)  # {"title", "headers", "rows"}
    params: Dict[str, Any] = field(default_factory=dict)
    skipped: Optional[str] = None  # reason, when the benchmark could not run
    seconds: float = 0.0

    def add_detail(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.details.append({"title": title, "headers": list(headers), "rows": [list(r) for r in rows]})

    def as_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["summary"] = [asdict(r) for r in self.summary]
        return d


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        a = abs(value)
        if value != value:
            return "nan"
        if a == 0:
            return "0"
        if a >= 1000:
            return f"{value:.0f}"
        if a >= 100:
            return f"{value:.1f}"
        if a >= 1e-3:
            return f"{value:.{digits}g}"
        return f"{value:.2e}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: Optional[str] = None) -> str:
    """Markdown table; ``align`` is one character per column, 'l' or 'r' (default: text left, numbers right)."""
    cells = [[fmt(c) for c in row] for row in rows]
    if align is None:
        first = rows[0] if rows else [""] * len(headers)
        align = "".join("r" if isinstance(c, (int, float)) and not isinstance(c, bool) else "l" for c in first)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


SUMMARY_HEADERS = ("benchmark", "ours", "baseline", "ratio", "target", "met?")


def summary_cells(row: SummaryRow) -> List[str]:
    unit = f" {row.unit}" if row.unit else ""
    ours = "-" if row.ours is None else f"{fmt(row.ours)}{unit}"
    base = "-" if row.baseline is None else f"{fmt(row.baseline)}{unit}"
    ratio = "-" if row.ratio is None else f"{row.ratio:.3f} ({row.ratio_def})"
    met = "-" if row.met is None else ("yes" if row.met else "NO")
    name = row.benchmark + (f" ({row.note})" if row.note else "")
    return [name, ours, base, ratio, row.target, met]


def format_result(result: BenchResult) -> str:
    parts = [f"### {result.name}"]
    if result.params:
        parts.append("params: " + ", ".join(f"{k}={v}" for k, v in result.params.items()))
    if result.skipped:
        parts.append(f"SKIPPED: {result.skipped}")
    for d in result.details:
        parts.append(f"{d['title']}\n\n{markdown_table(d['headers'], d['rows'])}")
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------
def interleaved_times(fns: Mapping[str, Callable[[], Any]], repeats: Union[int, Mapping[str, int]], warmup: int = 1,
                      before_each: Optional[Callable[[str, int], None]] = None,
                      device: str = "cpu") -> Dict[str, List[float]]:
    """Wall-clock seconds of every function, interleaved (A B C A B C ...) after ``warmup`` rounds.

    Interleaving spreads slow phases of a shared machine over all candidates alike. ``repeats``: the timed
    calls of every function, or a mapping from name to timed calls: a function with fewer runs in the first
    rounds only (its warm-up and timed calls interleaved with the same rounds of the others).
    ``before_each(name, i)`` runs untimed before each call of round ``i`` (e.g. to reseed). On a CUDA
    ``device`` each call is timed from an idle GPU until its queued work has finished.

    Example
    -------
    >>> calls = []
    >>> times = interleaved_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
    ...                           repeats={"a": 2, "b": 1}, warmup=1)
    >>> calls, {name: len(t) for name, t in times.items()}
    (['a', 'b', 'a', 'b', 'a'], {'a': 2, 'b': 1})
    """
    counts = {name: repeats if isinstance(repeats, int) else repeats[name] for name in fns}
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for i in range(warmup + max(counts.values(), default=0)):
        for name, fn in fns.items():
            if i >= warmup + counts[name]:
                continue
            if before_each is not None:
                before_each(name, i)
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            dt = time.perf_counter() - t0
            if i >= warmup:
                times[name].append(dt)
    return times


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def spread(xs: Sequence[float], scale: float = 1.0) -> str:
    """``min–max`` of ``xs`` times ``scale``, for a median's note.

    Example
    -------
    >>> spread([0.0123, 0.0101, 0.0110], scale=1000)
    '10.1–12.3'
    """
    return f"{fmt(min(xs) * scale)}–{fmt(max(xs) * scale)}"


# ----------------------------------------------------------------------------------------------
# Synthetic Mini-LibriSpeech-shaped data and PyTorch's bidirectional GRU, unpacked and packed
# ----------------------------------------------------------------------------------------------
def synthetic_lengths(batch: int, t_min: int, t_max: int, generator: torch.Generator) -> Tensor:
    """Frame counts uniform in [t_min, t_max], the longest forced to t_max (padded batch width)."""
    lengths = torch.randint(t_min, t_max + 1, (batch,), generator=generator)
    lengths[0] = t_max
    return lengths


def lengths_mask(lengths: Tensor, max_len: int) -> Tensor:
    return torch.arange(max_len)[None, :] < lengths[:, None]


class _TorchBiGRU(nn.Module):
    """``nn.GRU(batch_first=True, bidirectional=True)`` then dropout; drop-in for :class:`surprisal_cc.model.nnet.BiGRU`.

    Same call and parameters; :meth:`load_from` copies a BiGRU's weights so outputs can be compared.
    """

    def __init__(self, input_size: int, hidden_size: int = 256, dropout: float = 0.5):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        self.output_size = 2 * hidden_size

    @torch.no_grad()
    def load_from(self, bigru: nn.Module) -> "_TorchBiGRU":
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(self.gru, name).copy_(getattr(bigru.forward_gru, name))
            getattr(self.gru, name + "_reverse").copy_(getattr(bigru.backward_gru, name))
        return self


class UnpackedBiGRU(_TorchBiGRU):
    """``nn.GRU(batch_first=True, bidirectional=True)`` straight over the padded batch, as the authors' code runs it.

    ``lengths`` is ignored: the backward direction starts on the padding of the shorter
    sequences, so their real frames see padding (not exact, unlike :class:`PackedBiGRU` and the
    project's BiGRU). It is here for timing the authors' scheme, not as a reference of outputs.
    """

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        out, _ = self.gru(x)
        return self.dropout(out)


class PackedBiGRU(_TorchBiGRU):
    """``nn.GRU(bidirectional=True)`` over ``pack_padded_sequence``, then dropout (exact on variable lengths).

    The authors' public code did not pack; this is PyTorch's exact alternative to the project's BiGRU.
    """

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return self.dropout(out)


TORCH_BIGRUS = {"unpacked": UnpackedBiGRU, "packed": PackedBiGRU}


def paper_encoder(p_big: float, num_outputs: int, input_size: int = 512, **options: Any) -> nn.Module:
    """The paper's conditional encoder (Sec. 4.2) that sends each frame to the big network with
    probability ``p_big``, any value in [0, 1] (a ``ConstantController``; the random controller of
    the recipes refuses 0 and 1). ``options``: ``ConditionalEncoder`` settings, e.g. ``execution``."""
    from surprisal_cc.model.architectures import build_encoder
    from surprisal_cc.model.controllers import ConstantController
    from surprisal_cc.model.encoders import ConditionalEncoder

    parts = build_encoder("conditional", input_size, num_outputs, controller="big_only")
    return ConditionalEncoder(controller=ConstantController(p_big), pre_net=parts.pre_net, small_net=parts.small_net,
                              big_net=parts.big_net, post_net=parts.post_net, **options)


def use_torch_bigrus(encoder: nn.Module, kind: str) -> nn.Module:
    """Replace the pre-net and post-net BiGRUs of a paper-architecture ConditionalEncoder by
    PyTorch's bidirectional ``nn.GRU``: ``kind`` "unpacked" (the authors' code) or "packed"."""
    from surprisal_cc.model.nnet import BiGRU

    cls = TORCH_BIGRUS[kind]

    def replace(rnn: BiGRU) -> nn.Module:
        return cls(rnn.forward_gru.input_size, rnn.forward_gru.hidden_size, rnn.dropout.p).load_from(rnn)

    if isinstance(encoder.pre_net, BiGRU):
        encoder.pre_net = replace(encoder.pre_net)
    if encoder.post_net is not None and isinstance(getattr(encoder.post_net, "rnn", None), BiGRU):
        encoder.post_net.rnn = replace(encoder.post_net.rnn)
    return encoder


def bf16_supported(device: str = "cpu") -> bool:
    """Whether ``device`` computes in bf16 natively (:func:`surprisal_cc.runtime.native_bf16`): an x86
    CPU with the AVX-512-BF16 or AMX instruction sets (asked of the CPU), another CPU where oneDNN says
    so, a CUDA GPU of the Ampere generation or newer."""
    from surprisal_cc.runtime import native_bf16

    return native_bf16(device)


def size_parser(doc: str, threads: bool = True):
    """The options every benchmark's command line shares: ``[--quick|--smoke] [--json] [--threads N]``
    (``threads=False``: ``--threads`` left out of the help, for a benchmark that sets its own)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (seconds instead of minutes)")
    ap.add_argument("--smoke", action="store_true", help="tiniest sizes (tests; timings meaningless)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--threads", type=positive_int, default=DEFAULT_THREADS,
                    help=f"torch threads (default {DEFAULT_THREADS})" if threads else argparse.SUPPRESS)
    return ap


def size_of(args) -> str:
    return "smoke" if args.smoke else "quick" if args.quick else "full"


def print_result(result: BenchResult, as_json: bool) -> None:
    import json

    print(json.dumps(result.as_dict(), indent=2, default=str) if as_json else format_result(result))


def size_cli(run, doc: str, argv=None) -> int:
    """Shared command line of the size-levelled benchmarks: ``[--quick|--smoke] [--json] [--threads N]
    [--device D]`` (``--device`` for the benchmarks whose ``run`` takes one)."""
    import inspect

    ap = size_parser(doc)
    takes_device = "device" in inspect.signature(run).parameters
    if takes_device:
        ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    a = ap.parse_args(argv)
    kwargs = {"device": str(resolve_device(a.device))} if takes_device else {}
    print_result(run(size_of(a), threads=a.threads, **kwargs), a.json)
    return 0


def worker_parser(doc: str, configs: Iterable[str], threads: bool = True):
    """Command line of a benchmark that runs each configuration in a fresh subprocess of itself:
    ``[--quick|--smoke] [--json] [--threads N]``, plus the options the parent passes to a worker (``--worker
    CONFIG --batch --t-min --t-max --seed --threads``: :func:`worker_command`); ``threads``: as in
    :func:`size_parser`."""
    import argparse

    ap = size_parser(doc, threads)
    ap.add_argument("--worker", choices=sorted(configs), help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    ap.add_argument("--t-min", type=int, default=300, help=argparse.SUPPRESS)
    ap.add_argument("--t-max", type=int, default=800, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return ap


def start_worker(module: str, config: str, **options: Any):
    """Start ``python -m module --worker config ...`` (:func:`worker_command`) in the repository root;
    :func:`finish_worker` collects its result."""
    import subprocess

    return subprocess.Popen(worker_command(module, config, **options), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish_worker(proc, what: str) -> Dict[str, Any]:
    """Wait for a worker of :func:`start_worker`; its last line of output is its JSON result."""
    import json

    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{what} worker failed (exit {proc.returncode}):\n{err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def worker_command(module: str, config: str, **options: Any) -> List[str]:
    """``python -m module --worker config --key value ...`` (underscores in keys become dashes).

    Example
    -------
    >>> worker_command("benchmarks.bench_memory", "ours", batch=2, t_min=4)[2:]
    ['benchmarks.bench_memory', '--worker', 'ours', '--batch', '2', '--t-min', '4']
    """
    import sys

    flags = [item for key, value in options.items() for item in (f"--{key.replace('_', '-')}", str(value))]
    return [sys.executable, "-m", module, "--worker", config, *flags]
