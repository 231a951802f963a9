"""Score a model on a labelled corpus: corpus-level PER with S/D/I, FLOPs per frame counted from what
ran, routing statistics and the real-time factor (``surprisal-cc evaluate``,
:meth:`surprisal_cc.inference.ConditionalASR.evaluate`).

The labels are prepared as training prepared them (:mod:`surprisal_cc.corpora`), decoding is the
model's (the recipes' beam search) and scoring is the recipes' (:class:`surprisal_cc.metrics.ErrorRate`,
repeated ``sil`` merged).

Example
-------
>>> import tempfile, soundfile, torch
>>> from pathlib import Path
>>> from surprisal_cc.inference import ConditionalASR
>>> from surprisal_cc.recipe import phone_set
>>> asr = ConditionalASR.untrained(phone_set("librispeech"), controller="big_only")
>>> with tempfile.TemporaryDirectory() as tmp:
...     rows = ["ID,wav,phn"]
...     for i in range(2):
...         soundfile.write(f"{tmp}/u{i}.wav", (torch.rand(8000) - 0.5).numpy() * 0.1, 16000)
...         rows.append(f"u{i},u{i}.wav,sil AH B sil")
...     _ = Path(tmp, "utts.csv").write_text("\\n".join(rows) + "\\n")
...     scores = evaluate_corpus(asr, Path(tmp, "utts.csv"))
>>> scores["num_utterances"], scores["num_ref_tokens"], scores["big_fraction"]
(2, 8, 1.0)
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, TextIO, Tuple, Union

import torch
from torch import Tensor

from .arguments import check_writable
from .corpora import Item, corpus_items, pronunciation_references
from .data.audio import MAX_LISTED, check_audio_many, read_audio, warn_converted
from .data.errors import BadAudioError, DataPreparationError, DataPreparationWarning
from .errors import ConfigurationError
from .flops import MacMeter, RoutingStats
from .metrics import ErrorRate, closest_path
from .nnet import EncoderOutput, lengths_to_mask

PathLike = Union[str, os.PathLike]

__all__ = ["evaluate_corpus"]


def evaluate_corpus(asr, data: PathLike, mfa_labels: Optional[PathLike] = None, skip_bad: bool = False,
                    batch_size: Optional[int] = None, seed: Optional[int] = None, g2p: Optional[str] = None,
                    timit_split: str = "test", progress: bool = False,
                    any_pronunciation: bool = False, flops_fraction: Optional[float] = None,
                    per_utterance: Optional[Callable[[Dict[str, Any]], None]] = None,
                    alignments: Union[PathLike, TextIO, None] = None) -> Dict[str, Any]:
    """Corpus-level PER, S/D/I, FLOPs per frame, p_big and RTF on a labelled corpus.

    Arguments
    ---------
    asr : ConditionalASR
        The model (:class:`surprisal_cc.inference.ConditionalASR`) with its routing, bias shift and threads.
    data : str or path
        A LibriSpeech-format folder (``speaker/chapter/*.flac`` + ``*.trans.txt``; labels from
        CMUdict with the model's training G2P policy, or MFA labels from ``mfa_labels``), a
        TIMIT folder (``timit_split``: the core ``test`` set, the ``valid`` speakers or ``train``),
        a Kaldi data folder (``wav.scp`` and ``text``, labelled by the lexicon:
        :mod:`surprisal_cc.data.kaldi`) or a manifest CSV as the recipes write (``ID``, ``wav``,
        ``phn`` columns, or ``wrd``).
    mfa_labels : str or path, optional
        MFA export CSV with the labels of a LibriSpeech-format folder.
    skip_bad : bool
        Score the usable utterances when some are not (unusable audio, a missing or empty
        transcript, no MFA labels; they are listed in ``skipped``); otherwise
        :class:`BadAudioError` lists the bad audio files, and a :class:`DataPreparationError`
        the transcript problems.
    batch_size : int, optional
        Utterances per forward pass (default: the run's batch size). With deterministic
        routing the phones do not depend on it.
    seed : int, optional
        Seed of sampled routing for this call (default: the model's ``seed``); the global RNG
        is restored after. Sampled routing only.
    g2p : str, optional
        G2P policy for out-of-vocabulary words (default: the model's training policy).
    timit_split : str
        ``"test"``, ``"valid"`` or ``"train"`` (TIMIT folders only).
    progress : bool
        Show a progress bar.
    any_pronunciation : bool
        Also score each hypothesis against the reference as the words would read with any
        of their CMUdict pronunciations (or, with MFA labels, the labelled one), the one
        fewest edits away (:func:`~surprisal_cc.corpora.pronunciation_references`): how much of the PER is the
        choice of pronunciations. LibriSpeech folders and manifests with a ``wrd`` column.
    flops_fraction : float, optional
        Decode at the bias shift that spends this fraction of the big-only MACs per frame over
        the corpus's audio (:meth:`~surprisal_cc.inference.ConditionalASR.meet_flops_budget`; its surprisal, not its labels).
    per_utterance : callable, optional
        Called with each utterance's result as its batch finishes: ``id``, ``reference``,
        ``hypothesis`` (phones, as scored), ``substitutions``, ``deletions``, ``insertions``,
        ``num_ref_tokens``, ``num_frames``, ``flops_per_frame``, ``p_big_mean`` and
        ``big_fraction`` (small/big routing) or ``mean_steps`` (ACT, PonderNet).
    alignments : str, path or text stream, optional
        Also write every utterance's alignment of hypothesis and reference to this file (or open
        stream, such as ``sys.stdout``), in SpeechBrain's format (as the recipes write
        ``test_alignments.txt``).

    Returns
    -------
    dict
        ``per``, ``substitutions``, ``deletions``, ``insertions``, ``num_ref_tokens``,
        ``num_utterances``, ``flops_per_frame``, ``flops_components``, ``p_big_mean``,
        ``p_big_var`` and ``big_fraction`` (small/big routing), ``mean_steps`` (ACT, PonderNet), ``rtf``,
        ``compute_s``, ``audio_s`` and what was evaluated (``data``, ``labels``, ``skipped``,
        ``model``, ``device``, ``precision``, ``threads``, ``routing``, ``seed``, ``batch_size``,
        ``beam_size``); with ``any_pronunciation``,
        ``any_pronunciation``: ``per``, ``substitutions``, ``deletions``, ``insertions``,
        ``num_ref_tokens`` against those references and ``fixed`` (utterances whose labels
        are not their words' phones, scored against their labels as they are); with
        ``flops_fraction``, ``budget`` (:meth:`~surprisal_cc.inference.ConditionalASR.meet_flops_budget`).

    Raises
    ------
    BadAudioError
        When some audio files are unusable and ``skip_bad`` is False.
    DataPreparationError
        When the corpus, its labels or its audio cannot be used.
    """
    seed = _routing_seed(asr, seed)
    if alignments is not None and not hasattr(alignments, "write"):
        check_writable("alignments file", alignments)
    items, label_source, words, label_problems = _labelled_items(asr, data, mfa_labels, g2p, timit_split, skip_bad)
    items, infos, problems = _usable_audio(data, items, skip_bad)
    graphs = pronunciation_references(data, items, words, mfa_labels, g2p or asr.config.get(
        "label_policy", {}).get("g2p") or "spn") if any_pronunciation else None
    warn_converted(infos, asr.feature_config.sample_rate)  # called here: its warning names our caller
    batch_size = int(batch_size or asr.config.get("batch_size", 8))
    budget = asr.meet_flops_budget([wav for _, wav, _ in items], flops_fraction, batch_size) \
        if flops_fraction is not None else None
    tally = _decode_corpus(asr, items, batch_size, seed, graphs, per_utterance, progress)
    if alignments is not None:
        tally.errors.write_alignments(alignments)
    result = _scores(tally, items, graphs)
    result.update({"rtf": tally.seconds / max(tally.audio_s, 1e-9), "compute_s": tally.seconds,
                   "audio_s": tally.audio_s, "data": str(data), "labels": label_source,
                   "skipped": label_problems + problems, **_what_ran(asr, seed, batch_size)})
    if budget is not None:
        result["budget"] = budget
    return result


def _routing_seed(asr, seed: Optional[int]) -> Optional[int]:
    """The routing seed of this evaluation: ``seed``, else the model's (:class:`ConfigurationError` for
    a seed with deterministic routing)."""
    if seed is not None and asr.routing != "sampled":
        raise ConfigurationError("seed seeds sampled routing, and this model routes deterministically: "
                                 "set_routing('sampled', seed) (--sampled --seed N)")
    return asr.seed if seed is None else int(seed)


def _labelled_items(asr, data: PathLike, mfa_labels: Optional[PathLike], g2p: Optional[str], timit_split: str,
                    skip_bad: bool) -> Tuple[List[Item], str, Dict[str, List[str]], List[str]]:
    """The corpus's ``(id, wav, reference phones)``, where its labels came from, each utterance's words
    and the utterances left out for want of labels (``skip_bad``: with a warning)."""
    label_problems: List[str] = []
    words: Dict[str, List[str]] = {}
    items, label_source = corpus_items(data, asr, mfa_labels=mfa_labels, g2p=g2p, timit_split=timit_split,
                                       problems=label_problems if skip_bad else None, words=words)
    if label_problems:
        warnings.warn(f"skipping {len(label_problems)} utterance(s) without usable labels:\n  "
                      + "\n  ".join(label_problems[:MAX_LISTED]), DataPreparationWarning, stacklevel=3)
    return items, label_source, words, label_problems


def _usable_audio(data: PathLike, items: List[Item], skip_bad: bool) -> Tuple[List[Item], Dict[str, Any], List[str]]:
    """The items whose audio is usable, its audio infos and the unusable files (``skip_bad``: with a
    warning; otherwise :class:`BadAudioError`)."""
    infos, problems = check_audio_many([wav for _, wav, _ in items])
    if problems and not skip_bad:
        raise BadAudioError(problems, len(items), f"{len(problems)} of {len(items)} audio files are unusable; "
                                                 "pass --skip-bad (skip_bad=True) to score the others")
    if problems:
        warnings.warn(f"skipping {len(problems)} unusable audio file(s):\n  " + "\n  ".join(problems),
                      DataPreparationWarning, stacklevel=3)
    items = [item for item in items if str(item[1]) in infos]
    if not items:
        raise DataPreparationError(f"{data}: no usable utterance to score")
    return items, infos, problems


@dataclass
class _Tally:
    """What decoding a corpus adds up: edits against the labels and against the closest pronunciations
    (``any_pronunciation``), MACs, routing, compute and audio seconds."""
    errors: ErrorRate
    closest: ErrorRate
    meter: MacMeter = field(default_factory=MacMeter)
    routing: RoutingStats = field(default_factory=RoutingStats)
    seconds: float = 0.0
    audio_s: float = 0.0


def _decode_corpus(asr, items: List[Item], batch_size: int, seed: Optional[int], graphs: Optional[Dict[str, Any]],
                   per_utterance: Optional[Callable[[Dict[str, Any]], None]], progress: bool) -> _Tally:
    """Decode and score ``items`` in batches of ``batch_size``, routing seeded with ``seed``."""
    merge_sil = bool(asr.config.get("merge_sil", True))
    tally = _Tally(errors=ErrorRate(merge_sil=merge_sil), closest=ErrorRate(merge_sil=merge_sil))
    starts = range(0, len(items), batch_size)
    if progress:
        from tqdm import tqdm

        starts = tqdm(starts, desc="evaluate", unit="batch")
    with asr.seeded_routing(seed):
        for start in starts:
            _decode_batch(asr, items[start:start + batch_size], tally, graphs, per_utterance)
    return tally


def _decode_batch(asr, chunk: List[Item], tally: _Tally, graphs: Optional[Dict[str, Any]],
                  per_utterance: Optional[Callable[[Dict[str, Any]], None]]) -> None:
    """Decode one batch of items, add its edits, MACs, routing and time to ``tally`` and report its utterances."""
    signals = [read_audio(wav, asr.feature_config.sample_rate) for _, wav, _ in chunk]
    samples = torch.tensor([s.numel() for s in signals])
    wavs = torch.nn.utils.rnn.pad_sequence(signals, batch_first=True)
    out, hyps, _, frames, surprisal, elapsed = asr.run_batch(wavs, samples)
    phones = [asr.phones_of(h) for h in hyps]
    tally.seconds += elapsed
    tally.audio_s += float(samples.sum()) / asr.feature_config.sample_rate
    tally.errors.append([u for u, _, _ in chunk], phones, [ref for _, _, ref in chunk])
    if per_utterance is not None:
        for b, (row, n) in enumerate(zip(tally.errors.last(len(chunk)), frames.tolist())):
            per_utterance(_utterance_report(asr, row, out, b, n, surprisal))
    if graphs is not None:
        tally.closest.append([u for u, _, _ in chunk], phones,
                             [closest_path(hyp, *graphs[u]) if graphs.get(u) else ref
                              for hyp, (u, _, ref) in zip(phones, chunk)])
    mask = lengths_to_mask(out.lengths, out.log_probs.shape[1])
    tally.meter.update(out.frame_macs, int(out.lengths.sum()),
                       uniform={"apc": asr.apc_macs} if asr.uses_apc else {})
    tally.routing.update(out.stats, mask)


def _scores(tally: _Tally, items: List[Item], graphs: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """PER with S/D/I, FLOPs per frame and routing statistics of the decoded corpus (and with ``graphs``,
    the same against the closest pronunciations)."""
    summary = tally.errors.summarize()
    per_frame = tally.meter.per_frame()
    flops = {k: per_frame[k] for k in sorted(per_frame, key=lambda k: (k != "apc", k == "total"))}
    result: Dict[str, Any] = {
        "per": summary["error_rate"], "substitutions": summary["substitutions"],
        "deletions": summary["deletions"], "insertions": summary["insertions"],
        "num_ref_tokens": summary["num_ref_tokens"], "num_utterances": summary["num_utterances"],
        "flops_per_frame": flops["total"], "flops_components": flops, **tally.routing.summary(),
    }
    if graphs is not None:
        free = tally.closest.summarize()
        result["any_pronunciation"] = {
            "per": free["error_rate"], **{k: free[k] for k in ("substitutions", "deletions", "insertions",
                                                               "num_ref_tokens")},
            "fixed": sum(1 for u, _, _ in items if not graphs.get(u))}
    return result


def _what_ran(asr, seed: Optional[int], batch_size: int) -> Dict[str, Any]:
    """The model and the settings it decoded with, as :func:`evaluate_corpus` reports them."""
    return {"model": str(asr.source) if asr.source else None, "device": str(asr.device),
            "precision": asr.precision, "threads": asr.threads or torch.get_num_threads(),
            "routing": asr.routing, "seed": seed if asr.routing == "sampled" else None,
            "batch_size": batch_size, "beam_size": asr.beam_search.beam_size,
            "blank_penalty": asr.beam_search.blank_penalty,
            "bias_shift": float(getattr(asr.encoder, "test_bias_shift", 0.0))}


def _utterance_report(asr, scores: Dict[str, Any], out: EncoderOutput, b: int, n: int,
                      surprisal: Optional[Tensor]) -> Dict[str, Any]:
    """One utterance of :func:`evaluate_corpus`'s ``per_utterance``: its edit counts and what ran
    (utterance ``b`` of the batch output ``out``, its first ``n`` frames; ``scores``: its row of
    :meth:`ErrorRate.last <surprisal_cc.metrics.ErrorRate.last>`)."""
    per_frame = asr.frame_results(out, b, n, surprisal)
    comps = asr.flops_components(per_frame["macs"], n)
    report = {"id": scores["key"], "reference": scores["ref_tokens"], "hypothesis": scores["hyp_tokens"],
              **{k: int(scores[k]) for k in ("substitutions", "deletions", "insertions", "num_ref_tokens")},
              "num_frames": n, "flops_per_frame": sum(comps.values())}
    if per_frame["p_big"] is not None:
        report["p_big_mean"] = float(per_frame["p_big"].double().mean())
    if per_frame["use_big"] is not None:
        report["big_fraction"] = float(per_frame["use_big"].double().mean())
    if per_frame["steps"] is not None:
        report["mean_steps"] = float(per_frame["steps"].double().mean())
    return report
