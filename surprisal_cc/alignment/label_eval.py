"""Labels scored against reference labels (MFA's forced alignments): the word boundaries given a
``sil`` (precision, recall and F1), how often words with several pronunciations get the reference's,
and the PER of whole label sequences (the lexicon's labels of a subset against MFA's:
:func:`lexicon_vs_mfa_per`); with the reference's place beside a corpus and its boundary silences
read from the MFA export CSV or TextGrids.

Example
-------
>>> hyp = {"u": (3, {0, 1, 3})}            # 3 words; sil at the start, after the first word, at the end
>>> ref = {"u": (3, {0, 2, 3})}
>>> silence_precision_recall(hyp, ref)["precision"], silence_precision_recall(hyp, ref, interior_only=False)["f1"]
(0.0, 0.6666666666666666)
>>> label_error_rate({"u": ["sil", "AH", "B", "sil"]}, {"u": ["sil", "AH", "D", "sil"]})["per"]
25.0
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Dict, Mapping, Optional, Sequence, Set, Tuple, Union


def find_mfa_reference(wav: Union[str, Path]) -> Optional[Path]:
    """The MFA labels (export CSV or TextGrid folder) beside the corpus of ``wav``, an audio file
    ``<subset>/<speaker>/<chapter>/<utterance>.flac``: :func:`surprisal_cc.data.mfa.find_mfa_labels`
    of its subset folder.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     wav = Path(tmp, "LibriSpeech", "dev-clean-2", "84", "121123", "84-121123-0000.flac")
    ...     before = find_mfa_reference(wav)
    ...     Path(tmp, "phone_labels").mkdir()
    ...     _ = Path(tmp, "phone_labels", "dev-clean-2_mfa.csv").write_text("")
    ...     after = find_mfa_reference(wav).relative_to(tmp).as_posix()
    >>> before, after
    (None, 'phone_labels/dev-clean-2_mfa.csv')
    """
    from surprisal_cc.data.mfa import find_mfa_labels

    return find_mfa_labels(Path(os.path.abspath(wav)).parents[2])


def read_boundary_silences(path) -> Dict[str, Tuple[int, Set[int]]]:
    """``{utterance id: (number of words, boundaries with sil)}`` from an MFA export CSV or a folder
    of MFA TextGrids (:func:`surprisal_cc.data.mfa.textgrid_boundary_silences`).

    Boundary b lies before word b (0: utterance start, number of words: its end). Pauses between
    words come from the ``words`` column (``''`` marks a silence); the two ends from the labels
    themselves (``phonemes_39`` starting or ending with ``sil``), as the export's ``words`` column
    has a final ``''`` even where its labels end without ``sil``.

    Arguments
    ---------
    path : str or path
        An MFA export CSV (or one written by :func:`surprisal_cc.data.mfa.write_alignment_csv`) or
        a folder of TextGrids.

    Returns
    -------
    dict of str to (int, set of int)
        Per utterance id (the audio file's name without extension), the number of words and the
        boundaries with ``sil``.

    Example
    -------
    A pause after "a", none at the end although the ``words`` column ends with ``''``:

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp, "dev-clean-2_mfa.csv")
    ...     _ = path.write_text("path,words,phonemes_39\\n"
    ...                         "dev-clean-2/84/121123/u1.flac,\\"['', 'a', '', 'be', '']\\",sil AH sil B\\n")
    ...     silences = read_boundary_silences(path)
    >>> silences
    {'u1': (2, {0, 1})}
    """
    from surprisal_cc.data.mfa import (boundary_silences, parse_textgrid, read_mfa_export, textgrid_boundary_silences,
                           textgrid_files)

    if Path(path).is_dir():
        return {tg.stem: textgrid_boundary_silences(parse_textgrid(tg.read_text(encoding="utf-8")))
                for tg in textgrid_files(path)}
    return {row.utt_id: boundary_silences([bool(item) for item in row.words], row.phonemes_39)
            for row in read_mfa_export(path, ("words", "phonemes_39"), "boundary silences")}


def pronunciation_agreement(hyp: Mapping[str, Sequence[Tuple[str, Sequence[str]]]],
                            ref: Mapping[str, Sequence[Tuple[str, Sequence[str]]]],
                            pronunciations: Callable[[str], Sequence[Sequence[str]]]) -> Dict[str, float]:
    """How often the pronunciations of words with several agree with a reference's (MFA's).

    Counted over the words that have more than one pronunciation, in the utterances whose word
    sequences are the same on both sides (:func:`surprisal_cc.data.mfa.read_word_phones`).

    Arguments
    ---------
    hyp, ref : mapping of str to sequence of (word, phones)
        Per utterance, each word with its phones.
    pronunciations : callable
        A word's pronunciations, the lexicon's own first (e.g. ``Lexicon.pronunciations``).

    Returns
    -------
    dict
        ``words`` (count), ``reference_other`` (fraction whose reference phones are not the first
        pronunciation), ``agreement_first`` (fraction where the first pronunciation is the
        reference's), ``agreement`` (fraction where ``hyp``'s phones are the reference's) and
        ``utterances`` (compared).

    Example
    -------
    >>> prons = {"the": [["DH", "AH"], ["DH", "IY"]], "cat": [["K", "AE", "T"]]}.get
    >>> ref = {"u": [("the", ("DH", "IY")), ("cat", ("K", "AE", "T")), ("the", ("DH", "AH"))]}
    >>> hyp = {"u": [("the", ("DH", "IY")), ("cat", ("K", "AE", "T")), ("the", ("DH", "IY"))]}
    >>> stats = pronunciation_agreement(hyp, ref, prons)
    >>> stats["words"], stats["reference_other"], stats["agreement_first"], stats["agreement"]
    (2, 0.5, 0.5, 0.5)
    """
    counts = {"words": 0, "reference_other": 0, "agreement_first": 0, "agreement": 0, "utterances": 0}
    for utt in sorted(set(hyp) & set(ref)):
        if [w for w, _ in hyp[utt]] != [w for w, _ in ref[utt]]:
            continue
        counts["utterances"] += 1
        for (word, hyp_phones), (_, ref_phones) in zip(hyp[utt], ref[utt]):
            prons = [tuple(p) for p in pronunciations(word) or []]
            if len(prons) < 2:
                continue
            counts["words"] += 1
            counts["reference_other"] += tuple(ref_phones) != prons[0]
            counts["agreement_first"] += tuple(ref_phones) == prons[0]
            counts["agreement"] += tuple(ref_phones) == tuple(hyp_phones)
    n = max(counts["words"], 1)
    return {key: (value / n if key not in ("words", "utterances") else value) for key, value in counts.items()}


def silence_precision_recall(hyp: Mapping[str, Tuple[int, Set[int]]], ref: Mapping[str, Tuple[int, Set[int]]],
                             interior_only: bool = True) -> Dict[str, float]:
    """Precision and recall of the word boundaries given ``sil`` in ``hyp`` against ``ref``.

    Both map utterance ids to ``(number of words, boundaries with sil)`` (see
    :func:`read_boundary_silences`); utterances in both with the same number of words are scored,
    over the interior boundaries only (``interior_only``) or the two ends too.

    Arguments
    ---------
    hyp : mapping of str to (int, set of int)
        Hypothesised silences per utterance.
    ref : mapping of str to (int, set of int)
        Reference silences per utterance.
    interior_only : bool
        Score only the boundaries between words (True) or the two ends too.

    Returns
    -------
    dict
        ``precision``, ``recall`` and ``f1`` (nan when undefined), the counts
        ``true_positives``, ``false_positives``, ``false_negatives``, ``boundaries`` (scored),
        ``utterances`` (scored) and ``unmatched_utterances`` (hyp utterances not scored).

    Example
    -------
    >>> scores = silence_precision_recall({"u": (3, {0, 1, 3})}, {"u": (3, {2, 1})})
    >>> scores["precision"], scores["recall"], scores["boundaries"]
    (1.0, 0.5, 2)
    """
    tp = fp = fn = boundaries = scored = unmatched = 0
    for utt, (n_words, hyp_sil) in hyp.items():
        if utt not in ref or ref[utt][0] != n_words:
            unmatched += 1
            continue
        keep = set(range(1, n_words)) if interior_only else set(range(n_words + 1))
        h, r = hyp_sil & keep, ref[utt][1] & keep
        tp, fp, fn = tp + len(h & r), fp + len(h - r), fn + len(r - h)
        boundaries += len(keep)
        scored += 1
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")
    return {"precision": precision, "recall": recall, "f1": f1, "true_positives": tp, "false_positives": fp,
            "false_negatives": fn, "boundaries": boundaries, "utterances": scored, "unmatched_utterances": unmatched}


def label_error_rate(hyp: Mapping[str, Sequence[str]], ref: Mapping[str, Sequence[str]], merge_sil: bool = True,
                     ignore_sil: bool = False) -> Dict[str, float]:
    """Corpus PER of label sequences ``hyp`` against ``ref`` over the utterances both have:
    ``(S + D + I) / N`` in percent, the edit counts summed over utterances
    (:class:`~surprisal_cc.decoding.metrics.ErrorRate`, as the recipes score), so it can exceed 100 with
    many insertions.

    Arguments
    ---------
    hyp : mapping of str to sequence of str
        Hypothesised labels per utterance id.
    ref : mapping of str to sequence of str
        Reference labels per utterance id.
    merge_sil : bool
        Merge repeated ``sil`` on both sides first, as in the recipes' PER.
    ignore_sil : bool
        Remove every ``sil`` on both sides first (pauses between words cannot be predicted from
        text, so this isolates pronunciation differences).

    Returns
    -------
    dict
        ``per`` (percent), ``substitutions``, ``deletions``, ``insertions``, ``ref_phones`` (N) and
        ``utterances`` (scored); ValueError where no utterance is on both sides.

    Example
    -------
    >>> rates = label_error_rate({"u": ["sil", "AH", "B", "sil", "sil"]}, {"u": ["sil", "AH", "D", "sil"]})
    >>> rates["per"], rates["substitutions"], rates["ref_phones"]
    (25.0, 1, 4)
    >>> label_error_rate({"u": ["sil", "AH", "B", "sil", "sil"]}, {"u": ["sil", "AH", "D", "sil"]},
    ...                  merge_sil=False)["per"]
    50.0
    """
    from surprisal_cc.data.phones import SILENCE
    from surprisal_cc.decoding.metrics import ErrorRate

    def prepared(labels: Sequence[str]) -> list:
        return [label for label in labels if label != SILENCE] if ignore_sil else list(labels)

    ids = sorted(set(hyp) & set(ref))
    if not ids:
        raise ValueError(f"no utterance has both labels to score ({len(hyp)} hypotheses, {len(ref)} references)")
    rate = ErrorRate(merge_sil=merge_sil and not ignore_sil, sil_token=SILENCE)
    rate.append(ids, [prepared(hyp[u]) for u in ids], [prepared(ref[u]) for u in ids])
    summary = rate.summarize()
    return {"per": summary["error_rate"], "substitutions": summary["substitutions"],
            "deletions": summary["deletions"], "insertions": summary["insertions"],
            "ref_phones": summary["num_ref_tokens"], "utterances": len(ids)}


def lexicon_vs_mfa_per(
    subset_dir: Union[str, Path],
    mfa_labels: Union[str, Path],
    g2p: str = "spn",
    add_boundary_silence: bool = True,
    ignore_sil: bool = False,
) -> Dict[str, float]:
    """Corpus PER of the lexicon's labels of a LibriSpeech subset against its MFA labels
    (:func:`label_error_rate`, MFA's phones as reference, repeated ``sil`` merged), and
    ``oov_tokens``: the words the lexicon spelled with ``g2p``.

    Arguments
    ---------
    subset_dir : str or path
        A LibriSpeech-format folder (its ``*.trans.txt`` are read, not its audio).
    mfa_labels : str or path
        MFA's labels of every utterance of it: an export CSV or a folder of TextGrids.
    g2p : str
        The lexicon's policy for words outside CMUdict (:class:`surprisal_cc.data.Lexicon`).
    add_boundary_silence : bool
        ``sil`` at both ends of the lexicon's labels.
    ignore_sil : bool
        Leave every ``sil`` out of both sides.

    Example (the README's one-liner)::

        python -c "from surprisal_cc.alignment.label_eval import lexicon_vs_mfa_per as f; print(f(
            '../shared/data/LibriSpeech/dev-clean-2',
            '../shared/data/phone_labels/dev-clean-2_mfa.csv', g2p='spn'))"
    """
    from surprisal_cc.data.errors import DataPreparationError
    from surprisal_cc.data.lexicon import Lexicon
    from surprisal_cc.data.librispeech import read_librispeech_transcripts
    from surprisal_cc.data.mfa import load_mfa_labels

    refs = load_mfa_labels(mfa_labels)
    transcripts = read_librispeech_transcripts(subset_dir)
    missing = sorted(set(transcripts) - set(refs))
    if missing:
        raise DataPreparationError(f"{mfa_labels} lacks {len(missing)} utterance(s), e.g. {missing[:5]}")
    lexicon = Lexicon(g2p=g2p)
    lexicon.prefetch(w for words in transcripts.values() for w in words)
    hyps = {u: lexicon.words_to_phones(transcripts[u], add_boundary_silence, utt_id=u) for u in sorted(transcripts)}
    return {**label_error_rate(hyps, refs, ignore_sil=ignore_sil), "oov_tokens": sum(lexicon.oov_counts.values())}
