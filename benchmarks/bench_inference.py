"""Inference wall clock: routed vs big-only vs masked, the ratio predicted from component times, and the RTF.

Encoder part. Eval mode, ``torch.no_grad()``, one padded batch of utterances (Mini-LibriSpeech
shapes). The controller is a random one with p_big = 0.65 (the calibrated mean; routing cost
depends only on the fraction of big frames). Timed interleaved (A B C ... A B C ...) after a
warm-up round, median of the repeats, all in one process:

* routed   : the project's encoder, small/big networks on their own frames only;
* big-only : the same weights, every frame to the big network;
* masked   : both networks on every frame (the paper's code), p_big = 0.65;
* APC      : the frozen APC forward pass alone (added to both sides for the "with APC" ratios);
* the components alone on the batch's real frames: pre-net, post-net, big network on every real
  frame, small network on every real frame (the frames gathered once, before timing).

The predicted routed / big-only ratio, if routing itself cost nothing, is
``(pre + post + p * big + (1 - p) * small) / (pre + post + big)`` with p the fraction of real frames
that the routed calls sent to the big network. Target: |measured - predicted| <= 0.01. The FLOP
ratio (from the ``frame_macs`` the encoder returned in the timed calls) is reported next to it: it
assumes every MAC costs the same time, which the BiGRUs do not. An info row repeats the comparison
with each configuration's fastest repeat, which other jobs on a shared machine disturb least.

Transcribe part. The real-time factor of the whole ``ConditionalASR.transcribe_batch`` path on one
synthetic 16 kHz utterance of typical LibriSpeech length (12 s): filterbank, APC (APC features),
encoder (random controller, p_big 0.65), CTC beam search. RTF = compute time / audio duration, in
fp32 and, where the CPU has native bf16, bf16 autocast. A staged copy of the same path, timed
interleaved with it, gives each stage's share. The model is untrained, so its posteriors are
flat: the beam search's worst case.

Threads part. The real-time factor of ``transcribe_batch`` at batch 1 (the same utterance and
model, sampled routing) with torch's default threads (one per core) and with one thread (the
default of ``surprisal-cc transcribe``/``evaluate``), on the machine as it is ("idle") and with a
process spinning on one more core ("busy"): the four configurations timed in turn in each repeat,
the spinning process started for the busy half of each repeat and stopped after it. The ratios
busy / idle of each thread setting and default / one thread when busy come from the same run.

Usage: ``python -m benchmarks.bench_inference [--quick|--smoke] [--json] [--threads N]``
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

import torch

from benchmarks.common import (
    BenchResult,
    SummaryRow,
    bf16_supported,
    check_size,
    interleaved_times,
    lengths_mask,
    median,
    paper_encoder,
    seed_everything,
    set_threads,
    size_cli,
    synthetic_lengths,
)

P_BIG = 0.65
NUM_OUTPUTS = 42
TOLERANCE = 0.01  # |measured - predicted| routed / big-only time ratio
SAMPLE_RATE = 16000
ENCODER_PARTS = ("pre_net", "small_net", "big_net", "post_net")
COMPONENTS = ("pre-net", "post-net", "big net, all real frames", "small net, all real frames")
STAGES = ("fbank", "APC", "encoder", "beam search")
SIZES = {
    "full": dict(batch=32, t_min=300, t_max=800, repeats=7, warmup=1, audio_s=12.0, rtf_repeats=7),
    "quick": dict(batch=8, t_min=100, t_max=200, repeats=5, warmup=1, audio_s=12.0, rtf_repeats=3),
    "smoke": dict(batch=2, t_min=4, t_max=8, repeats=1, warmup=0, audio_s=0.5, rtf_repeats=1),
}


def predicted_ratio(pre: float, post: float, big: float, small: float, p: float) -> float:
    """routed / big-only time if routing itself cost nothing: each frame pays for the network it ran."""
    return (pre + post + p * big + (1.0 - p) * small) / (pre + post + big)


def run(size: str = "full", seed: int = 0, threads: Optional[int] = None, p_big: float = P_BIG) -> BenchResult:
    cfg = SIZES[check_size(size)]
    threads = set_threads(threads)
    seed_everything(seed)
    res = BenchResult("inference", params=dict(size=size, batch=cfg["batch"], frames=f"{cfg['t_min']}-{cfg['t_max']}",
                                               p_big=p_big, repeats=cfg["repeats"], warmup=cfg["warmup"],
                                               audio_s=cfg["audio_s"], rtf_repeats=cfg["rtf_repeats"],
                                               threads=threads, seed=seed))
    encoder_part(res, cfg, seed, p_big)
    transcribe_part(res, cfg, seed, p_big)
    threads_part(res, cfg, seed, p_big)
    return res


def encoder_part(res: BenchResult, cfg: Dict, seed: int, p_big: float) -> None:
    from surprisal_cc.model.apc import APCModel, FrozenAPC
    from surprisal_cc.model.controllers import ConstantController
    from surprisal_cc.model.flops import module_macs

    g = torch.Generator().manual_seed(seed)
    lengths = synthetic_lengths(cfg["batch"], cfg["t_min"], cfg["t_max"], g)
    T = int(lengths.max())
    mask = lengths_mask(lengths, T)
    feats = torch.randn(cfg["batch"], T, 512, generator=g) * mask.unsqueeze(-1)
    fbank = torch.randn(cfg["batch"], T, 80, generator=g) * mask.unsqueeze(-1)
    real_frames = int(lengths.sum())
    res.params["real_frames"] = real_frames

    routed = paper_encoder(p_big, NUM_OUTPUTS).eval()
    big_only = copy.deepcopy(routed)
    big_only.controller = ConstantController(1.0)
    masked = copy.deepcopy(routed)
    masked.execution = "masked"
    apc = FrozenAPC(APCModel())
    encoders = {"routed": routed, "big-only": big_only, "masked": masked}
    macs: Dict[str, List[float]] = {name: [] for name in encoders}
    big_fractions: List[float] = []

    # the components' inputs, made once and untimed: real rows of the pre-net output, a post-net input
    with torch.no_grad():
        pre_out = routed.pre_net(feats, lengths)
        rows = pre_out[mask]
        post_in = torch.randn(pre_out.shape, generator=g) * mask.unsqueeze(-1)

    def call(name):
        with torch.no_grad():
            out = encoders[name](feats, lengths)
        macs[name].append(sum(float(out.frame_macs[p].sum()) for p in ENCODER_PARTS))
        if name == "routed":
            big_fractions.append(float((out.stats["use_big"] & mask).sum()) / real_frames)

    def component(fn):
        def timed():
            with torch.no_grad():
                fn()
        return timed

    fns = {name: (lambda n=name: call(n)) for name in encoders}
    fns["APC"] = component(lambda: apc(fbank, lengths))
    fns["pre-net"] = component(lambda: routed.pre_net(feats, lengths))
    fns["post-net"] = component(lambda: routed.post_net(post_in, lengths))
    fns["big net, all real frames"] = component(lambda: routed.big_net(rows))
    fns["small net, all real frames"] = component(lambda: routed.small_net(rows))
    times = interleaved_times(fns, repeats=cfg["repeats"], warmup=cfg["warmup"],
                              before_each=lambda name, i: torch.manual_seed(seed + i))
    t = {name: median(v) for name, v in times.items()}
    m = {name: sum(v) / len(v) for name, v in macs.items()}
    apc_macs = module_macs(apc.apc) * real_frames
    p = sum(big_fractions) / len(big_fractions)

    time_ratio, flop_ratio = t["routed"] / t["big-only"], m["routed"] / m["big-only"]
    pre, post, big, small = (t[c] for c in COMPONENTS)
    predicted = predicted_ratio(pre, post, big, small, p)
    diff = time_ratio - predicted
    fastest = {name: min(v) for name, v in times.items()}
    min_ratio = fastest["routed"] / fastest["big-only"]
    predicted_min = predicted_ratio(*(fastest[c] for c in COMPONENTS), p)
    time_ratio_apc = (t["APC"] + t["routed"]) / (t["APC"] + t["big-only"])
    flop_ratio_apc = (apc_macs + m["routed"]) / (apc_macs + m["big-only"])
    predicted_apc = (t["APC"] + pre + post + p * big + (1 - p) * small) / (t["APC"] + pre + post + big)

    res.summary.append(SummaryRow(
        "inference: routed vs big-only (encoder), time ratio vs the ratio predicted from component times",
        t["routed"], t["big-only"], "s/batch", time_ratio, "ours/baseline",
        f"abs(ratio - predicted {predicted:.3f}) <= {TOLERANCE}", abs(diff) <= TOLERANCE,
        note=f"diff {diff:+.3f}; FLOP ratio {flop_ratio:.3f}; big fraction {p:.3f}"))
    res.summary.append(SummaryRow("inference: routed vs big-only, APC included", t["routed"] + t["APC"],
                                  t["big-only"] + t["APC"], "s/batch", time_ratio_apc, "ours/baseline",
                                  f"info (predicted {predicted_apc:.3f}, FLOP ratio {flop_ratio_apc:.3f})", None))
    res.summary.append(SummaryRow("inference: routed vs masked (paper)", t["routed"], t["masked"], "s/batch",
                                  t["masked"] / t["routed"], "baseline/ours", "info", None))

    rows_out = []
    for name in ("routed", "big-only", "masked", "APC"):
        flops = apc_macs if name == "APC" else m[name]
        rows_out.append([name, t[name], min(times[name]), max(times[name]), 1000 * t[name] / cfg["batch"],
                         t[name] / t["big-only"], flops / real_frames / 1e6, flops / m["big-only"]])
    res.add_detail(f"Inference, batch of {cfg['batch']} utterances, {real_frames} real frames "
                   f"(median of {cfg['repeats']} interleaved repeats)",
                   ["configuration", "s/batch", "min", "max", "ms/utt", "time / big-only", "MMACs/frame",
                    "MACs / big-only"], rows_out)
    component_macs = {"pre-net": module_macs(routed.pre_net), "post-net": module_macs(routed.post_net),
                      "big net, all real frames": module_macs(routed.big_net),
                      "small net, all real frames": module_macs(routed.small_net)}
    res.add_detail(f"Components alone on the same {real_frames} real frames (same run, interleaved)",
                   ["component", "s", "min", "max", "time / (pre + post + big)", "MACs / (pre + post + big)"],
                   [[c, t[c], min(times[c]), max(times[c]), t[c] / (pre + post + big),
                     component_macs[c] / sum(component_macs[k] for k in COMPONENTS[:3])] for c in COMPONENTS])
    res.add_detail("Routed / big-only: measured vs predicted from component times vs FLOPs",
                   ["scope", "measured time ratio", "predicted time ratio", "measured - predicted", "FLOP ratio",
                    "target"],
                   [["encoder (pre + small/big + post)", time_ratio, predicted, diff, flop_ratio,
                     f"abs(measured - predicted) <= {TOLERANCE}"],
                    ["encoder, from each configuration's minimum (least disturbed by other jobs)", min_ratio,
                     predicted_min, min_ratio - predicted_min, flop_ratio, "info"],
                    ["APC + encoder", time_ratio_apc, predicted_apc, time_ratio_apc - predicted_apc, flop_ratio_apc,
                     "info"],
                    ["fraction of real frames on the big network (p)", p, p_big, p - p_big, "-", "info"]])


def _staged(asr, wav, samples, stage_times: Dict[str, List[float]]) -> None:
    """The steps of ``surprisal_cc.inference.passes.decode_batch``, each timed: filterbank, APC, encoder, beam search."""
    from surprisal_cc.inference.passes import autocast
    from surprisal_cc.model.forward import CachedInputs, run_model

    clock = time.perf_counter
    with torch.no_grad():
        t0 = clock()
        fbank, frames = asr.front_end(wav, samples)
        t1 = clock()
        cached = None
        with autocast(asr):
            if asr.uses_apc:  # timed apart, then handed to the shared forward pass as its APC outputs
                apc_out = asr.apc(fbank, frames)
                cached = CachedInputs(fbank, apc_out.features, apc_out.surprisal.float())
            t2 = clock()
            out = run_model(asr.encoder, fbank, frames, apc=asr.apc, use_apc_features=asr.use_apc_features,
                         cached=cached).output
        log_probs = out.log_probs.float()
        t3 = clock()
        asr.beam_search(log_probs, out.lengths)
        t4 = clock()
    for stage, dt in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
        stage_times[stage].append(dt)


def _sampled_model(seed: int, p_big: float):
    """The untrained model of the transcribe parts: APC features, random controller, sampled routing
    (p_big of the frames on the big network), on the threads the caller sets."""
    from surprisal_cc.inference import ConditionalASR
    from surprisal_cc.training.labels import phone_set

    torch.manual_seed(seed)
    asr = ConditionalASR.untrained(phone_set("librispeech"), controller="random", input_features="apc",
                                   controller_options={"p_big": p_big})
    asr.set_routing("sampled", seed)
    asr.threads = None
    return asr


def _utterance(cfg: Dict, seed: int):
    """(1, S) synthetic 16 kHz audio of ``cfg["audio_s"]`` seconds, its sample count and duration."""
    g = torch.Generator().manual_seed(seed + 1)
    num_samples = int(cfg["audio_s"] * SAMPLE_RATE)
    wav = (0.1 * torch.randn(1, num_samples, generator=g)).clamp(-1.0, 1.0)
    return wav, torch.tensor([num_samples]), num_samples / SAMPLE_RATE


def transcribe_part(res: BenchResult, cfg: Dict, seed: int, p_big: float) -> None:
    from surprisal_cc.inference import ConditionalASR

    wav, samples, duration = _utterance(cfg, seed)
    fp32 = _sampled_model(seed, p_big)
    models = {"fp32": fp32}
    if bf16_supported():
        models["bf16"] = ConditionalASR(fp32.config, fp32.encoder, fp32.apc.apc if fp32.apc is not None else None,
                                        precision="bf16", routing="sampled", seed=seed, threads=None)
    stage_times = {prec: {s: [] for s in STAGES} for prec in models}
    frames: Dict[str, int] = {}

    def whole(prec):
        frames[prec] = models[prec].transcribe_batch(wav, num_samples=samples)[0].num_frames

    fns = {}
    for prec in models:
        fns[f"{prec} transcribe"] = lambda p=prec: whole(p)
        fns[f"{prec} stages"] = lambda p=prec: _staged(models[p], wav, samples, stage_times[p])
    times = interleaved_times(fns, repeats=cfg["rtf_repeats"], warmup=1,
                              before_each=lambda name, i: torch.manual_seed(seed + i))
    warm = 1  # the staged calls of the warm-up round are in stage_times too
    rows = []
    for prec in ("fp32", "bf16"):
        name = f"transcribe one {cfg['audio_s']:g} s utterance (fbank + APC + encoder + beam search), {prec}: RTF"
        if prec not in models:
            res.summary.append(SummaryRow(name, None, None, "s", None, "-", "info", None,
                                          note="skipped: this CPU has no native bf16"))
            rows.append([prec, duration, "-", "skipped: no native bf16", "-", "-", "-", "-", "-", "-"])
            continue
        compute = median(times[f"{prec} transcribe"])
        stage = {s: median(v[warm:]) for s, v in stage_times[prec].items()}
        total = sum(stage.values())
        shares = {s: stage[s] / total for s in STAGES}
        rtf = compute / duration
        res.summary.append(SummaryRow(name, compute, duration, "s", rtf, "compute/audio", "info", None,
                                      note=", ".join(f"{s} {100 * shares[s]:.0f} %" for s in STAGES)))
        rows.append([prec, duration, frames[prec], compute, rtf, *(100 * shares[s] for s in STAGES),
                     total / compute])
    res.add_detail(f"Real-time factor of ConditionalASR.transcribe_batch, one synthetic {cfg['audio_s']:g} s "
                   f"16 kHz utterance, untrained model, random controller p_big {p_big} "
                   f"(median of {cfg['rtf_repeats']} interleaved repeats)",
                   ["precision", "audio s", "frames", "compute s", "RTF", "fbank %", "APC %", "encoder %",
                    "beam search %", "stages / whole"], rows)


def _spinning_process() -> subprocess.Popen:
    """A process keeping one core busy until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def threads_part(res: BenchResult, cfg: Dict, seed: int, p_big: float) -> None:
    from surprisal_cc.runtime import decoding_threads

    asr = _sampled_model(seed, p_big)
    wav, samples, duration = _utterance(cfg, seed)
    cores = os.cpu_count() or 1
    settings = {f"torch default ({cores} threads)": cores, "--threads 1": 1}
    times: Dict[tuple, List[float]] = {(load, name): [] for load in ("idle", "busy") for name in settings}
    for repeat in range(1 + cfg["rtf_repeats"]):  # the first round warms up
        for load in ("idle", "busy"):
            spinner = _spinning_process() if load == "busy" else None
            try:
                for name, threads in settings.items():
                    with decoding_threads(threads):
                        start = time.perf_counter()
                        asr.transcribe_batch(wav, num_samples=samples)
                        elapsed = time.perf_counter() - start
                    if repeat:
                        times[(load, name)].append(elapsed)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    rtf = {key: median(v) / duration for key, v in times.items()}
    default, one = settings
    for name in settings:
        res.summary.append(SummaryRow(f"threads, transcribe at batch 1, {name}: real-time factor with one more "
                                      "core busy vs idle",
                                      rtf[("busy", name)], rtf[("idle", name)], "RTF", rtf[("busy", name)] /
                                      rtf[("idle", name)], "busy/idle", "info", None))
    res.summary.append(SummaryRow("threads, transcribe at batch 1, one more core busy: torch default vs --threads 1",
                                  rtf[("busy", one)], rtf[("busy", default)], "RTF",
                                  rtf[("busy", default)] / rtf[("busy", one)], "baseline/ours", "info", None))
    res.add_detail(f"Real-time factor of transcribe_batch at batch 1, one synthetic {cfg['audio_s']:g} s utterance, "
                   f"{cores} cores (median of {cfg['rtf_repeats']} repeats, the four timed in turn)",
                   ["threads", "RTF idle", "RTF busy", "busy / idle"],
                   [[name, rtf[("idle", name)], rtf[("busy", name)], rtf[("busy", name)] / rtf[("idle", name)]]
                    for name in settings])


def main(argv=None) -> int:
    return size_cli(run, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
