"""Training step time: this project's scheme vs a faithful copy of the authors' public training step.

Synthetic batches shaped like Mini-LibriSpeech (B=32, 300-800 frames of 20 ms = 6-16 s of 16 kHz
audio, variable lengths, 42 CTC outputs). One step = forward + CTC loss + backward + gradient
clipping (5) + Adam (3e-4). The paper's architecture throughout: BiGRU pre-net, small and big
per-frame networks, BiGRU post-net.

* authors' step (the baseline): what the authors' public code runs on every step. The waveform
  batch goes through the Kaldi-compatible 80-bin filterbank (``FilterbankFrontEnd``,
  torchaudio's ``compliance.kaldi.fbank``, one call per utterance); the APC model is recomputed
  on it (forward only, ``no_grad``, and in train mode, i.e. with its dropout active, as the
  authors left it); both networks run on every frame (``execution="masked"``); pre-net and
  post-net are ``nn.GRU(batch_first=True, bidirectional=True)`` straight over the padded batch
  (no packing).
* ours: APC features and surprisal read from the feature cache (tensors in memory: neither
  filterbank nor APC run), routed small/big networks (gather/scatter), BiGRUs as two
  unidirectional GRUs with per-sequence reversal (``surprisal_cc.model.nnet.BiGRU``). In fp32, and
  in bf16 under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (forward and loss; the row is
  skipped where the CPU has no native bf16). The goal compares ours in the best precision
  (what ``precision: auto`` picks: bf16 where native and measured faster, else fp32) with the
  authors' step on the same batches: >= 5x.
* ours, length-bucketed: ours (best precision) on batches whose lengths are close together.
  Each is the middle bucket of a pool of 16 batches' worth of utterances drawn from the same
  length distribution and sorted by length, so it has about as many real frames as a random
  batch but little padding. Compared by real frames per second.
* factors: ours with exactly one choice switched to the authors' (filterbank + APC every step,
  exactly as in the authors' step; masked execution; unpacked ``nn.GRU``), plus ours with
  packed ``nn.GRU`` (``pack_padded_sequence``), which the authors' code did not use: PyTorch's
  exact alternative to the reversal BiGRU, whose backward pass is very slow on the CPU.

* the matrix-product floor: the matrix products of ours, length-bucketed, as its timed steps ran
  them (read off forward hooks on every Linear and GRU layer, so the routed networks count the
  frames routed to them; forward, weight and input gradients, and each GRU's recurrent product
  twice per time step), each distinct shape timed alone as ``torch.mm`` in the step's precision.
  Their sum is what the step would take if nothing but its products ran at this machine's speed
  for their shapes; real frames per step over it, against the authors' step, is the ceiling of
  the speed-up that any implementation of this arithmetic can reach here.

The controller is a random one with p_big = 0.65 (the calibrated Mini-LibriSpeech mean): the
routing cost depends only on the fraction of big frames. Steps of all configurations are
interleaved (A B C ... A B C ...), after one warm-up step each on its own configuration; the
median step time is reported with its min-max, and real (unpadded) frames per second = real
frames of the batch / step time. The headline configurations (ours in each precision, bucketed,
the authors' step) are timed ``steps`` times; the factors and packed ``nn.GRU`` (information
only, the packed step is the slowest by far) ``factor_steps`` times, in the first rounds, and are
compared with ours and the authors' step over those same rounds.

On a GPU (``--device cuda``) the same steps run there, bf16 under ``torch.autocast("cuda")``;
the batches are made on the CPU and moved to the GPU before timing, and each step is timed until
the GPU has finished it.

Usage: ``python -m benchmarks.bench_training [--quick|--smoke] [--json] [--threads N] [--device cuda]``
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.common import (
    size_cli,
    BenchResult,
    SummaryRow,
    bf16_supported,
    check_size,
    interleaved_times,
    median,
    paper_encoder,
    repeats_on,
    resolve_device,
    seed_everything,
    set_threads,
    spread,
    synchronize,
    synthetic_lengths,
    lengths_mask,
    use_torch_bigrus,
)

NUM_OUTPUTS = 42  # 41 Mini-LibriSpeech labels + CTC blank
P_BIG = 0.65
SAMPLE_RATE = 16000
N_BUCKETS = 16  # a bucketed batch is the middle one of this many sorted batches
GOAL = 5.0  # ours (best precision) vs the authors' step
SIZES = {  # batch, min frames, max frames, timed steps of the headline configurations and of the others, warm-up steps
    "full": dict(batch=32, t_min=300, t_max=800, steps=5, factor_steps=3, warmup=1),
    "quick": dict(batch=8, t_min=30, t_max=60, steps=5, factor_steps=3, warmup=1),
    "smoke": dict(batch=2, t_min=4, t_max=8, steps=1, factor_steps=1, warmup=0),
}


@dataclass(frozen=True)
class StepConfig:
    features: str = "cache"  # "cache": features in memory; "recompute": filterbank + APC from the waveform
    execution: str = "routed"  # "routed" or "masked" (both networks on every frame)
    rnn: str = "reversal"  # "reversal" (the project's BiGRU), "unpacked" or "packed" nn.GRU
    precision: str = "fp32"  # "fp32" or "bf16" (CPU autocast)
    batching: str = "random"  # "random" lengths or "bucketed" (middle bucket of a sorted pool)


OURS = "ours fp32 (cache, routed, reversal BiGRU)"
OURS_BF16 = "ours bf16 autocast"
OURS_BUCKETED = "ours, length-bucketed batches"
AUTHORS = "authors' step (fbank + APC every step, masked, unpacked nn.GRU)"
AUTHORS_BF16 = "authors' step in bf16 autocast"
PACKED = "ours + packed nn.GRU, which the authors' code did not use"
FACTORS = {  # factor -> config with only that choice switched away from ours
    "feature cache vs fbank + APC every step": "ours + fbank + APC every step",
    "routed vs masked": "ours + masked execution",
    "reversal BiGRU vs unpacked nn.GRU": "ours + unpacked nn.GRU",
}
PACKED_FACTOR = "reversal BiGRU vs packed nn.GRU, which the authors' code did not use"
HEADLINE = (OURS, OURS_BF16, OURS_BUCKETED, AUTHORS, AUTHORS_BF16)  # timed ``steps`` times; the others fewer


def best_precision(device: str = "cpu") -> str:
    """The recipes' ``precision: auto`` on ``device`` (bf16 on a CPU with native bf16, else fp32), and never bf16
    where the device has no native bf16."""
    from surprisal_cc.runtime import auto_precision

    return "bf16" if bf16_supported(device) and auto_precision(device) == "bf16" else "fp32"


def configs(device: str = "cpu") -> Dict[str, StepConfig]:
    """Every timed configuration; the bf16 one only where bf16 is native."""
    out = {OURS: StepConfig()}
    if bf16_supported(device):
        out[OURS_BF16] = StepConfig(precision="bf16")
    out[OURS_BUCKETED] = StepConfig(precision=best_precision(device), batching="bucketed")
    out[AUTHORS] = StepConfig(features="recompute", execution="masked", rnn="unpacked")
    if bf16_supported(device):
        out[AUTHORS_BF16] = StepConfig(features="recompute", execution="masked", rnn="unpacked", precision="bf16")
    out[FACTORS["feature cache vs fbank + APC every step"]] = StepConfig(features="recompute")
    out[FACTORS["routed vs masked"]] = StepConfig(execution="masked")
    out[FACTORS["reversal BiGRU vs unpacked nn.GRU"]] = StepConfig(rnn="unpacked")
    out[PACKED] = StepConfig(rnn="packed")
    return out


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------
class Batch(NamedTuple):
    waveforms: Optional[Tensor]  # (B, S) 16 kHz audio, zero after each utterance's samples, or None
    samples: Tensor  # (B,) sample counts
    feats: Tensor  # (B, T, 512) cached APC features
    surprisal: Tensor  # (B, T) cached surprisal
    lengths: Tensor  # (B,) frame counts (those the filterbank gives for ``samples``)
    targets: Tensor  # (sum of target lengths,) labels 1..41
    target_lengths: Tensor

    @property
    def real_frames(self) -> int:
        return int(self.lengths.sum())

    @property
    def padded_frames(self) -> int:
        return int(self.lengths.numel() * self.lengths.max())

    def to(self, device: str) -> "Batch":
        return Batch(*(None if t is None else t.to(device) for t in self))


def samples_for_frames(frames: Tensor) -> Tensor:
    """Sample counts that the front end (25 ms window, 10 ms hop, every second frame) turns into ``frames``."""
    return 320 * frames + 80


def bucketed_lengths(batch: int, t_min: int, t_max: int, generator: torch.Generator) -> Tensor:
    """The middle batch of ``N_BUCKETS`` batches' worth of lengths, sorted (uniform in [t_min, t_max])."""
    pool = torch.randint(t_min, t_max + 1, (batch * N_BUCKETS,), generator=generator).sort().values
    k = N_BUCKETS // 2
    return pool[k * batch:(k + 1) * batch].flip(0).contiguous()


def make_batch(lengths: Tensor, generator: torch.Generator, waveforms: bool = False) -> Batch:
    batch, T = len(lengths), int(lengths.max())
    mask = lengths_mask(lengths, T).unsqueeze(-1)
    target_lengths = (lengths // 4).clamp(min=1)  # about 12 phones per second at 50 frames per second
    targets = torch.randint(1, NUM_OUTPUTS, (int(target_lengths.sum()),), generator=generator)
    feats = torch.randn(batch, T, 512, generator=generator) * mask
    surprisal = torch.rand(batch, T, generator=generator) * 40 * mask[..., 0]
    samples = samples_for_frames(lengths)
    wavs = None
    if waveforms:
        S = int(samples.max())
        wavs = 0.1 * torch.randn(batch, S, generator=generator) * lengths_mask(samples, S)
    return Batch(wavs, samples, feats, surprisal, lengths, targets, target_lengths)


def make_batches(n: int, batch: int, t_min: int, t_max: int, seed: int = 0, waveforms: bool = False,
                 bucketed: bool = False) -> List[Batch]:
    """``n`` synthetic batches: random lengths (the longest at ``t_max``), or length-bucketed ones."""
    g = torch.Generator().manual_seed(seed + (1 if bucketed else 0))
    out = []
    for _ in range(n):
        lengths = bucketed_lengths(batch, t_min, t_max, g) if bucketed else synthetic_lengths(batch, t_min, t_max, g)
        out.append(make_batch(lengths, g, waveforms))
    return out


# ----------------------------------------------------------------------------------------------
# Models and the step
# ----------------------------------------------------------------------------------------------
class StepModel(NamedTuple):
    config: StepConfig
    encoder: nn.Module
    front_end: Optional[nn.Module]  # filterbank, for features="recompute"
    apc: Optional[nn.Module]  # APC model, for features="recompute"
    optimizer: torch.optim.Optimizer


def build_model(config: StepConfig, seed: int = 0, device: str = "cpu") -> StepModel:
    """Encoder (and front end + APC when recomputed) and Adam, identically initialised for every configuration."""
    from surprisal_cc.model.apc import APCModel
    from surprisal_cc.model.features import FilterbankFrontEnd

    torch.manual_seed(seed)
    encoder = paper_encoder(P_BIG, NUM_OUTPUTS, execution=config.execution)
    if config.rnn != "reversal":
        use_torch_bigrus(encoder, config.rnn)
    front_end = apc = None
    if config.features == "recompute":
        front_end = FilterbankFrontEnd(sample_rate=SAMPLE_RATE, n_mels=80, frame_skip=2)
        apc = APCModel().requires_grad_(False).train()  # frozen, but left in train mode as in the authors' code
    encoder.to(device).train()
    front_end, apc = (None if m is None else m.to(device) for m in (front_end, apc))
    return StepModel(config, encoder, front_end, apc, torch.optim.Adam(encoder.parameters(), lr=3e-4))


def training_step(model: StepModel, batch: Batch) -> float:
    config, encoder, optimizer = model.config, model.encoder, model.optimizer
    optimizer.zero_grad(set_to_none=True)
    lengths = batch.lengths
    precision = (torch.autocast(lengths.device.type, dtype=torch.bfloat16) if config.precision == "bf16"
                 else contextlib.nullcontext())
    with precision:
        if config.features == "recompute":
            with torch.no_grad():
                fbank, lengths = model.front_end(batch.waveforms, batch.samples)
                apc_out = model.apc(fbank, lengths)
            feats, surprisal = apc_out.features, apc_out.surprisal
        else:
            feats, surprisal = batch.feats, batch.surprisal
        out = encoder(feats, lengths, surprisal)
        loss = F.ctc_loss(out.log_probs.float().transpose(0, 1), batch.targets, lengths, batch.target_lengths,
                          blank=0, zero_infinity=True) + out.aux_loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(encoder.parameters(), 5.0)
    optimizer.step()
    return float(loss.detach())


def timed_training_steps(reuse_memory: bool, batch: int, t_min: int, t_max: int, steps: int, seed: int,
                         threads: int) -> Dict[str, Any]:
    """Runs inside a worker subprocess: our training step (fp32, length-bucketed, as the recipes
    train) for one warm-up step and then ``steps`` timed ones, with freed memory kept for reuse or
    glibc's ``malloc`` as it comes. Returns step times, real frames per timed step, CPU time, minor
    page faults per step, peak RSS and the wall-clock window (``time.time()``) of the timed steps."""
    import resource

    from surprisal_cc.training.allocator import reuse_freed_memory

    applied = reuse_freed_memory() if reuse_memory else False
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = build_model(StepConfig(batching="bucketed"), seed=seed)
    data = make_batches(steps + 1, batch, t_min, t_max, seed, bucketed=True)
    training_step(model, data[0])
    before, times, start_wall = resource.getrusage(resource.RUSAGE_SELF), [], time.time()
    for b in data[1:]:
        start = time.perf_counter()
        training_step(model, b)
        times.append(time.perf_counter() - start)
    after, end_wall = resource.getrusage(resource.RUSAGE_SELF), time.time()
    return {"times": times, "real_frames": [b.real_frames for b in data[1:]], "applied": applied,
            "sys_s": (after.ru_stime - before.ru_stime) / steps, "user_s": (after.ru_utime - before.ru_utime) / steps,
            "minflt": (after.ru_minflt - before.ru_minflt) / steps, "maxrss_mib": after.ru_maxrss / 1024,
            "window": [start_wall, end_wall]}


# ----------------------------------------------------------------------------------------------
# The matrix-product floor of a step
# ----------------------------------------------------------------------------------------------
class Product(NamedTuple):
    """``count`` matrix products of shape (m x k) @ (k x n); ``recurrent``: one per time step of a GRU."""
    m: int
    k: int
    n: int
    count: int = 1
    recurrent: bool = False

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n * self.count


def layer_products(module: nn.Module, x: Tensor) -> List[Product]:
    """The matrix products that a Linear, Conv1d or unidirectional GRU layer runs on input ``x``, forward and
    backward: the output's product, the weight gradient, and the input gradient where ``x`` needs one. A GRU's
    recurrent products run once per time step (forward, and the gradient of the previous state); its weight
    gradients are counted as one product over all steps, the cheapest way to compute them."""
    products: List[Product] = []

    def dense(rows: int, fan_in: int, fan_out: int) -> None:
        products.append(Product(rows, fan_in, fan_out))  # output
        products.append(Product(fan_out, rows, fan_in))  # weight gradient
        if x.requires_grad:
            products.append(Product(rows, fan_out, fan_in))  # input gradient

    if isinstance(module, nn.Linear):
        dense(x.numel() // module.in_features, module.in_features, module.out_features)
    elif isinstance(module, nn.Conv1d):
        frames = x.shape[0] * x.shape[-1]
        dense(frames, module.in_channels * module.kernel_size[0] // module.groups, module.out_channels)
    elif isinstance(module, nn.GRU):
        if module.bidirectional or module.num_layers != 1 or not module.batch_first:
            raise ValueError("layer_products counts one-layer, unidirectional, batch_first GRUs")
        batch, steps, hidden = x.shape[0], x.shape[1], module.hidden_size
        dense(batch * steps, module.input_size, 3 * hidden)  # input projections of all steps at once
        products += [Product(batch, hidden, 3 * hidden, steps, True),  # recurrent product, step by step
                     Product(batch, 3 * hidden, hidden, steps, True),  # gradient w.r.t. the previous state
                     Product(3 * hidden, batch * steps, hidden)]  # recurrent weight gradient, all steps
    else:
        raise TypeError(f"layer_products: no count for {type(module).__name__}")
    return products


def step_products(model: StepModel, batch: Batch) -> List[Product]:
    """Every matrix product of one training step of ``model`` on ``batch``, read off forward hooks on its
    Linear, Conv1d and GRU layers during one forward pass (so routed networks count the frames routed to
    them). Products in the APC model and the front end are not counted: ours runs neither."""
    products: List[Product] = []
    hooks = [m.register_forward_hook(lambda m, args, out: products.extend(layer_products(m, args[0])))
             for m in model.encoder.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.GRU))]
    try:
        precision = (torch.autocast(batch.lengths.device.type, dtype=torch.bfloat16)
                     if model.config.precision == "bf16" else contextlib.nullcontext())
        with precision:
            model.encoder(batch.feats, batch.lengths, batch.surprisal)
    finally:
        for hook in hooks:
            hook.remove()
    return products


def time_products(products: List[Product], dtype: torch.dtype, device: str = "cpu",
                  repeats: int = 3) -> Dict[tuple, float]:
    """Seconds per call of each distinct (m, k, n) shape in ``products`` as a plain ``torch.mm`` in ``dtype`` on
    ``device``: the median of ``repeats`` timings after one warm-up (a shape that runs many times is timed
    over up to 50 calls at once)."""
    calls: Dict[tuple, int] = {}
    for p in products:
        calls[(p.m, p.k, p.n)] = calls.get((p.m, p.k, p.n), 0) + p.count
    seconds = {}
    for (m, k, n), count in calls.items():
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        inner = max(1, min(count, 50))
        times = []
        for i in range(repeats + 1):
            synchronize(device)
            start = time.perf_counter()
            for _ in range(inner):
                torch.mm(a, b)
            synchronize(device)
            if i:
                times.append((time.perf_counter() - start) / inner)
        seconds[(m, k, n)] = median(times)
    return seconds


RECURRENT = "GRU recurrent products (one per time step and direction)"
DENSE = "all others (GRU input projections, frame networks, output layer, weight gradients)"


def product_floor(model: StepModel, batches: List[Batch], seed: int, device: str = "cpu") -> Dict[str, object]:
    """Mean per step over ``batches`` (step ``i`` seeded ``seed + i``, as the timed steps are) of the seconds
    and MACs of the step's matrix products (:func:`step_products`, timed by :func:`time_products` in the
    step's precision), split into the GRUs' per-step recurrent products and all others."""
    steps = []
    for i, batch in enumerate(batches):
        torch.manual_seed(seed + i)
        steps.append(step_products(model, batch))
    dtype = torch.bfloat16 if model.config.precision == "bf16" else torch.float32
    per_call = time_products([p for step in steps for p in step], dtype, device)
    by_kind = {RECURRENT: [0.0, 0.0, 0.0], DENSE: [0.0, 0.0, 0.0]}  # calls, MACs, seconds per step
    for step in steps:
        for p in step:
            row = by_kind[RECURRENT if p.recurrent else DENSE]
            row[0] += p.count / len(steps)
            row[1] += p.macs / len(steps)
            row[2] += per_call[(p.m, p.k, p.n)] * p.count / len(steps)
    return dict(seconds=sum(r[2] for r in by_kind.values()), macs=sum(r[1] for r in by_kind.values()),
                by_kind={kind: (round(r[0]), r[1], r[2]) for kind, r in by_kind.items()})


# ----------------------------------------------------------------------------------------------
# Benchmark
# ----------------------------------------------------------------------------------------------
def run(size: str = "full", seed: int = 0, threads: Optional[int] = None, device: str = "cpu") -> BenchResult:
    cfg = SIZES[check_size(size)]
    device = str(resolve_device(device))
    threads = set_threads(threads)
    seed_everything(seed)
    steps, few = repeats_on(device, cfg["steps"]), repeats_on(device, cfg["factor_steps"])
    n = max(steps, few) + cfg["warmup"]
    data = {"random": make_batches(n, cfg["batch"], cfg["t_min"], cfg["t_max"], seed, waveforms=True),
            "bucketed": make_batches(n, cfg["batch"], cfg["t_min"], cfg["t_max"], seed, bucketed=True)}
    data = {kind: [b.to(device) for b in batches] for kind, batches in data.items()}
    specs = configs(device)
    models = {name: build_model(spec, seed=seed, device=device) for name, spec in specs.items()}
    step_index = {"i": 0}
    fns = {name: (lambda m=m: training_step(m, data[m.config.batching][step_index["i"]]))
           for name, m in models.items()}

    def before(name: str, i: int) -> None:
        step_index["i"] = i
        torch.manual_seed(seed + i)  # same routing draws for every configuration at step i

    counts = {name: steps if name in HEADLINE else few for name in specs}
    times = interleaved_times(fns, repeats=counts, warmup=cfg["warmup"], before_each=before, device=device)
    t = {name: median(v) for name, v in times.items()}
    timed = slice(cfg["warmup"], cfg["warmup"] + steps)
    batches = {name: data[s.batching][cfg["warmup"]:cfg["warmup"] + counts[name]] for name, s in specs.items()}
    real = {name: sum(b.real_frames for b in batches[name]) / counts[name] for name in specs}
    padded = {name: sum(b.padded_frames for b in batches[name]) / counts[name] for name in specs}
    fps = {name: real[name] / t[name] for name in specs}
    # the others against ours fp32 and the authors' step over the same (first) rounds
    t_ours_few = median(times[OURS][:few])
    fps_authors_few = sum(b.real_frames for b in batches[AUTHORS][:few]) / few / median(times[AUTHORS][:few])

    best = best_precision(device)
    res = BenchResult("training", params=dict(size=size, batch=cfg["batch"], frames=f"{cfg['t_min']}-{cfg['t_max']}",
                                              timed_steps=steps, timed_steps_factors=few, warmup=cfg["warmup"],
                                              p_big=P_BIG,
                                              device=device, threads=threads, seed=seed,
                                              bf16_native=bf16_supported(device), best_precision=best))
    no_bf16 = f"skipped: this {'GPU' if device.startswith('cuda') else 'CPU'} has no native bf16"

    def fps_note(name: str, baseline: str = AUTHORS) -> str:
        return (f"{fps[name]:,.0f} vs {fps[baseline]:,.0f} real frames/s; s/step min–max {spread(times[name])} vs "
                f"{spread(times[baseline])}")

    shape = f"batch {cfg['batch']} x {cfg['t_min']}-{cfg['t_max']} frames"
    best_name = OURS_BF16 if best == "bf16" else OURS
    speedup = t[AUTHORS] / t[best_name]
    res.summary.append(SummaryRow(f"training step, {shape}: ours ({best}) vs the authors' step (fbank + APC every "
                                  f"step, masked, unpacked nn.GRU)", t[best_name], t[AUTHORS], "s/step", speedup,
                                  "baseline/ours", f">= {GOAL:g}x", speedup >= GOAL, note=fps_note(best_name)))
    native = bf16_supported(device)
    if native:  # ours in the other precision, and both steps in bf16, as information
        other = OURS if best == "bf16" else OURS_BF16
        res.summary.append(SummaryRow(f"training step: ours {'fp32' if other == OURS else 'bf16'} vs the authors' "
                                      "step", t[other], t[AUTHORS], "s/step", t[AUTHORS] / t[other], "baseline/ours",
                                      "info", None, note=fps_note(other)))
        res.summary.append(SummaryRow("training step, both in bf16 autocast: ours vs the authors' step",
                                      t[OURS_BF16], t[AUTHORS_BF16], "s/step", t[AUTHORS_BF16] / t[OURS_BF16],
                                      "baseline/ours", "info", None,
                                      note=fps_note(OURS_BF16, AUTHORS_BF16)))
    else:
        res.summary.append(SummaryRow("training step: ours bf16 autocast vs the authors' step", None, None, "s/step",
                                      None, "-", "info", None, note=no_bf16))
    res.summary.append(SummaryRow(f"training throughput: ours ({best}), length-bucketed batches vs the authors' step "
                                  f"(random batches)", fps[OURS_BUCKETED], fps[AUTHORS], "real frames/s",
                                  fps[OURS_BUCKETED] / fps[AUTHORS], "ours/baseline", "info", None,
                                  note=f"padding {1 - real[OURS_BUCKETED] / padded[OURS_BUCKETED]:.0%} vs "
                                       f"{1 - real[AUTHORS] / padded[AUTHORS]:.0%}"))
    for factor, config in [*FACTORS.items(), (PACKED_FACTOR, PACKED)]:
        res.summary.append(SummaryRow(f"training factor: {factor}", t_ours_few, t[config], "s/step",
                                      t[config] / t_ours_few, "baseline/ours", "info", None,
                                      note=f"median of {few} steps each, the same rounds"))
    floor = product_floor(models[OURS_BUCKETED], data["bucketed"][timed], seed + cfg["warmup"], device)
    floor_s = floor["seconds"]
    floor_fps = real[OURS_BUCKETED] / floor_s
    res.summary.append(SummaryRow(f"training step floor: ours ({best}), length-bucketed, if only its matrix products "
                                  f"ran (each shape timed alone as torch.mm), vs the step as it runs", floor_s,
                                  t[OURS_BUCKETED], "s/step", floor_s / t[OURS_BUCKETED], "floor/ours", "info", None,
                                  note=f"{floor['macs'] / 1e9:,.1f} GMAC per step, "
                                       f"{floor['macs'] / floor_s / 1e9:,.0f} GMAC/s"))
    ceiling = floor_fps / fps[AUTHORS]
    res.summary.append(SummaryRow("training speed-up ceiling of this arithmetic: the floor vs the authors' step",
                                  floor_fps, fps[AUTHORS], "real frames/s", ceiling, "ours/baseline", "info", None,
                                  note=(f"the goal (>= {GOAL:g}x) is within reach: the rest is work outside the "
                                        f"products" if ceiling >= GOAL else f"the goal (>= {GOAL:g}x) is out of reach "
                                        f"of any step that runs these products at this machine's speed")))

    rows = []
    for name, spec in specs.items():
        headline = name in HEADLINE
        rows.append([name, spec.precision, spec.batching, t[name], min(times[name]), max(times[name]), counts[name],
                     real[name], f"{1 - real[name] / padded[name]:.0%}", fps[name],
                     fps[name] / (fps[AUTHORS] if headline else fps_authors_few),
                     t[name] / (t[OURS] if headline else t_ours_few)])
    if not native:
        rows.insert(1, [OURS_BF16, "bf16", "random", no_bf16] + [None] * 8)
        rows.append([AUTHORS_BF16, "bf16", "random", no_bf16] + [None] * 8)
    res.add_detail(f"Time per training step (median of interleaved steps after {cfg['warmup']} warm-up); speed = real "
                   f"frames/s relative to the authors' step (configurations timed fewer times: over the same rounds)",
                   ["configuration", "precision", "batches", "s/step (median)", "min", "max", "timed steps",
                    "real frames/step", "padding", "real frames/s", "speed vs authors' step", "time / ours fp32"],
                   rows)
    res.add_detail(f"Matrix products of ours ({best}), length-bucketed, per step (forward and backward), each shape "
                   f"timed alone as torch.mm", ["products", "calls", "GMAC", "seconds", "GMAC/s", "share of the floor"],
                   [[kind, calls, macs / 1e9, sec, macs / sec / 1e9 if sec else None, sec / floor_s]
                    for kind, (calls, macs, sec) in floor["by_kind"].items()])
    product = 1.0
    for config in FACTORS.values():
        product *= t[config] / t_ours_few
    res.add_detail(f"Contribution of each factor (slow-down of ours fp32 when only that choice is the authors'; "
                   f"medians of the first {few} timed rounds)", ["factor", "slow-down vs ours fp32"],
                   [[f, t[c] / t_ours_few] for f, c in FACTORS.items()]
                   + [["product of the three factors", product],
                      ["authors' step (all three)", median(times[AUTHORS][:few]) / t_ours_few],
                      [PACKED_FACTOR, t[PACKED] / t_ours_few]])
    return res


def main(argv=None) -> int:
    return size_cli(run, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
