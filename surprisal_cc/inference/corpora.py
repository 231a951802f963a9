"""The labelled corpora ``evaluate`` scores (:func:`surprisal_cc.inference.evaluation.evaluate_corpus`),
each read as (utterance id, audio path, reference phones): a LibriSpeech-format folder of one subset
(CMUdict labels by the model's training label policy, or MFA labels), a TIMIT folder, a Kaldi data folder
(``wav.scp`` and ``text``, labelled by the lexicon) or a manifest CSV. A folder holding several
LibriSpeech subsets (``LibriSpeech/`` with ``dev-clean-2/`` and ``train-clean-5/``) is refused, naming
them, rather than scored as one corpus; a manifest CSV listing their utterances scores them together.

Example
-------
>>> import tempfile
>>> from pathlib import Path
>>> from surprisal_cc.inference.asr import ConditionalASR
>>> asr = ConditionalASR.untrained(["AH", "B", "sil"])
>>> with tempfile.TemporaryDirectory() as tmp:
...     manifest = Path(tmp) / "test.csv"
...     _ = manifest.write_text("ID,wav,phn\\nu1,u1.flac,sil AH B sil\\n")
...     [(utt, wav, phones)], source = corpus_items(manifest, asr)
>>> utt, Path(wav).name, phones
('u1', 'u1.flac', ['sil', 'AH', 'B', 'sil'])
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from surprisal_cc.data.audio import MAX_LISTED
from surprisal_cc.data.errors import DataPreparationError, collect_or_raise_label_problems
from surprisal_cc.data.kaldi import is_kaldi_data_folder, read_kaldi_data_folder
from surprisal_cc.data.manifest import list_files, read_manifest
from surprisal_cc.errors import ConfigurationError

PathLike = Union[str, os.PathLike]
Item = Tuple[str, str, List[str]]  # utterance id, audio path, reference phones

__all__ = ["Item", "corpus_items", "check_pronunciation_words", "pronunciation_references"]

DATA_KINDS = ("DATA must be a LibriSpeech-format folder, a TIMIT folder, a Kaldi data folder (wav.scp, text) "
              "or a manifest CSV (ID, wav, phn or wrd columns)")


def corpus_items(data: PathLike, asr: Any, mfa_labels: Optional[PathLike] = None,
                 g2p: Optional[str] = None, timit_split: Optional[str] = None,
                 problems: Optional[List[str]] = None,
                 words: Optional[Dict[str, List[str]]] = None) -> Tuple[List[Item], str]:
    """(utterance id, audio path, reference phones) of a corpus, and where the labels came from.

    Arguments
    ---------
    data : str or path
        A LibriSpeech-format folder of one subset, a TIMIT folder, a Kaldi data folder or a manifest CSV
        (see :func:`~surprisal_cc.inference.evaluation.evaluate_corpus`).
    asr : ~surprisal_cc.inference.asr.ConditionalASR
        The model: its label set and its training label policy.
    mfa_labels : str or path, optional
        MFA labels of a LibriSpeech-format folder: the CSV export or a folder of TextGrid files.
    g2p : str, optional
        G2P policy for out-of-vocabulary words (default: the model's).
    timit_split : str, optional
        ``"test"`` (None: the default), ``"valid"`` or ``"train"``: a TIMIT folder's split. Given for
        another corpus, a :class:`ConfigurationError`.
    problems : list, optional
        Given a list, utterances of a LibriSpeech-format or Kaldi data folder without a usable
        transcript (or MFA labels), and manifest rows with an empty label, are left out, with one
        ``"file: problem"`` line each appended to it, instead of failing.
    words : dict, optional
        Given a dict, each utterance's words are put in it where the corpus has them (LibriSpeech-format
        and Kaldi data folders, manifests with a ``wrd`` column), for :func:`pronunciation_references`.

    Returns
    -------
    items : list of (str, str, list of str)
        Utterance id, audio path and reference phones of each utterance.
    source : str
        Where the labels came from, in words.

    Raises
    ------
    DataPreparationError
        When the corpus cannot be read, a folder holds several LibriSpeech subsets, an utterance id occurs
        twice or its labels are not the model's label set.
    ConfigurationError
        For ``mfa_labels`` with a corpus other than a LibriSpeech-format folder, ``timit_split`` with
        one other than a TIMIT folder.
    """
    path = Path(data)
    if not path.exists():
        raise DataPreparationError(f"{path}: no such file or folder")
    if timit_split is not None and not (path.is_dir() and not is_kaldi_data_folder(path) and _is_timit(path)):
        raise ConfigurationError(f"{path}: not a TIMIT folder, which alone has splits: leave out --timit-split")
    if path.is_file():
        if path.suffix.lower() != ".csv":
            raise DataPreparationError(f"{path}: {DATA_KINDS}")
        _refuse_mfa_labels(path, mfa_labels, "a manifest is labelled by its phn (or wrd) column")
        items, source = _manifest_items(path, asr, g2p, words, problems)
    elif is_kaldi_data_folder(path):
        _refuse_mfa_labels(path, mfa_labels, "a Kaldi data folder is labelled from its text by the lexicon")
        items, source = _kaldi_items(path, asr, g2p, problems, words)
    elif _is_timit(path):
        _refuse_mfa_labels(path, mfa_labels, "a TIMIT folder is labelled by its .PHN files")
        split = timit_split or "test"
        items, source = _timit_items(path, split, problems), f"TIMIT .PHN folded to 39 ({split})"
    elif not list_files(path, (".flac",)):  # links to speaker or chapter folders followed, as the reader does
        raise DataPreparationError(f"{path}: no .flac file, wav.scp or TIMIT TRAIN/TEST folder in it: {DATA_KINDS} "
                                   "(any other layout: write a manifest CSV)")
    else:
        items, source = _librispeech_items(path, asr, mfa_labels, g2p, problems, words)
    repeated = sorted(u for u, n in Counter(u for u, _, _ in items).items() if n > 1)
    if repeated:
        raise DataPreparationError(f"{data}: utterance id(s) {', '.join(repeated[:MAX_LISTED])} occur more than once: "
                                   "give each utterance its own id")
    allowed = [label for i, label in enumerate(asr.labels) if i != asr.beam_search.blank]
    from surprisal_cc.data.phones import validate_phones

    unknown = sorted({p for _, _, ref in items for p in ref} - set(allowed))
    if unknown:
        bad = next(u for u, _, ref in items if set(ref) & set(unknown))
        try:
            validate_phones(unknown, allowed, f"utterance {bad}")
        except DataPreparationError as err:
            raise DataPreparationError(f"{data}: the labels ({source}) are not the model's label set: {err}") from None
    return items, source


def pronunciation_references(data: PathLike, items: Sequence[Item], words: Mapping[str, Sequence[str]],
                             mfa_labels: Optional[PathLike] = None,
                             g2p: str = "spn") -> Dict[str, Optional[Tuple[List[str], List[List[int]]]]]:
    """Per utterance of ``items`` (:func:`corpus_items`), its reference as a token graph in which
    each word may take any of its CMUdict pronunciations (and, with MFA labels, the one it was
    labelled with), each ``sil`` staying where it is; None where the labels are not the words' phones.

    Arguments
    ---------
    data : str or path
        The corpus of ``items``: a LibriSpeech-format folder, a Kaldi data folder or a manifest CSV
        with a ``wrd`` column.
    items : sequence of (str, str, list of str)
        Utterance id, audio path and reference phones.
    words : mapping
        Utterance id -> its words, as :func:`corpus_items` gave them.
    mfa_labels : str or path, optional
        The MFA labels (CSV export or TextGrid folder) the references came from: their words'
        phones are read from them.
    g2p : str
        OOV policy of the lexicon.

    Returns
    -------
    dict
        Utterance id -> (tokens, predecessor lists) as for :func:`surprisal_cc.model.ctc.pronunciation_graph`, or None.

    Raises
    ------
    ConfigurationError
        For a TIMIT folder (hand-labelled phones, not words' pronunciations) or a manifest without words.
    """
    from surprisal_cc.model.ctc import lexicon_pronunciations, pronunciation_graph, spoken_pronunciation_graph
    from surprisal_cc.data.mfa import load_mfa_word_phones

    check_pronunciation_words(data, items, words)
    path = Path(data)
    pronounce = lexicon_pronunciations(g2p, (w for utt, _, _ in items for w in words[utt]))
    if mfa_labels is not None and not path.is_file():
        spoken = load_mfa_word_phones(mfa_labels)
        return {utt: spoken_pronunciation_graph(ref, spoken[utt], pronounce) if utt in spoken else None
                for utt, _, ref in items}
    return {utt: pronunciation_graph(ref, words[utt], pronounce) for utt, _, ref in items}


def check_pronunciation_words(data: PathLike, items: Sequence[Item], words: Mapping[str, Sequence[str]]) -> None:
    """Refuse, before any audio is read, a corpus whose utterances :func:`pronunciation_references` cannot
    score against any pronunciation: a TIMIT folder, or one without the words of every utterance of
    ``items`` (``words``, as :func:`corpus_items` gave them), with a :class:`ConfigurationError` naming ``data``.

    Example
    -------
    >>> check_pronunciation_words("test.csv", [("u1", "u1.flac", ["AH"])], {"u1": ["A"]})
    >>> check_pronunciation_words("test.csv", [("u1", "u1.flac", ["AH"])], {})
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.ConfigurationError: test.csv: scoring against any pronunciation needs the words (a wrd column)
    """
    path = Path(data)
    if path.is_dir() and not is_kaldi_data_folder(path) and _is_timit(path):
        raise ConfigurationError(f"{path}: TIMIT's labels are hand-labelled phones, not words' pronunciations: "
                                 "scoring against any pronunciation is for LibriSpeech folders and manifests")
    if any(utt not in words for utt, _, _ in items):
        raise ConfigurationError(f"{path}: scoring against any pronunciation needs the words (a wrd column)")


def _refuse_mfa_labels(path: Path, mfa_labels: Optional[PathLike], labelled_by: str) -> None:
    """Raise where MFA labels are given for a corpus (``path``) they do not label."""
    if mfa_labels is not None:
        raise ConfigurationError(f"{path}: MFA labels are read for LibriSpeech-format folders; {labelled_by}, "
                                 "so leave out --mfa-labels")


def _is_timit(path: Path) -> bool:
    """Whether ``path`` (or ``path/TIMIT``) has a TRAIN or TEST folder, in any letter case."""
    from surprisal_cc.data.timit import find_child

    return any(find_child(root, part) is not None for root in (path, path / "TIMIT") for part in ("TRAIN", "TEST"))


def _manifest_items(path: Path, asr: Any, g2p: Optional[str], words: Optional[Dict[str, List[str]]] = None,
                    problems: Optional[List[str]] = None) -> Tuple[List[Item], str]:
    """Items of a manifest CSV (``ID``, ``wav`` and ``phn`` columns, or SpeechBrain's ``wrd``
    labelled by the lexicon as the model's training labels were), and the label source
    (:func:`~surprisal_cc.data.manifest.read_manifest` resolves the ``wav`` paths; ``words``,
    ``problems``: see :func:`corpus_items`)."""
    columns, rows = read_manifest(path, ("ID", "wav", ("phn", "wrd")),
                                  "expected ID, wav and phn as the recipes write, or wrd as SpeechBrain's "
                                  "LibriSpeech recipes write")
    label = "phn" if "phn" in columns else "wrd"
    if not rows:
        raise DataPreparationError(f"{path}: the manifest has no rows")
    labelled, empty = [], []
    for r in rows:
        if (r[label] or "").split():
            labelled.append(r)
        else:
            empty.append(f"{path}: {r['ID']}: empty {label}")
    collect_or_raise_label_problems(empty, len(rows), f"{len(empty)} of {len(rows)} utterances of {path} have no "
                                    f"{label}; pass --skip-bad (skip_bad=True) to score the others", problems,
                                    MAX_LISTED)
    rows = labelled
    if not rows:
        raise DataPreparationError(f"{path}: no utterance with a {label}")
    if words is not None and "wrd" in columns:
        words.update((r["ID"], (r["wrd"] or "").split()) for r in rows)
    if label == "phn":
        return [(r["ID"], r["wav"], r["phn"].split()) for r in rows], f"manifest {path}"
    items, policy = _lexicon_items(asr, g2p, [(r["ID"], r["wav"], r["wrd"].upper().split()) for r in rows])
    return items, f"manifest {path}, wrd by the lexicon ({policy})"


def _kaldi_items(path: Path, asr: Any, g2p: Optional[str], problems: Optional[List[str]] = None,
                 words: Optional[Dict[str, List[str]]] = None) -> Tuple[List[Item], str]:
    """Items of a Kaldi data folder, its ``text`` labelled by the lexicon as the model's training
    labels were (``problems``, ``words``: see :func:`corpus_items`), and the label source."""
    utts = read_kaldi_data_folder(path, problems)
    if words is not None:
        words.update((u.id, list(u.words)) for u in utts)
    items, policy = _lexicon_items(asr, g2p, utts)
    return items, f"Kaldi text {path / 'text'} by the lexicon ({policy})"


def training_g2p(config: Mapping[str, Any], g2p: Optional[str] = None) -> str:
    """The G2P policy that labels words for a model: ``g2p`` where given, else the one its training used
    (``model.json``'s ``label_policy``), else ``spn`` (out-of-vocabulary words as spoken noise).

    Example
    -------
    >>> training_g2p({"label_policy": {"g2p": "skip"}}), training_g2p({}), training_g2p({}, "skip")
    ('skip', 'spn', 'skip')
    """
    return g2p or (config.get("label_policy") or {}).get("g2p") or "spn"


def _lexicon_items(asr: Any, g2p: Optional[str],
                   utterances: Sequence[Tuple[str, Any, Sequence[str]]]) -> Tuple[List[Item], str]:
    """Items of (utterance id, audio path, words) labelled by the lexicon with the model's training
    label policy (``g2p`` overrides its G2P), OOV words reported once; and the policy in words."""
    from surprisal_cc.data.lexicon import Lexicon

    policy = asr.config.get("label_policy") or {}
    g2p = training_g2p(asr.config, g2p)
    boundary = bool(policy.get("add_boundary_silence", True))
    try:
        lexicon = Lexicon(g2p=g2p)
    except ValueError as err:
        raise ConfigurationError(str(err)) from None
    lexicon.prefetch(w for _, _, words in utterances for w in words)
    items = [(utt, str(wav), lexicon.words_to_phones(list(words), boundary, utt)) for utt, wav, words in utterances]
    lexicon.warn_oov_summary()
    return items, f"CMUdict, g2p={g2p}{', boundary sil' if boundary else ''}"


def _timit_items(path: Path, split: str, problems: Optional[List[str]] = None) -> List[Item]:
    """Items of one TIMIT split, labels folded to 39 phones, sorted by utterance id (a file without
    its ``.PHN``: ``problems``, see :func:`corpus_items`)."""
    from surprisal_cc.data.timit import find_sibling, read_folded_phones, scan_timit, timit_split

    if split not in ("test", "valid", "train"):
        raise ConfigurationError(f"timit_split must be test, valid or train, got {split!r}")
    items, found, total = [], [], 0
    for u in scan_timit(path):
        if timit_split(u) != split:
            continue
        total += 1
        phn = find_sibling(u.wav, ".phn")
        if phn is None:
            found.append(f"{u.wav}: no .PHN file")
            continue
        items.append((u.id, str(u.wav), read_folded_phones(phn, u.id)))
    collect_or_raise_label_problems(found, total, f"{len(found)} of {total} utterances of the TIMIT {split} split "
                                    "have no .PHN file; pass --skip-bad (skip_bad=True) to score the others",
                                    problems, MAX_LISTED)
    if not items:
        raise DataPreparationError(f"{path}: no utterance of the TIMIT {split} split")
    return sorted(items)


def _librispeech_items(path: Path, asr: Any, mfa_labels: Optional[PathLike], g2p: Optional[str],
                       problems: Optional[List[str]] = None,
                       words: Optional[Dict[str, List[str]]] = None) -> Tuple[List[Item], str]:
    """Items of a LibriSpeech-format folder with MFA or lexicon labels, and the label source
    (``problems``, ``words``: see :func:`corpus_items`)."""
    from surprisal_cc.data.librispeech import scan_subset
    from surprisal_cc.data.mfa import load_mfa_labels

    found: List[str] = []
    utts = sorted(scan_subset(path, problems=found), key=lambda u: u.id)
    labels = load_mfa_labels(mfa_labels) if mfa_labels is not None else None
    if labels is not None:
        found += [f"{u.wav}: no labels for {u.id} in {mfa_labels}" for u in utts if u.id not in labels]
        utts = [u for u in utts if u.id in labels]
    total = len(utts) + len(found)
    hint = "leave out --mfa-labels to use lexicon labels, or " if labels is not None else ""
    collect_or_raise_label_problems(found, total, f"{len(found)} of {total} utterances have no usable labels; {hint}"
                                    "pass --skip-bad (skip_bad=True) to score the others", problems, MAX_LISTED)
    if words is not None:
        words.update((u.id, list(u.words)) for u in utts)
    if labels is not None:
        return [(u.id, str(u.wav), list(labels[u.id])) for u in utts], f"MFA {mfa_labels}"
    items, policy = _lexicon_items(asr, g2p, [(u.id, u.wav, u.words) for u in utts])
    return items, f"lexicon ({policy})"
