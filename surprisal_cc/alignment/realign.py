"""Relabelling a corpus with a trained CTC model: the lexicon's phones, with the pauses and the
pronunciations the audio has. Lexicon labels put ``sil`` only at the two ends of an utterance, while
forced-aligner labels (MFA) also mark pauses between words and pick each word's pronunciation among
the lexicon's. :func:`align_words` finds, with a trained CTC model's log-probabilities, the best CTC
path through the words' phones where a ``sil`` may be inserted at every word boundary (ends included)
and each word may take any of its pronunciations; :func:`realign_run` applies it to the manifests of a
finished recipe run, :func:`realign_corpus` to a LibriSpeech-format folder with an exported model, and
:func:`~surprisal_cc.data.mfa.write_alignment_csv` writes the labels in the MFA export format that
``labels: mfa`` reads (:mod:`surprisal_cc.alignment.label_eval` scores them against MFA's).

Example
-------
>>> import numpy as np
>>> lp = np.log(np.full((6, 4), 0.01))            # ids: 0 blank, 1 sil, 2 and 3 phones
>>> for t, k in enumerate([2, 0, 1, 1, 3, 0]):
...     lp[t, k] = np.log(0.97)
>>> ali = align_words(lp, [[[2]], [[3]]], blank=0, sil=1)  # two words, one pronunciation each
>>> ali.labels, ali.silences
([2, 1, 3], [1])
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from surprisal_cc.data.audio import MIN_DURATION_S
from surprisal_cc.data.errors import DataPreparationError
from surprisal_cc.data.manifest import read_manifest
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.nnet import routes_by_chance, runs_apc, seeded_draws
from surprisal_cc.decoding.viterbi import Alignment, AlignmentError, as_numpy, ctc_viterbi_graph

logger = logging.getLogger(__name__)


def align_words(log_probs, words: Sequence[Sequence[Sequence[int]]], blank: int, sil: int) -> Alignment:
    """Align words that may each have several pronunciations, with an optional ``sil`` at each word
    boundary and at both ends: the best CTC path over every choice of pronunciations and pauses,
    as a forced aligner with a multi-pronunciation lexicon (MFA) chooses them.

    Arguments
    ---------
    log_probs : array-like, shape (T, V)
        Per-frame CTC log-probabilities of one utterance.
    words : sequence of sequences of sequences of int
        For each word, its pronunciations as phone ids (each non-empty, no ``sil`` at its ends).
    blank : int
        Id of the blank.
    sil : int
        Id of ``sil``.

    Returns
    -------
    Alignment
        ``labels`` holds the chosen phones and ``sil``; ``silences`` the boundaries that got a
        ``sil``; ``pronunciations`` the index of each word's chosen pronunciation.

    Example
    -------
    "a" as AH (2) or EY (3), then "b" (4), heard as EY, pause, b:

    >>> import numpy as np
    >>> lp = np.log(np.full((5, 5), 0.01))
    >>> for t, k in enumerate([3, 0, 1, 4, 0]):
    ...     lp[t, k] = np.log(0.96)
    >>> ali = align_words(lp, [[[2], [3]], [[4]]], blank=0, sil=1)
    >>> ali.labels, ali.silences, ali.pronunciations
    ([3, 1, 4], [1], [1, 0])
    """
    tokens: List[int] = []
    predecessors: List[List[int]] = []
    sil_nodes: List[int] = []
    first_nodes: List[List[int]] = []
    ends = [-1]  # the tokens a next word or sil may follow
    for i, prons in enumerate(list(words) + [None]):
        sil_nodes.append(len(tokens))
        tokens.append(sil)
        predecessors.append(list(ends))
        if prons is None:
            break
        if not len(prons):
            raise ValueError(f"word {i} has no pronunciation")
        firsts, new_ends = [], []
        for v, pron in enumerate(prons):
            pron = list(pron)
            if not pron or pron[0] == sil or pron[-1] == sil:
                raise ValueError(f"word {i} (pronunciation {v}) has phones {pron}: pronunciations must be "
                                 "non-empty and not start or end with sil")
            firsts.append(len(tokens))
            for j, phone in enumerate(pron):
                predecessors.append(ends + [sil_nodes[-1]] if j == 0 else [len(tokens) - 1])
                tokens.append(phone)
            new_ends.append(len(tokens) - 1)
        first_nodes.append(firsts)
        ends = new_ends
    ali = ctc_viterbi_graph(log_probs, tokens, predecessors, ends + [sil_nodes[-1]], blank)
    ali.silences = [b for b, node in enumerate(sil_nodes) if ali.kept[node]]
    ali.pronunciations = [int(np.flatnonzero(ali.kept[firsts])[0]) for firsts in first_nodes]
    return ali


# ---------------------------------------------------------------------------------------------
# Pauses from the audio
# ---------------------------------------------------------------------------------------------
def silent_frames(fbank, threshold: float = 0.25, low: float = 5.0, high: float = 95.0) -> np.ndarray:
    """Frames quieter than the utterance's own silence level plus ``threshold`` of its dynamic range.

    The frame level is the mean log-mel energy; the silence and speech levels are its ``low`` and
    ``high`` percentiles within the utterance, so the rule adapts to each recording's gain and noise.

    Arguments
    ---------
    fbank : array-like, shape (T, n_mels)
        Log-mel filterbank frames of one utterance.
    threshold : float
        Fraction of the range between the two levels below which a frame is silent.
    low, high : float
        Percentiles taken as the silence and speech levels.

    Returns
    -------
    numpy.ndarray of bool, shape (T,)

    Example
    -------
    >>> frames = np.array([[-10.0], [-9.8], [2.0], [1.5], [-9.9], [2.2]])
    >>> silent_frames(frames).tolist()
    [True, True, False, False, True, False]
    """
    energy = as_numpy(fbank).mean(axis=1)
    quiet, loud = np.percentile(energy, [low, high])
    return energy < quiet + threshold * (loud - quiet)


def _longest_run(mask: np.ndarray) -> Tuple[int, int]:
    """``(start, length)`` of the longest run of True in a 1-D bool array ((0, 0) without one)."""
    padded = np.r_[False, mask, False].astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    if not len(edges):
        return 0, 0
    starts, ends = edges[::2], edges[1::2]
    i = int(np.argmax(ends - starts))
    return int(starts[i]), int(ends[i] - starts[i])


def insert_pauses(utterance: "RealignedUtterance", silent: np.ndarray, min_frames: int = 5,
                  sil: str = "sil") -> "RealignedUtterance":
    """Add a ``sil`` at every word boundary whose frames hold a silent run of at least ``min_frames``.

    A boundary's frames are those of the last phone of the word before it (from that phone's CTC
    spike to the next word's first spike), where a CTC model puts the pause. This finds the pauses
    that a model trained without interior ``sil`` cannot label itself.

    Arguments
    ---------
    utterance : RealignedUtterance
        Labels from :func:`realign_utterance`.
    silent : numpy.ndarray of bool, shape (T,)
        Silent frames (:func:`silent_frames`).
    min_frames : int
        Shortest pause, in frames (5: 100 ms at 20 ms per frame).
    sil : str
        The silence label.

    Returns
    -------
    RealignedUtterance
        The same utterance with the added ``sil`` (phones, silences and segments).

    Example
    -------
    >>> utt = RealignedUtterance("u", "u.flac", ["a", "b"], [1, 1], ["sil", "AH", "B", "sil"], [0, 2],
    ...                          np.array([[0, 2], [2, 10], [10, 12], [12, 14]]), 14)
    >>> silent = np.zeros(14, dtype=bool); silent[4:9] = True
    >>> new = insert_pauses(utt, silent)
    >>> new.phones, new.silences, new.segments.tolist()
    (['sil', 'AH', 'sil', 'B', 'sil'], [0, 1, 2], [[0, 2], [2, 4], [4, 9], [9, 12], [12, 14]])
    """
    if utterance.fallback or len(utterance.words) < 2:
        return utterance
    phones, segments = list(utterance.phones), [list(s) for s in utterance.segments]
    silences = set(utterance.silences)
    # index in phones of the last phone of each word
    position, last_phone = 1 if 0 in silences else 0, []
    for w, n in enumerate(utterance.word_lengths):
        position += n
        last_phone.append(position - 1)
        if w + 1 in silences:
            position += 1
    for w in reversed(range(len(utterance.words) - 1)):  # right to left: earlier indices stay valid
        if w + 1 in silences:
            continue
        i = last_phone[w]
        start, end = segments[i]
        run_start, run_length = _longest_run(np.asarray(silent[start + 1:end], dtype=bool))  # the phone keeps its spike
        if run_length < min_frames:
            continue
        pause = [start + 1 + run_start, start + 1 + run_start + run_length]
        segments[i] = [start, pause[0]]
        segments[i + 1][0] = pause[1]
        phones.insert(i + 1, sil)
        segments.insert(i + 1, pause)
        silences.add(w + 1)
    return RealignedUtterance(utterance.id, utterance.wav, utterance.words, utterance.word_lengths, phones,
                              sorted(silences), np.asarray(segments, dtype=int), utterance.num_frames,
                              pronunciations=utterance.pronunciations)


# ---------------------------------------------------------------------------------------------
# Relabelling a corpus with a trained model
# ---------------------------------------------------------------------------------------------
@dataclass
class RealignedUtterance:
    """New labels of one utterance.

    Arguments
    ---------
    id : str
        Utterance id.
    wav : str
        Path of its audio file.
    words : list of str
        Words of the transcript.
    word_lengths : list of int
        Number of phones of each word.
    phones : list of str
        The lexicon phones with the chosen ``sil``.
    silences : list of int
        Word boundaries that got a ``sil`` (0 .. len(words)).
    segments : numpy.ndarray
        (len(phones), 2) ``[start, end)`` frame span of each phone.
    num_frames : int
        Frames of the utterance.
    fallback : bool
        True when no alignment fitted and the lexicon labels (``sil`` at both ends) were kept.
    pronunciations : list of int
        Index of each word's chosen pronunciation among those it was aligned with (0: the first).
    """

    id: str
    wav: str
    words: List[str]
    word_lengths: List[int]
    phones: List[str]
    silences: List[int]
    segments: np.ndarray
    num_frames: int
    fallback: bool = False
    pronunciations: List[int] = field(default_factory=list)


def realign_utterance(log_probs, utt_id: str, wav: str, words: Sequence[str], word_phones: Sequence[Sequence[str]],
                      label_encoder, blank: int, sil: str = "sil",
                      window_ms: float = MIN_DURATION_S * 1000) -> RealignedUtterance:
    """Realign one utterance given its per-word phones (strings) and log-probabilities (T, V).

    A word may come with several pronunciations, of which the alignment picks the one the audio
    fits best (:func:`align_words`). Falls back to the lexicon labels (each word's first
    pronunciation) with ``sil`` at both ends when no path fits.

    Arguments
    ---------
    log_probs : array-like, shape (T, V)
        Per-frame CTC log-probabilities of the utterance (numpy or torch).
    utt_id : str
        Utterance id.
    wav : str
        Path of its audio file.
    words : sequence of str
        Words of the transcript.
    word_phones : sequence
        Lexicon phones of each word (no ``sil``): a sequence of str, or a sequence of such
        sequences for a word with several pronunciations (the first is the lexicon's own).
    label_encoder : speechbrain.dataio.encoder.CTCTextEncoder
        Maps phones to the model's output ids.
    blank : int
        Id of the blank.
    sil : str
        The silence label.
    window_ms : float
        The model's analysis window in ms (its ``FeatureConfig.frame_length_ms``: the shortest audio with a
        frame), for the error of an utterance without frames.

    Returns
    -------
    RealignedUtterance
        The new labels, with ``fallback`` True when the lexicon labels were kept.

    Example
    -------
    >>> import numpy as np
    >>> from speechbrain.dataio.encoder import CTCTextEncoder
    >>> enc = CTCTextEncoder()
    >>> enc.insert_blank(index=0)
    >>> enc.update_from_iterable([["sil", "AH", "B"]], sequence_input=True)
    >>> enc.expect_len(4)
    >>> lp = np.log(np.full((6, 4), 0.01))
    >>> for t, k in enumerate([2, 0, 1, 1, 3, 0]):  # AH, blank, sil, sil, B, blank
    ...     lp[t, k] = np.log(0.97)
    >>> utt = realign_utterance(lp, "u1", "u1.flac", ["a", "be"], [["AH"], ["B"]], enc, blank=0)
    >>> utt.phones, utt.silences, utt.segments.tolist(), utt.fallback
    (['AH', 'sil', 'B'], [1], [[0, 2], [2, 4], [4, 6]], False)
    >>> realign_utterance(lp[:1], "u1", "u1.flac", ["a", "be"], [["AH"], ["B"]], enc, blank=0).phones
    ['sil', 'AH', 'B', 'sil']
    >>> realign_utterance(lp, "u1", "u1.flac", ["a", "be"], [[["B"], ["AH"]], ["B"]], enc, blank=0).pronunciations
    [1, 0]
    """
    prons = [[list(p)] if p and isinstance(p[0], str) else [list(v) for v in p] for p in word_phones]
    ids = [[label_encoder.encode_sequence(v) for v in alternatives] for alternatives in prons]
    T = int(log_probs.shape[0])
    if T == 0:
        raise DataPreparationError(f"{wav} (utterance {utt_id}): no frames to align (shorter than the model's one "
                                   f"{window_ms:.4g} ms window): leave it out of the corpus")
    try:
        ali = align_words(log_probs, ids, blank, label_encoder.lab2ind[sil])
    except AlignmentError:
        phones = [sil] + [p for w in prons for p in w[0]] + [sil]
        bounds = np.linspace(0, T, len(phones) + 1).round().astype(int)
        return RealignedUtterance(utt_id, wav, list(words), [len(w[0]) for w in prons], phones, [0, len(words)],
                                  np.stack([bounds[:-1], bounds[1:]], 1), T, fallback=True,
                                  pronunciations=[0] * len(prons))
    phones = [str(label_encoder.ind2lab[i]) for i in ali.labels]
    lengths = [len(w[v]) for w, v in zip(prons, ali.pronunciations)]
    return RealignedUtterance(utt_id, wav, list(words), lengths, phones, ali.silences, ali.segments(), T,
                              pronunciations=ali.pronunciations)


def load_run(run_dir, overrides: Union[str, Mapping, None] = None, device: str = "cpu"):
    """Hparams, encoder (best checkpoint, eval mode, deterministic routing; drawn for a model that routes
    by chance, which :func:`realign_run` seeds batch by batch) and Brain of a run folder.

    ``run_dir`` holds ``hyperparams.yaml`` (as SpeechBrain saves it) and ``save/CKPT+*`` written by
    the recipe's Checkpointer; the checkpoint with the lowest ``selection_metric`` is loaded.
    Paths in the hparams are relative to the current folder (the repository root, as for recipes).

    Arguments
    ---------
    run_dir : str or path
        Output folder of a recipe run.
    overrides : str or mapping, optional
        Hparams overrides (YAML text or a dict), on top of those that keep loading free of side
        effects (:func:`~surprisal_cc.config.inert_overrides`).
    device : str
        Device of the Brain.

    Returns
    -------
    hparams : dict
        The loaded hparams (``precision`` set to ``"fp32"``).
    brain : ConditionalCTCBrain
        Brain holding the encoder, in eval mode.
    checkpoint : speechbrain.utils.checkpoints.Checkpoint
        The checkpoint that was loaded.

    Raises
    ------
    ConfigurationError
        When the folder holds no hparams file or no checkpoint, or the targets are not phones.
    """
    from surprisal_cc.training.checkpoints import Checkpointer

    from surprisal_cc.training.brain import ConditionalCTCBrain
    from surprisal_cc.training.run_settings import load_run_hparams

    run_dir = Path(run_dir)
    _, hparams = load_run_hparams(run_dir, overrides, phones_for="realignment")  # creates no checkpoint folders
    encoder = hparams["encoder_module"]
    checkpointer = Checkpointer(run_dir / "save", recoverables={"encoder": encoder})
    metric = hparams.get("selection_metric", "PER")
    checkpoint = checkpointer.recover_if_possible(min_key=metric)
    if checkpoint is None:
        raise ConfigurationError(f"{run_dir / 'save'} holds no checkpoint with {metric!r}: train the run first")
    logger.info("realigning with %s (%s %s)", checkpoint.path, metric, checkpoint.meta.get(metric))
    if not routes_by_chance(encoder):  # else p_big > 0.5 would send every frame to one network: drawn
        encoder.set_test_sampling(False)  # deterministic routing (p_big > 0.5; PonderNet: threshold halting)
    hparams["precision"] = "fp32"
    brain = ConditionalCTCBrain(modules={"encoder": encoder}, hparams=hparams, run_opts={"device": device})
    brain.modules.eval()
    return hparams, brain, checkpoint


def realign_run(run_dir, split: str = "train", *, prepare=None, overrides=None, device: str = "cpu",
                batch_size: int = 8, limit: Optional[int] = None, pauses: Optional[Mapping[str, float]] = None,
                all_pronunciations: bool = False,
                info: Optional[Dict[str, object]] = None) -> Iterator[RealignedUtterance]:
    """Realign every utterance of one split of a finished run's data with its best model.

    Log-probabilities come from the run's Brain (``compute_forward`` at the test stage) on the
    run's feature cache; words are pronounced by the run's lexicon (``g2p``). The APC model is the one
    the run trained with (:func:`~surprisal_cc.training.frozen_features.load_run_apc`): none is pretrained.

    Arguments
    ---------
    run_dir : str or path
        Output folder of a recipe run (see :func:`load_run`).
    split : str
        One of the splits ``prepare`` returns, e.g. ``"train"``.
    prepare : callable, optional
        Makes the run's manifests from its ``prepare_options`` and returns ``{split: path}``;
        default: :func:`~surprisal_cc.data.prepare_mini_librispeech` (with unchanged options it
        only reads them).
    overrides : str or mapping, optional
        Hparams overrides, as for :func:`load_run`.
    device : str
        Device of the forward passes.
    batch_size : int
        Utterances per forward pass.
    limit : int, optional
        Keep only the ``limit`` shortest utterances.
    pauses : dict, optional
        Also add a ``sil`` at word boundaries that the audio shows to be pauses
        (:func:`insert_pauses`); keys ``threshold`` (of :func:`silent_frames`) and ``min_frames``.
    all_pronunciations : bool
        Align each word with all of its CMUdict pronunciations and keep the one the audio fits
        best, as MFA does (default: the first one only).
    info : dict, optional
        Receives ``forward_s`` and ``align_s`` (seconds), ``checkpoint``, ``manifest`` and
        ``samples_per_frame`` (for :func:`~surprisal_cc.data.mfa.write_alignment_csv`).

    Returns
    -------
    iterator of RealignedUtterance
        One per utterance, shortest first.
    """
    import speechbrain as sb
    import torch

    from surprisal_cc.model.apc import FrozenAPC
    from surprisal_cc.training.cache import FeatureCache
    from surprisal_cc.data import Lexicon
    from surprisal_cc.training.datasets import dataio_prep
    from surprisal_cc.training.frozen_features import load_run_apc

    if prepare is None:
        from surprisal_cc.data import prepare_mini_librispeech as prepare
    hparams, brain, checkpoint = load_run(run_dir, overrides, device)
    manifests = prepare(**hparams["prepare_options"])
    if split not in manifests:
        raise ConfigurationError(f"split {split!r} is not one of the run's splits {sorted(manifests)}")
    encoder = hparams["encoder_module"]
    apc = None
    if runs_apc(hparams["input_features"], encoder):  # the APC the run trained with: realignment pretrains none
        apc = load_run_apc(hparams, run_dir, manifests=manifests,
                           todo="give the APC model the run trained with: --overrides '{apc_path: FILE}' "
                                "(realign_run(overrides=...))")
        brain.modules["apc"] = FrozenAPC(apc).to(brain.device)
    subset = {split: manifests[split]}
    cache = None
    if hparams["use_feature_cache"]:
        cache = FeatureCache(hparams["cache_folder"], apc, hparams["feature_config"])
    data = dataio_prep(hparams, subset, cache)[split].filtered_sorted(sort_key="duration")
    if limit is not None:  # SpeechBrain's select_n takes the first n before sorting: the n shortest, sorted first
        data = data.filtered_sorted(sort_key="duration", select_n=limit)
    with data.output_keys_as(["id"]):
        ids = [item["id"] for item in data]
    rows = _rows(manifests[split])
    if cache is not None:  # as the recipe's fill_cache, for these utterances only
        todo = sorted(ids, key=lambda u: -float(rows[u]["duration"]))
        cache.build([(u, rows[u]["wav"]) for u in todo], cache.feature_config.read_audio,
                    batch_size=hparams["cache_batch_size"])
    lexicon = Lexicon(g2p=hparams["g2p"])
    lexicon.prefetch(w for u in ids for w in rows[u]["wrd"].split())
    label_encoder, blank = hparams["label_encoder"], hparams["blank_index"]
    loader = sb.dataio.dataloader.make_dataloader(data, batch_size=batch_size, shuffle=False)
    info = info if info is not None else {}
    features = hparams["feature_config"]
    info.update(checkpoint=str(checkpoint.path), manifest=str(manifests[split]),
                samples_per_frame=features.shift_samples * features.frame_skip)
    info.setdefault("forward_s", 0.0)
    info.setdefault("align_s", 0.0)
    drawn = routes_by_chance(encoder)
    for index, batch in enumerate(loader):
        start = time.perf_counter()
        with torch.no_grad(), seeded_draws(index if drawn else None, brain.device):  # the same draws on every run
            out = brain.compute_forward(batch, sb.Stage.TEST).output
        log_probs, lengths = out.log_probs.float().cpu().numpy(), out.lengths.cpu().tolist()
        fbank = _batch_fbank(batch, hparams["front_end"]) if pauses is not None else None
        info["forward_s"] += time.perf_counter() - start
        yield from _realign_batch(batch.id, [rows[u]["wav"] for u in batch.id], [w.split() for w in batch.wrd],
                                  log_probs, lengths, fbank, lexicon, label_encoder, blank, pauses, info,
                                  all_pronunciations, features.frame_length_ms)


def _realign_batch(ids: Sequence[str], wavs: Sequence[str], words: Sequence[Sequence[str]], log_probs: np.ndarray,
                   lengths: Sequence[int], fbank: Optional[np.ndarray], lexicon, label_encoder, blank: int,
                   pauses: Optional[Mapping[str, float]], info: Dict[str, object],
                   all_pronunciations: bool = False,
                   window_ms: float = MIN_DURATION_S * 1000) -> Iterator[RealignedUtterance]:
    """:func:`realign_utterance` (and :func:`insert_pauses` when ``pauses``) for each utterance of a batch
    (``window_ms``: the model's analysis window, for the error of an utterance without frames)."""
    for i, utt_id in enumerate(ids):
        if all_pronunciations:
            word_phones = [lexicon.pronunciations(w, utt_id) for w in words[i]]
        else:
            word_phones = [lexicon.words_to_phones([w], False, utt_id) for w in words[i]]
        start = time.perf_counter()
        result = realign_utterance(log_probs[i, :lengths[i]], utt_id, str(wavs[i]), list(words[i]), word_phones,
                                   label_encoder, blank, window_ms=window_ms)
        if pauses is not None:
            silent = silent_frames(fbank[i, :lengths[i]], threshold=pauses.get("threshold", 0.25))
            result = insert_pauses(result, silent, min_frames=int(pauses.get("min_frames", 5)))
        info["align_s"] += time.perf_counter() - start
        yield result


def realign_corpus(model, corpus, *, device: str = "cpu", batch_size: int = 8, limit: Optional[int] = None,
                   pauses: Optional[Mapping[str, float]] = None, all_pronunciations: bool = False,
                   info: Optional[Dict[str, object]] = None) -> Iterator[RealignedUtterance]:
    """Realign every utterance of a LibriSpeech-format folder with an exported model.

    The counterpart of :func:`realign_run` for a model folder written by ``surprisal-cc export``
    (such as the shipped ``surprisal_cc/pretrained/``): fp32 and deterministic routing (``p_big > 0.5``), so
    the same model gives the same labels on every machine up to float rounding, without training
    an aligner first. Words are pronounced by CMUdict with the model's own OOV policy. Files too short
    for one frame of the model are all named in one :class:`~surprisal_cc.data.errors.BadAudioError`
    before any batch.

    Arguments
    ---------
    model : str or path
        An exported model folder (``model.json``, ``encoder.pt``, ``apc.pt``).
    corpus : str or path
        A LibriSpeech-format subset folder (``*/*/*.flac`` with ``*.trans.txt``), e.g.
        ``LibriSpeech/train-clean-5``.
    device : str
        Device of the forward passes.
    batch_size : int
        Utterances per forward pass (sorted by length, so padding stays small).
    limit : int, optional
        Keep only the ``limit`` shortest utterances.
    pauses : dict, optional
        As for :func:`realign_run`.
    all_pronunciations : bool
        As for :func:`realign_run`.
    info : dict, optional
        Receives ``forward_s``, ``align_s``, ``checkpoint`` (the model folder) and ``samples_per_frame``.

    Returns
    -------
    iterator of RealignedUtterance
        One per utterance, shortest first.
    """
    import soundfile as sf
    import torch
    from speechbrain.dataio.encoder import CTCTextEncoder

    from surprisal_cc.inference.corpora import training_g2p
    from surprisal_cc.data import Lexicon
    from surprisal_cc.data.audio import MAX_LISTED, refuse_bad_audio, short_audio_problem, soundfile_name
    from surprisal_cc.data.errors import first_listed
    from surprisal_cc.data.librispeech import scan_subset
    from surprisal_cc.inference.asr import ConditionalASR
    from surprisal_cc.inference.passes import forward_pass, seeded_routing

    asr = ConditionalASR.from_pretrained(model, device=device, precision="fp32")
    if "sil" not in asr.labels:
        raise ConfigurationError(f"{model}: the model has no 'sil' label to insert between words; realign with a "
                                 "model trained on phone labels that have sil")
    if asr.routing == "sampled":  # a model that routes by chance: drawn, from a fixed seed
        asr.set_routing("sampled", seed=0)
    label_encoder = CTCTextEncoder()
    for label in asr.labels:
        label_encoder.add_label(label)
    label_encoder.expect_len(len(asr.labels))
    features = asr.feature_config
    # shortest first, by duration whatever the file's sample rate (headers only)
    scanned = sorted(((u, sf.info(soundfile_name(u.wav))) for u in scan_subset(corpus)),
                     key=lambda found: (found[1].frames / found[1].samplerate, found[0].id))[:limit]
    # every file too short for one of the model's frames, named before any batch
    short = [f"{u.wav}: {problem}" for u, audio in scanned if (problem := short_audio_problem(
        audio.frames, audio.samplerate, features.min_samples, features.sample_rate)) is not None]
    hint = f"{len(short)} of {len(scanned)} files are too short for one frame of the model: leave them out of {corpus}"
    refuse_bad_audio(first_listed(short, MAX_LISTED), len(scanned), False, hint, hint, bad=len(short))
    utts = [u for u, _ in scanned]
    lexicon = Lexicon(g2p=training_g2p(asr.config))
    lexicon.prefetch(w for u in utts for w in u.words)
    info = info if info is not None else {}
    info.update(checkpoint=str(model), samples_per_frame=features.shift_samples * features.frame_skip)
    info.setdefault("forward_s", 0.0)
    info.setdefault("align_s", 0.0)
    for first in range(0, len(utts), batch_size):
        batch = utts[first:first + batch_size]
        start = time.perf_counter()
        audio = [asr.feature_config.read_audio(u.wav) for u in batch]
        samples = torch.tensor([len(a) for a in audio])
        wavs = torch.nn.utils.rnn.pad_sequence(audio, batch_first=True)
        with seeded_routing(asr):  # drawn routing: the same draws for a batch on every run
            forward = forward_pass(asr, wavs, samples)
        out, fbank = forward.output, forward.fbank
        log_probs = out.log_probs.float().cpu().numpy()
        info["forward_s"] += time.perf_counter() - start
        yield from _realign_batch([u.id for u in batch], [u.wav for u in batch], [u.words for u in batch],
                                  log_probs, out.lengths.cpu().tolist(), fbank.float().cpu().numpy(), lexicon,
                                  label_encoder, asr.beam_search.blank, pauses, info, all_pronunciations,
                                  features.frame_length_ms)


def _batch_fbank(batch, front_end) -> np.ndarray:
    """(B, T, n_mels) log-mel frames of a batch: cached (``fbank``) or computed from the audio."""
    from surprisal_cc.model.nnet import absolute_lengths

    if hasattr(batch, "fbank"):
        return batch.fbank.data.float().cpu().numpy()
    feats, _ = front_end(batch.sig.data, absolute_lengths(batch.sig))
    return feats.float().cpu().numpy()


def _rows(manifest) -> Dict[str, Dict[str, str]]:
    """Rows of a manifest CSV by utterance id (``wav`` as written: the feature cache reads it so)."""
    return {row["ID"]: row for row in read_manifest(manifest, ("ID", "duration", "wav", "wrd"), resolve_wav=False).rows}


# ---------------------------------------------------------------------------------------------
# silence statistics (the MFA export writer is surprisal_cc.data.mfa.write_alignment_csv)
# ---------------------------------------------------------------------------------------------
def silence_statistics(utterances: Sequence[RealignedUtterance]) -> Dict[str, float]:
    """How many ``sil`` the realignment inserted: per utterance, per word boundary, at the ends.

    Arguments
    ---------
    utterances : sequence of RealignedUtterance
        Realigned utterances.

    Returns
    -------
    dict
        ``utterances``, ``interior_sil_per_utterance``, ``interior_boundaries_with_sil`` (fraction),
        ``start_with_sil`` and ``end_with_sil`` (fractions of utterances; nan without utterances),
        ``other_pronunciations`` (fraction of the words aligned with another pronunciation than
        their first), ``fallbacks`` and ``frames`` (counts).

    Example
    -------
    >>> import numpy as np
    >>> spans = np.zeros((3, 2), dtype=int)
    >>> a = RealignedUtterance("a", "a.flac", ["x", "y"], [1, 1], ["X", "sil", "Y"], [1], spans, 6)
    >>> b = RealignedUtterance("b", "b.flac", ["x", "y"], [1, 1], ["sil", "X", "Y"], [0], spans, 4)
    >>> stats = silence_statistics([a, b])
    >>> stats["interior_boundaries_with_sil"], stats["start_with_sil"], stats["frames"]
    (0.5, 0.5, 10)
    """
    n = len(utterances)
    interior = sum(sum(1 for b in u.silences if 0 < b < len(u.words)) for u in utterances)
    boundaries = sum(max(len(u.words) - 1, 0) for u in utterances)
    return {
        "utterances": n,
        "interior_sil_per_utterance": interior / n if n else float("nan"),
        "interior_boundaries_with_sil": interior / boundaries if boundaries else float("nan"),
        "start_with_sil": sum(0 in u.silences for u in utterances) / n if n else float("nan"),
        "end_with_sil": sum(len(u.words) in u.silences for u in utterances) / n if n else float("nan"),
        "other_pronunciations": (sum(v > 0 for u in utterances for v in u.pronunciations)
                                 / max(sum(len(u.words) for u in utterances), 1)),
        "fallbacks": sum(u.fallback for u in utterances),
        "frames": sum(u.num_frames for u in utterances),
    }
