"""Score a model on a labelled corpus: corpus-level PER with S/D/I, FLOPs per frame counted from what
ran, routing statistics and the real-time factor (``surprisal-cc evaluate``): :func:`evaluate_corpus` of a
:class:`~surprisal_cc.inference.asr.ConditionalASR`.

The labels are prepared as training prepared them (:mod:`surprisal_cc.inference.corpora`), decoding is the
model's (the recipes' beam search) and scoring is the recipes' (:class:`surprisal_cc.decoding.metrics.ErrorRate`,
repeated ``sil`` merged). Utterances are decoded in batches; one longer than ``transcribe`` decodes
whole (over 76 s with the default ``long_chunk_s``, ``--chunk-seconds``, of 60 s: a part plus 8 s of
context each side) is decoded alone, in parts with context
(:func:`surprisal_cc.inference.long_audio.decode_long`), in bounded memory, and scored and counted as the others.

Example
-------
>>> import tempfile, soundfile, torch
>>> from pathlib import Path
>>> from surprisal_cc.inference.asr import ConditionalASR
>>> from surprisal_cc.training.labels import phone_set
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
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple, Union

import torch

from surprisal_cc.checks import check_batch_size, check_routing_seed, check_writable
from surprisal_cc.inference.corpora import Item, check_pronunciation_words, corpus_items, pronunciation_references, training_g2p
from surprisal_cc.data.audio import MAX_LISTED, check_audio_each, refuse_bad_audio, split_checked, warn_converted
from surprisal_cc.data.errors import BadAudioError, BadLabelsError, DataPreparationError, DataPreparationWarning, first_listed
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.flops import MacMeter, RoutingStats, count_batch
from surprisal_cc.inference import passes
from surprisal_cc.inference.budget import meet_flops_budget
from surprisal_cc.inference.protocol import LoadedModel
from surprisal_cc.decoding.metrics import ErrorRate, closest_path
from surprisal_cc.model.nnet import weights_fingerprint

PathLike = Union[str, os.PathLike]

__all__ = ["EvaluationInterrupted", "evaluate_corpus"]


class EvaluationInterrupted(KeyboardInterrupt):
    """An evaluation interrupted (Ctrl-C) after ``done`` of ``total`` utterances were scored; ``per`` is
    their PER (None when none was). Their ``per_utterance`` results were reported as their batches
    finished, and their alignments written (``alignments``); the corpus totals were not computed.

    Example
    -------
    >>> print(EvaluationInterrupted(40, 496, 31.25))
    interrupted after 40 of 496 utterances (PER 31.25 % over them); the corpus totals were not computed
    >>> print(EvaluationInterrupted(0, 496, None))
    interrupted before any of 496 utterances was scored
    """

    def __init__(self, done: int, total: int, per: Optional[float]):
        self.done, self.total, self.per = done, total, per
        super().__init__(f"interrupted after {done} of {total} utterances (PER {per:.2f} % over them); the corpus "
                         "totals were not computed" if done else
                         f"interrupted before any of {total} utterances was scored")


def evaluate_corpus(asr: LoadedModel, data: PathLike, mfa_labels: Optional[PathLike] = None, skip_bad: bool = False,
                    batch_size: Optional[int] = None, seed: Optional[int] = None, g2p: Optional[str] = None,
                    timit_split: Optional[str] = None, progress: bool = False,
                    any_pronunciation: bool = False, flops_fraction: Optional[float] = None,
                    per_utterance: Optional[Callable[[Dict[str, Any]], None]] = None,
                    alignments: Union[PathLike, TextIO, None] = None,
                    long_chunk_s: Optional[float] = None) -> Dict[str, Any]:
    """Corpus-level PER, S/D/I, FLOPs per frame, p_big and RTF on a labelled corpus.

    Arguments
    ---------
    asr : LoadedModel
        The model, a :class:`surprisal_cc.inference.asr.ConditionalASR`, with its routing, bias shift and threads.
    data : str or path
        A LibriSpeech-format folder of one subset (``speaker/chapter/*.flac`` + ``*.trans.txt``; a folder
        holding several subsets is refused; labels from
        CMUdict with the model's training G2P policy, or MFA labels from ``mfa_labels``), a
        TIMIT folder (``timit_split``: the core ``test`` set, the ``valid`` speakers or ``train``),
        a Kaldi data folder (``wav.scp`` and ``text``, labelled by the lexicon:
        :mod:`surprisal_cc.data.kaldi`) or a manifest CSV as the recipes write (``ID``, ``wav``,
        ``phn`` columns, or ``wrd``).
    mfa_labels : str or path, optional
        MFA labels of a LibriSpeech-format folder: the CSV export or a folder of TextGrid files.
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
    timit_split : str, optional
        A TIMIT folder's split: ``"test"`` (None: the default), ``"valid"`` or ``"train"``.
    progress : bool
        Show a progress bar.
    any_pronunciation : bool
        Also score each hypothesis against the reference as the words would read with any
        of their CMUdict pronunciations (or, with MFA labels, the labelled one), the one
        fewest edits away (:func:`~surprisal_cc.inference.corpora.pronunciation_references`): how much of the PER is the
        choice of pronunciations. LibriSpeech folders and manifests with a ``wrd`` column.
    flops_fraction : float, optional
        Decode at the bias shift that spends this fraction of the big-only MACs per frame over
        the corpus's audio (:func:`~surprisal_cc.inference.budget.meet_flops_budget`; its surprisal, not its labels).
    per_utterance : callable, optional
        Called with each utterance's result as its batch finishes: ``id``, ``reference``,
        ``hypothesis`` (phones, as scored), ``substitutions``, ``deletions``, ``insertions``,
        ``num_ref_tokens``, ``num_frames``, ``flops_per_frame``, ``p_big_mean`` and
        ``big_fraction`` (small/big routing) or ``mean_steps`` (ACT, PonderNet).
    alignments : str, path or text stream, optional
        Also write every utterance's alignment of hypothesis and reference to this file (or open
        stream, such as ``sys.stdout``), in SpeechBrain's format (as the recipes write
        ``test_alignments.txt``).
    long_chunk_s : float, optional
        An utterance longer than this plus twice the context (as
        :meth:`~surprisal_cc.inference.asr.ConditionalASR.transcribe_file` decides; default
        :data:`~surprisal_cc.inference.long_audio.CHUNK_S`) is decoded alone in parts of this many seconds, and
        ``flops_fraction`` reads its surprisal in parts; 0: every utterance whole, in batches.

    Returns
    -------
    dict
        ``per``, ``substitutions``, ``deletions``, ``insertions``, ``num_ref_tokens``,
        ``num_utterances``, ``flops_per_frame``, ``flops_components``, ``p_big_mean``,
        ``p_big_var`` and ``big_fraction`` (small/big routing), ``mean_steps`` (ACT, PonderNet), ``rtf``,
        ``compute_s``, ``audio_s`` and what was evaluated (``data``, ``labels``, ``skipped``,
        ``model``, ``device``, ``precision``, ``threads``, ``routing``, ``seed``, ``batch_size``,
        ``beam_size``, ``blank_penalty``, ``bias_shift``: the one decoded with, ``apc``: the APC's weights
        fingerprint, as a run's results.json records it);
        with ``any_pronunciation``,
        ``any_pronunciation``: ``per``, ``substitutions``, ``deletions``, ``insertions``,
        ``num_ref_tokens`` against those references and ``fixed`` (utterances whose labels
        are not their words' phones, scored against their labels as they are); with
        ``flops_fraction``, ``budget`` (:func:`~surprisal_cc.inference.budget.meet_flops_budget`).

    Raises
    ------
    BadAudioError
        When some audio files are unusable and ``skip_bad`` is False.
    DataPreparationError
        When the corpus, its labels or its audio cannot be used.
    EvaluationInterrupted
        On a :class:`KeyboardInterrupt` (Ctrl-C) while decoding, once the alignments of the utterances
        already scored are written; it says how many were, and their PER.
    """
    seed = _routing_seed(asr, seed)
    batch_size = check_batch_size(asr.config.get("batch_size", 8) if batch_size is None else batch_size)
    if alignments is not None and not hasattr(alignments, "write"):
        check_writable("alignments file", alignments)
    items, label_source, words, label_problems = _labelled_items(asr, data, mfa_labels, g2p, timit_split, skip_bad)
    if any_pronunciation:  # before any audio is read
        check_pronunciation_words(data, items, words)
    items, infos, problems = _usable_audio(asr, data, items, skip_bad, label_problems, mfa_labels is not None)
    graphs = pronunciation_references(data, items, words, mfa_labels, training_g2p(asr.config, g2p)) \
        if any_pronunciation else None
    warn_converted(infos, asr.feature_config.sample_rate, stacklevel=3, input_level=asr.input_level_dbfs)  # called here: its warning names our caller
    shift = asr.encoder.test_bias_shift
    merge_sil = bool(asr.config.get("merge_sil", True))
    tally = _Tally(errors=ErrorRate(merge_sil=merge_sil), closest=ErrorRate(merge_sil=merge_sil))
    try:  # a budget holds for this evaluation only: the model's bias shift is restored after
        budget = meet_flops_budget(asr, [wav for _, wav, _ in items], flops_fraction, batch_size, long_chunk_s) \
            if flops_fraction is not None else None
        _decode_corpus(asr, items, batch_size, seed, graphs, per_utterance, progress, long_chunk_s, tally)
        ran = _what_ran(asr, seed, batch_size)  # the bias shift decoded with, a budget's included
    except KeyboardInterrupt as interrupt:  # what was scored is kept: the alignments written, the count said
        if isinstance(interrupt, EvaluationInterrupted):
            raise
        done = len(tally.errors)
        if alignments is not None and done:
            tally.errors.write_alignments(alignments)
        raise EvaluationInterrupted(done, len(items),
                                    tally.errors.summarize()["error_rate"] if done else None) from None
    finally:
        asr.encoder.test_bias_shift = shift
    if alignments is not None:
        tally.errors.write_alignments(alignments)
    result = _scores(tally, items, graphs)
    result.update({"rtf": tally.seconds / max(tally.audio_s, 1e-9), "compute_s": tally.seconds,
                   "audio_s": tally.audio_s, "data": str(data), "labels": label_source,
                   "skipped": label_problems + problems, **ran})
    if budget is not None:
        result["budget"] = budget
    return result


def _routing_seed(asr: LoadedModel, seed: Optional[int]) -> Optional[int]:
    """The routing seed of this evaluation: ``seed``, else the model's (:class:`ConfigurationError` for
    a seed with deterministic routing)."""
    if seed is not None and asr.routing != "sampled":
        raise ConfigurationError("seed seeds sampled routing, and this model routes deterministically: "
                                 "set_routing('sampled', seed) (--sampled --seed N)")
    return asr.seed if seed is None else check_routing_seed(seed)


def _labelled_items(asr: LoadedModel, data: PathLike, mfa_labels: Optional[PathLike], g2p: Optional[str],
                    timit_split: Optional[str], skip_bad: bool) -> Tuple[List[Item], str, Dict[str, List[str]], List[str]]:
    """The corpus's ``(id, wav, reference phones)``, where its labels came from, each utterance's words
    and the utterances left out for want of labels (``skip_bad``: with a warning)."""
    label_problems: List[str] = []  # collected in any case: without skip_bad, _usable_audio lists them with the audio's
    words: Dict[str, List[str]] = {}
    items, label_source = corpus_items(data, asr, mfa_labels=mfa_labels, g2p=g2p, timit_split=timit_split,
                                       problems=label_problems, words=words)
    if label_problems and skip_bad:
        warnings.warn(f"skipping {len(label_problems)} utterance(s) without usable labels:\n  "
                      + "\n  ".join(label_problems[:MAX_LISTED]), DataPreparationWarning, stacklevel=3)
    return items, label_source, words, label_problems


def _usable_audio(asr: LoadedModel, data: PathLike, items: List[Item], skip_bad: bool,
                  label_problems: Sequence[str], mfa_labels: bool) -> Tuple[List[Item], Dict[str, Any], List[str]]:
    """The items whose audio is usable for ``asr`` (:func:`~surprisal_cc.data.audio.check_audio_each` at its
    limits: audio too short for one of its frames is not), its audio infos and the unusable files (``skip_bad``: with a warning; otherwise
    :class:`BadAudioError` listing them after ``label_problems``, the utterances already left out for want
    of labels, so that every problem is named at once)."""
    infos, problems = split_checked(check_audio_each([wav for _, wav, _ in items], **asr.feature_config.audio_limits))
    total, bad = len(items) + len(label_problems), len(problems) + len(label_problems)
    what = "usable labels or audio" if problems and label_problems else "usable audio" if problems else "usable labels"
    mfa_hint = "; or leave out --mfa-labels to use lexicon labels" if mfa_labels and label_problems else ""
    unlabelled = "; surprisal-cc transcribe (ConditionalASR.transcribe_file) decodes audio without labels" \
        if label_problems and not problems and not mfa_hint else ""
    none_usable = (f"the one utterance has no {what}" if total == 1 else f"none of the {total} utterances has {what}")
    refuse_bad_audio(first_listed(label_problems, MAX_LISTED, " without usable labels") + problems, total, skip_bad,
                     f"{bad} of {total} utterances have no {what}: pass --skip-bad (skip_bad=True) to score the others{mfa_hint}",
                     f"{none_usable}{mfa_hint}{unlabelled}", bad=bad,
                     error=BadLabelsError if label_problems else BadAudioError)
    if problems:
        warnings.warn(f"skipping {len(problems)} unusable audio file(s):\n  " + "\n  ".join(problems),
                      DataPreparationWarning, stacklevel=3)
    items = [item for item in items if str(item[1]) in infos]
    if not items:
        raise DataPreparationError(f"{data}: no usable utterance to score{unlabelled}")
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


def _decode_corpus(asr: LoadedModel, items: List[Item], batch_size: int, seed: Optional[int],
                   graphs: Optional[Dict[str, Any]], per_utterance: Optional[Callable[[Dict[str, Any]], None]],
                   progress: bool, long_chunk_s: Optional[float], tally: _Tally) -> _Tally:
    """Decode and score ``items`` into ``tally`` in batches of ``batch_size`` (long ones alone, in parts:
    :func:`_plan`), routing seeded with ``seed``; an interruption leaves ``tally`` holding the batches
    that finished."""
    from surprisal_cc.inference.long_audio import is_long, part_seconds

    chunk_s = part_seconds(long_chunk_s)
    plan = _plan(items, batch_size, lambda wav: is_long(wav, chunk_s))
    if progress:
        from tqdm import tqdm

        plan = tqdm(plan, desc="evaluate", unit="batch")
    with passes.seeded_routing(asr, seed):
        for in_parts, chunk in plan:
            if in_parts:
                _decode_long(asr, chunk[0], chunk_s, tally, graphs, per_utterance)
            else:
                _decode_batch(asr, chunk, tally, graphs, per_utterance)
    return tally


def _plan(items: List[Item], batch_size: int, in_parts: Callable[[Any], bool]) -> List[Tuple[bool, List[Item]]]:
    """The decoding order: the short items (``in_parts(wav)`` False) in corpus order, ``batch_size`` at a
    time, as ``(False, batch)``, and each long one alone, where it comes, as ``(True, [item])``.

    >>> _plan([("a", 1, []), ("b", 99, []), ("c", 2, []), ("d", 3, [])], 2, lambda wav: wav > 50)
    [(True, [('b', 99, [])]), (False, [('a', 1, []), ('c', 2, [])]), (False, [('d', 3, [])])]
    """
    plan: List[Tuple[bool, List[Item]]] = []
    batch: List[Item] = []
    for item in items:
        if in_parts(item[1]):
            plan.append((True, [item]))
            continue
        batch.append(item)
        if len(batch) == batch_size:
            plan.append((False, batch))
            batch = []
    if batch:
        plan.append((False, batch))
    return plan


def _decode_batch(asr: LoadedModel, chunk: List[Item], tally: _Tally, graphs: Optional[Dict[str, Any]],
                  per_utterance: Optional[Callable[[Dict[str, Any]], None]]) -> None:
    """Decode one batch of items, add its edits, MACs, routing and time to ``tally`` and report its utterances."""
    signals = [asr.feature_config.read_audio(wav) for _, wav, _ in chunk]
    samples = torch.tensor([s.numel() for s in signals])
    wavs = torch.nn.utils.rnn.pad_sequence(signals, batch_first=True)
    batch = passes.decode_batch(asr, wavs, samples)
    out = batch.output
    tally.seconds += batch.seconds
    tally.audio_s += float(samples.sum()) / asr.feature_config.sample_rate
    rows = _add_edits(tally, chunk, [passes.phones_of(asr, h) for h in batch.hyps], graphs)
    if per_utterance is not None:
        for b, (row, n) in enumerate(zip(rows, batch.frames.tolist())):
            per_frame = passes.frame_results(out, b, n, batch.surprisal)
            comps = passes.flops_components(asr, passes.frame_macs(out, b, slice(0, n)), n)
            per_utterance(_utterance_report(row, n, comps, per_frame))
    count_batch(tally.meter, tally.routing, out, asr.apc_macs if asr.uses_apc else None)


def _decode_long(asr: LoadedModel, item: Item, chunk_s: float, tally: _Tally, graphs: Optional[Dict[str, Any]],
                 per_utterance: Optional[Callable[[Dict[str, Any]], None]]) -> None:
    """Decode one long item alone, in parts of ``chunk_s`` seconds (:func:`~surprisal_cc.inference.long_audio.decode_long`),
    and add it to ``tally`` and report it as :func:`_decode_batch` does a batch."""
    from surprisal_cc.inference.long_audio import decode_long

    result = decode_long(asr, item[1], chunk_s=chunk_s, seeded=False)  # the corpus's seeded RNG draws on
    n, comps = int(result["num_frames"]), result["flops_components"]
    tally.seconds += result["rtf"] * result["duration_s"]
    tally.audio_s += result["duration_s"]
    (row,) = _add_edits(tally, [item], [result["phones"]], graphs)
    if per_utterance is not None:
        per_utterance(_utterance_report(row, n, comps, result))
    # MACs of the kept frames (as transcribe counts them), the APC's on every frame as in a batch
    tally.meter.update({name: torch.tensor(per_frame * n, dtype=torch.float64)
                        for name, per_frame in comps.items() if name != "apc"}, n,
                       uniform={"apc": asr.apc_macs} if asr.uses_apc else {})
    tally.routing.update({name: result[name][None] for name in ("p_big", "use_big", "steps")
                          if result[name] is not None}, torch.ones(1, n, dtype=torch.bool))


def _add_edits(tally: _Tally, chunk: List[Item], phones: List[List[str]],
               graphs: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Score the hypotheses ``phones`` of ``chunk`` against its references (and with ``graphs``, the
    closest pronunciations) into ``tally``; their rows of :meth:`ErrorRate.last <surprisal_cc.decoding.metrics.ErrorRate.last>`."""
    tally.errors.append([u for u, _, _ in chunk], phones, [ref for _, _, ref in chunk])
    rows = tally.errors.last(len(chunk))
    if graphs is not None:
        tally.closest.append([u for u, _, _ in chunk], phones,
                             [closest_path(hyp, *graphs[u]) if graphs.get(u) else ref
                              for hyp, (u, _, ref) in zip(phones, chunk)])
    return rows


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


def _what_ran(asr: LoadedModel, seed: Optional[int], batch_size: int) -> Dict[str, Any]:
    """The model and the settings it decoded with, as :func:`evaluate_corpus` reports them."""
    return {"model": str(asr.source) if asr.source else None, "device": str(asr.device),
            "precision": asr.precision, "threads": asr.threads or torch.get_num_threads(),
            "routing": asr.routing, "seed": seed if asr.routing == "sampled" else None,
            "batch_size": batch_size, "beam_size": asr.beam_search.beam_size,
            "blank_penalty": asr.beam_search.blank_penalty,
            "bias_shift": float(asr.encoder.test_bias_shift),
            "apc": weights_fingerprint(asr.apc.apc) if asr.apc is not None else None}


def _utterance_report(scores: Dict[str, Any], n: int, comps: Dict[str, float],
                      per_frame: Dict[str, Any]) -> Dict[str, Any]:
    """One utterance of :func:`evaluate_corpus`'s ``per_utterance``: its edit counts and what ran on its
    ``n`` frames (``scores``: its row of :meth:`ErrorRate.last <surprisal_cc.decoding.metrics.ErrorRate.last>`;
    ``comps``: MACs per frame of each component; ``per_frame``: its ``p_big``, ``use_big`` and ``steps``,
    each None where the model has none)."""
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
