"""LibriSpeech / Mini-LibriSpeech preparation (SpeechBrain CSV manifests).

Manifest columns: ``ID,duration,wav,spk_id,wrd,phn`` (audio-only manifests for APC pretraining:
``ID,duration,wav,spk_id``); ``ID`` is the LibriSpeech utterance id, ``wav`` an absolute path,
``wrd`` the upper-case transcript, ``phn`` space-separated labels over ``LIBRISPEECH_PHONES``.
"""
from __future__ import annotations

import os
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from surprisal_cc.data.audio import MAX_LISTED, TARGET_SAMPLE_RATE, AudioInfo, check_audio_files
from surprisal_cc.data.download import MINI_LIBRISPEECH_MD5, MINI_TEST, MINI_TRAIN, download_mini_librispeech
from surprisal_cc.data.errors import DataPreparationError, DataPreparationWarning, first_listed
from surprisal_cc.data.lexicon import Lexicon
from surprisal_cc.data.manifest import (AUDIO_COLUMNS, LABELLED_COLUMNS, cached_prepare, list_files, read_text, refuse_empty_split,
                       write_manifest)
from surprisal_cc.data.mfa import find_mfa_labels, load_mfa_labels, textgrid_files
from surprisal_cc.data.phones import LIBRISPEECH_PHONES, validate_phones

PathLike = Union[str, os.PathLike]

SPLITS = ("train", "valid", "test")
# The labelled development split: LibriSpeech speakers in neither train-clean-5 nor dev-clean-2, with MFA
# TextGrids made the way dev-clean-2's labels were (docs/protocol.md), for choosing settings
# without reading the test set.
DEV_SPLIT, MFA_DEV = "dev", "mfa-dev"
DEFAULT_SEED = 1234
DEFAULT_VALID_SPEAKERS = 3


@dataclass(frozen=True)
class Utterance:
    id: str
    wav: Path
    spk_id: str
    words: Tuple[str, ...] = ()


# --------------------------------------------------------------------------- corpus reading
def find_subset(data_folder: PathLike, subset: str) -> Optional[Path]:
    """``data_folder/subset`` or ``data_folder/LibriSpeech/subset`` if it exists."""
    for cand in (Path(data_folder) / subset, Path(data_folder) / "LibriSpeech" / subset):
        if cand.is_dir():
            return cand.resolve()
    return None


def read_librispeech_transcripts(subset_dir: PathLike) -> Dict[str, List[str]]:
    """``{utterance id: [WORD, ...]}`` from every ``*.trans.txt`` under ``subset_dir``."""
    out: Dict[str, List[str]] = {}
    for trans in list_files(subset_dir, (".trans.txt",)):
        for line in read_text(trans, "save the transcripts as UTF-8").splitlines():
            if line.strip():
                utt, *words = line.split()
                if utt in out:
                    raise DataPreparationError(f"{trans}: utterance {utt} is transcribed twice")
                out[utt] = words
    return out


def _audio_files(subset_dir: Path) -> List[Path]:
    return list_files(subset_dir, (".flac",))


def subset_folders(audio_files: Iterable[Path]) -> List[Path]:
    """The LibriSpeech subset folders holding ``audio_files``, sorted: the folder above ``<speaker>/<chapter>/``
    of each file named ``<speaker>-<chapter>-<n>.flac`` (a file laid out otherwise names none).

    Example
    -------
    >>> files = [Path("LibriSpeech/dev-clean-2/84/121123/84-121123-0000.flac"),
    ...          Path("LibriSpeech/train-clean-5/19/198/19-198-0001.flac"), Path("loose/a.flac")]
    >>> [folder.name for folder in subset_folders(files)]
    ['dev-clean-2', 'train-clean-5']
    """
    found = set()
    for wav in audio_files:
        if len(wav.parents) > 2 and wav.name.split("-")[:2] == [wav.parent.parent.name, wav.parent.name]:
            found.add(wav.parents[2])
    return sorted(found)


def _refuse_several_subsets(folder: Path, audio_files: Sequence[Path]) -> None:
    """:class:`DataPreparationError` where the audio files under ``folder`` lie in more than one
    LibriSpeech subset (:func:`subset_folders`), which would be read as one corpus (training and test
    speech, say), naming them and the folder of one to give instead."""
    subsets = subset_folders(audio_files)
    if len(subsets) > 1:
        names = ", ".join(os.path.relpath(s, folder) for s in subsets[:MAX_LISTED])
        more = f" and {len(subsets) - MAX_LISTED} more" if len(subsets) > MAX_LISTED else ""
        raise DataPreparationError(f"{folder}: holds {len(subsets)} LibriSpeech subsets ({names}{more}), which "
                                   f"would be read as one corpus: give one subset's folder, such as {subsets[0]}")


def scan_subset(subset_dir: PathLike, with_transcripts: bool = True,
                problems: Optional[List[str]] = None) -> List[Utterance]:
    """Utterances of one subset; with transcripts, every audio file must have a non-empty one.

    Given a ``problems`` list, utterances without a usable transcript are left out and one
    ``"file: problem"`` line each is appended to it instead of raising. A folder holding several
    subsets (``LibriSpeech/`` with ``dev-clean-2/`` and ``train-clean-5/``) is refused, naming them.
    """
    subset_dir = Path(subset_dir)
    audio_files = _audio_files(subset_dir)
    _refuse_several_subsets(subset_dir, audio_files)
    transcripts = read_librispeech_transcripts(subset_dir) if with_transcripts else {}
    utts, found = [], []
    has_transcripts: Dict[Path, bool] = {}
    for wav in audio_files:
        utt_id = wav.name[: -len(".flac")]
        words = transcripts.get(utt_id)
        if with_transcripts and words is None:
            if wav.parent not in has_transcripts:
                has_transcripts[wav.parent] = any(wav.parent.glob("*.trans.txt"))
            found.append(f"{wav}: no transcript line for {utt_id} in its *.trans.txt"
                         if has_transcripts[wav.parent] else
                         f"{wav}: no transcript: its folder has no *.trans.txt (LibriSpeech's SPEAKER-CHAPTER.trans.txt)")
        elif with_transcripts and not words:
            found.append(f"{wav}: empty transcript for {utt_id}")
        else:
            utts.append(Utterance(utt_id, wav, utt_id.split("-")[0], tuple(words or ())))
    if found and problems is None:
        raise DataPreparationError(
            f"{len(found)} transcript problem(s) in {subset_dir}:\n  " + "\n  ".join(first_listed(found, MAX_LISTED))
        )
    if problems is not None:
        problems.extend(found)
    if not utts and not found:
        raise DataPreparationError(f"{subset_dir} contains no .flac files")
    return utts


def read_speaker_genders(librispeech_root: PathLike) -> Dict[str, str]:
    """``{speaker id: "F"|"M"}`` from ``SPEAKERS.TXT`` (empty dict if absent)."""
    path = Path(librispeech_root) / "SPEAKERS.TXT"
    genders: Dict[str, str] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            fields = [f.strip() for f in line.split("|")]
            if not line.startswith(";") and len(fields) >= 2:
                genders[fields[0]] = fields[1].upper()
    return genders


def select_valid_speakers(
    speakers: Sequence[str], n: int, genders: Mapping[str, str], seed: int = DEFAULT_SEED
) -> List[str]:
    """Pick ``n`` held-out speakers: with gender info alternately F, M, F, ... (each gender list
    sorted then shuffled with ``random.Random(seed)``); otherwise a seeded sample.

    >>> select_valid_speakers(["1", "2", "3", "4"], 2, {"1": "F", "2": "M", "3": "F", "4": "M"})
    ['1', '4']
    """
    speakers = sorted(set(speakers))
    if not 0 < n < len(speakers):
        raise DataPreparationError(f"cannot hold out {n} of {len(speakers)} speakers for validation")
    rng = random.Random(seed)
    if not genders or any(s not in genders for s in speakers):
        return sorted(rng.sample(speakers, n))
    pools = {g: [s for s in speakers if genders[s] == g] for g in ("F", "M")}
    for pool in pools.values():
        rng.shuffle(pool)
    chosen: List[str] = []
    order = ["F", "M"]
    while len(chosen) < n:
        g = order[len(chosen) % 2]
        pool = pools[g] or pools[order[(len(chosen) + 1) % 2]]
        chosen.append(pool.pop(0))
    return sorted(chosen)


# --------------------------------------------------------------------------- the subsets' folders (downloaded where asked)
def _folders(data_folder: Union[PathLike, Sequence[PathLike]]) -> List[Path]:
    if isinstance(data_folder, (str, os.PathLike)):
        return [Path(data_folder)]
    return [Path(f) for f in data_folder]


def locate_subsets(
    data_folder: Union[PathLike, Sequence[PathLike]], subsets: Sequence[str], download: bool,
    checksums: Optional[Mapping[str, str]] = None,
) -> Dict[str, Path]:
    """``{subset: folder}``: each subset's folder, from the first of ``data_folder`` that holds it
    (``<folder>/<subset>`` or ``<folder>/LibriSpeech/<subset>``); with ``download``, Mini-LibriSpeech
    subsets that none holds are downloaded into the first. Raises DataPreparationError otherwise."""
    folders = _folders(data_folder)

    def find(subset: str) -> Optional[Path]:
        return next((d for d in (find_subset(f, subset) for f in folders) if d is not None), None)

    missing = [s for s in subsets if find(s) is None]
    if missing and download:
        unknown = [s for s in missing if s not in MINI_LIBRISPEECH_MD5]
        if unknown:
            raise DataPreparationError(
                f"download=True only supports {sorted(MINI_LIBRISPEECH_MD5)}, not {unknown}"
            )
        download_mini_librispeech(folders[0], missing, checksums)
        missing = [s for s in subsets if find(s) is None]
    if missing:
        fetchable = not download and all(s in MINI_LIBRISPEECH_MD5 for s in missing)
        raise DataPreparationError(
            f"LibriSpeech subset folder(s) {missing} not found under "
            f"{[str(f.resolve()) for f in folders]} (looked for <data_folder>/<subset> and "
            "<data_folder>/LibriSpeech/<subset>); pass the right data_folder"
            + (", or download=True to fetch them from openslr.org" if fetchable else "")
        )
    return {s: find(s) for s in subsets}  # type: ignore[misc]


# --------------------------------------------------------------------------- preparation
def _audio_rows(utts: Sequence[Utterance], infos: Mapping[str, AudioInfo]) -> List[dict]:
    return [
        {"ID": u.id, "duration": infos[str(u.wav)].duration, "wav": str(u.wav), "spk_id": u.spk_id,
         "wrd": " ".join(u.words)}
        for u in utts if str(u.wav) in infos
    ]


def _per_split(value: Union[str, Mapping[str, str]], splits: Sequence[str], name: str,
               choices: Sequence[str]) -> Dict[str, str]:
    """``value`` (one of ``choices``, or a dict of them by split) for each split of ``splits``; a dict may also
    name splits of :data:`SPLITS` that were not asked for (the recipe's dict when only the test split is).

    Example
    -------
    >>> _per_split({"train": "lexicon", "test": "mfa"}, ["train", "valid", "test"], "labels",
    ...            ("mfa", "lexicon"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    surprisal_cc.data.errors.DataPreparationError: labels has no entry for split(s) ['valid']: ...
    """
    if not isinstance(value, str):
        unknown = sorted(set(value) - {*SPLITS, *splits, DEV_SPLIT})
        if unknown:
            raise DataPreparationError(f"{name} names no split {unknown}: its keys are splits, "
                                       f"{list(dict.fromkeys([*SPLITS, *splits]))}")
        missing = [s for s in splits if s not in value]
        if missing:
            raise DataPreparationError(f"{name} has no entry for split(s) {missing}: give one of {list(choices)} "
                                       f"for each of {list(splits)}, or one for all")
    out = {s: value if isinstance(value, str) else value[s] for s in splits}
    bad = {s: v for s, v in out.items() if v not in choices}
    if bad:
        raise DataPreparationError(f"{name} must be one of {list(choices)} (or a per-split dict); got {bad}")
    return out


def prepare_mini_librispeech(
    data_folder: Union[PathLike, Sequence[PathLike]],
    save_folder: PathLike,
    labels: Union[str, Mapping[str, str]] = "mfa",
    mfa_labels: Union[None, PathLike, Mapping[str, PathLike]] = None,
    g2p: str = "spn",
    valid_speakers: Union[int, Sequence[str]] = DEFAULT_VALID_SPEAKERS,
    seed: int = DEFAULT_SEED,
    download: bool = False,
    skip_bad_audio: bool = False,
    add_boundary_silence: bool = True,
    splits: Sequence[str] = SPLITS,
    mfa_fallback: str = "error",
    checksums: Optional[Mapping[str, str]] = None,
    dev_subset: Optional[str] = None,
    sample_rate: int = TARGET_SAMPLE_RATE,
) -> Dict[str, Path]:
    """Write ``train.csv``, ``valid.csv``, ``test.csv`` (and ``dev.csv``) manifests for Mini-LibriSpeech.

    * train = ``train-clean-5`` minus the validation speakers; valid = those speakers (whole
      speakers, chosen from train-clean-5 only: ``valid_speakers`` ids, or that many speakers picked
      by :func:`select_valid_speakers` with ``seed``, gender-balanced via ``SPEAKERS.TXT``);
      test = ``dev-clean-2``.  Checkpoints must be selected on ``valid``, never on dev-clean-2.
    * ``dev_subset`` (e.g. ``"mfa-dev"``): a labelled development split ``dev`` with MFA labels (its
      ``phone_labels/<subset>/`` TextGrids by default), for choosing settings on labels made the way
      the test labels are. Where no ``data_folder`` holds it, a warning says so and the other
      splits are written.
    * ``labels``: ``"mfa"`` (forced-alignment phones) or ``"lexicon"`` (CMUdict + ``g2p`` OOV
      policy, ``sil`` at both ends if ``add_boundary_silence``), or a per-split dict such as
      ``{"train": "lexicon", "valid": "lexicon", "test": "mfa"}``.
    * ``mfa_labels``: CSV file or TextGrid folder for the ``splits`` asked for (not the dev split, which
      keeps its own), or a dict keyed by subset or split name; when ``None`` (or a split's entry is) the
      export ``phone_labels/<subset>_mfa.csv``, else the TextGrid folder ``phone_labels/<subset>/``, beside
      the subset's audio or in another data folder, is used if it exists. Realigned training labels
      (``recipes/MiniLibriSpeech/realign_labels.py``) come in this way: ``labels="mfa", mfa_labels={"train":
      csv, "valid": csv}``. An utterance without MFA labels in an "mfa" split raises, or with
      ``mfa_fallback="lexicon"`` gets lexicon labels and is reported in a warning; labels that name none of
      a split's utterances raise either way.
    * ``data_folder``: a folder holding the subsets (directly or under ``LibriSpeech/``), or a list
      of such folders searched in order (e.g. train-clean-5 and dev-clean-2 staged apart).
    * ``sample_rate``: the model's; files at another rate are named in a warning (they are resampled
      when read). It changes no manifest.
    * Idempotent: a repeated call with the same options and unchanged inputs returns at once.

    Returns ``{split: manifest path}`` for the requested ``splits``.

    Example: ``prepare_mini_librispeech("../shared/data", "results/data", splits=["test"])``.
    """
    _check_split_options(splits, mfa_fallback)
    splits = _with_dev_split(splits, data_folder, dev_subset)
    split_labels = _per_split(_with_dev_labels(labels, splits), splits, "labels", ("mfa", "lexicon"))
    split_subset = {s: {"test": MINI_TEST, DEV_SPLIT: dev_subset}.get(s, MINI_TRAIN) for s in splits}
    subset_dirs = locate_subsets(data_folder, sorted(set(split_subset.values())), download, checksums)
    librispeech_root = subset_dirs[MINI_TRAIN if MINI_TRAIN in subset_dirs else split_subset[splits[0]]].parent
    mfa_sources = _mfa_sources(split_labels, split_subset, subset_dirs, mfa_labels, mfa_fallback, _folders(data_folder))
    inputs = _input_files(subset_dirs, mfa_sources, librispeech_root)
    uses_lexicon = "lexicon" in split_labels.values() or mfa_fallback == "lexicon"
    options = {
        "labels": split_labels, "mfa_labels": {k: str(v) for k, v in mfa_sources.items()},
        "g2p": g2p if uses_lexicon else None, "valid_speakers": valid_speakers, "seed": seed,
        "skip_bad_audio": skip_bad_audio, "add_boundary_silence": add_boundary_silence,
        "splits": sorted(splits), "mfa_fallback": mfa_fallback,
        "subsets": {k: str(v) for k, v in subset_dirs.items()},
    }

    def build(save: Path) -> Dict[str, Path]:
        split_utts = _split_utterances(subset_dirs, split_subset, splits, valid_speakers, librispeech_root, seed)
        all_utts = [u for utts in split_utts.values() for u in utts]
        infos = check_audio_files([u.wav for u in all_utts], skip_bad_audio=skip_bad_audio, target_sr=sample_rate)

        lexicon = Lexicon(g2p=g2p) if uses_lexicon else None
        if lexicon is not None:
            lexicon.prefetch(w for u in all_utts for w in u.words)
        label_cache: Dict[Path, Dict[str, List[str]]] = {}
        fallback: List[str] = []
        out: Dict[str, Path] = {}
        for split in splits:
            rows = _audio_rows(split_utts[split], infos)
            refuse_empty_split(save / f"{split}.csv", split, rows)
            src = mfa_sources.get(split)
            if src and src not in label_cache:  # train and valid often share one source: read once
                label_cache[src] = load_mfa_labels(src)
            mfa = label_cache[src] if src else {}
            fallback += _label_rows(rows, split, split_labels[split], mfa, src, mfa_fallback, lexicon,
                                    add_boundary_silence)
            out[split] = write_manifest(save / f"{split}.csv", rows, LABELLED_COLUMNS)
        if fallback:
            warnings.warn(
                f"{len(fallback)} utterance(s) had no MFA labels and got lexicon labels "
                f"(mfa_fallback: lexicon), e.g. {fallback[:10]}",
                DataPreparationWarning, stacklevel=3,
            )
        if lexicon is not None:
            lexicon.warn_oov_summary()
        return out

    return cached_prepare(save_folder, "mini_librispeech_prepare", options, inputs, build)


def _check_split_options(splits: Sequence[str], mfa_fallback: str) -> None:
    """:class:`DataPreparationError` unless ``splits`` are some of :data:`SPLITS` and ``mfa_fallback`` is known."""
    bad_splits = set(splits) - set(SPLITS)
    if bad_splits or not splits:
        raise DataPreparationError(f"splits must be a non-empty subset of {SPLITS}, got {list(splits)}")
    if mfa_fallback not in ("error", "lexicon"):
        raise DataPreparationError(f"mfa_fallback must be 'error' or 'lexicon', got {mfa_fallback!r}")


def _with_dev_split(splits: Sequence[str], data_folder: Union[PathLike, Sequence[PathLike]],
                    dev_subset: Optional[str]) -> List[str]:
    """``splits`` and, when a data folder holds ``dev_subset``, the development split. The recipes' subset
    (:data:`MFA_DEV`) not found is a warning at :func:`prepare_mini_librispeech`'s caller, as it is not
    everywhere; any other (a misspelt name) is a :class:`DataPreparationError`."""
    splits = list(splits)
    if dev_subset:
        if any(find_subset(f, dev_subset) for f in _folders(data_folder)):
            splits.append(DEV_SPLIT)
        elif dev_subset != MFA_DEV:
            raise DataPreparationError(
                f"dev_subset {dev_subset!r} not found under {[str(f) for f in _folders(data_folder)]} (looked for "
                f"<folder>/{dev_subset} and <folder>/LibriSpeech/{dev_subset}): check its spelling (the recipes' "
                f"development split is {MFA_DEV}), or set dev_subset to null (--dev_subset=null) for none")
        else:
            warnings.warn(f"dev_subset {dev_subset!r} not found under {[str(f) for f in _folders(data_folder)]}: "
                          f"no development split (put its audio in LibriSpeech/{dev_subset}/ and its MFA TextGrids in "
                          f"phone_labels/{dev_subset}/ of one of those folders: docs/data.md; or set dev_subset to null, "
                          "--dev_subset=null)", DataPreparationWarning, stacklevel=3)
    return splits


def _with_dev_labels(labels: Union[str, Mapping[str, str]], splits: Sequence[str]) -> Union[str, Mapping[str, str]]:
    """``labels`` with MFA labels for the development split when it is among ``splits`` and ``labels`` names none
    (one kind for all, a string, is that of each other split of ``splits``).

    Example
    -------
    >>> _with_dev_labels("lexicon", ["test", DEV_SPLIT])
    {'test': 'lexicon', 'dev': 'mfa'}
    """
    if DEV_SPLIT in splits and not (isinstance(labels, Mapping) and DEV_SPLIT in labels):
        each = {s: labels for s in splits if s != DEV_SPLIT} if isinstance(labels, str) else labels
        return {**each, DEV_SPLIT: "mfa"}
    return labels


def _mfa_sources(split_labels: Mapping[str, str], split_subset: Mapping[str, str], subset_dirs: Mapping[str, Path],
                 mfa_labels: Union[None, PathLike, Mapping[str, PathLike]], mfa_fallback: str,
                 data_folders: Sequence[Path] = ()) -> Dict[str, Path]:
    """``{split: MFA labels file or folder}`` for the splits with MFA labels (see :func:`_mfa_source`)."""
    if isinstance(mfa_labels, Mapping):
        known = {*SPLITS, DEV_SPLIT, MINI_TRAIN, MINI_TEST, *split_subset, *split_subset.values()}
        unknown = sorted(set(mfa_labels) - known)
        if unknown:
            raise DataPreparationError(f"mfa_labels names no split or subset {unknown}: its keys are splits "
                                       f"{sorted({*SPLITS, *split_subset})} or their subsets "
                                       f"{sorted({MINI_TRAIN, MINI_TEST, *split_subset.values()})}")
    sources: Dict[str, Path] = {}
    for split, kind in split_labels.items():
        if kind == "mfa":
            src = _mfa_source(split, split_subset[split], subset_dirs, mfa_labels, mfa_fallback, data_folders)
            if src is not None:
                sources[split] = src
    return sources


def _mfa_source(split: str, subset: str, subset_dirs: Mapping[str, Path],
                mfa_labels: Union[None, PathLike, Mapping[str, PathLike]], mfa_fallback: str,
                data_folders: Sequence[Path] = ()) -> Optional[Path]:
    """The MFA labels of ``split`` (its subset's): as ``mfa_labels`` gives them, else the default
    ``phone_labels/`` beside the subset's audio, else in the first of the ``data_folders`` that has it
    (the audio and its labels may be staged apart); none found is an error unless ``mfa_fallback`` is
    lexicon. One source for all (not a dict) labels the splits asked for: the development split, which
    ``dev_subset`` adds, keeps its own unless a dict names it."""
    if isinstance(mfa_labels, Mapping):
        src = mfa_labels.get(split) or mfa_labels.get(subset)
    else:
        src = mfa_labels if split != DEV_SPLIT else None
    if src and not Path(src).exists():
        realigned = (" (realigned training labels: `make mini_librispeech` makes them, or recipes/MiniLibriSpeech/"
                     f"realign_labels.py MODEL_DIR {src} --pauses --corpus {subset}; docs/data.md)"
                     if split in ("train", "valid") else "")
        raise DataPreparationError(f"mfa_labels of split {split!r} ({subset}): {Path(src).resolve()} does not exist: "
                                   f"give MFA's CSV export or TextGrid folder{realigned}")
    candidates = (subset_dirs[subset], *(Path(folder) / "LibriSpeech" / subset for folder in data_folders))
    found = Path(src) if src else next(
        (labels for labels in map(lambda d: find_mfa_labels(d, subset), candidates) if labels is not None), None)
    src_path = found.resolve() if found is not None else None
    if src_path is None and mfa_fallback == "error":
        raise DataPreparationError(
            f"split {split!r} uses labels 'mfa' but no MFA labels were given for {subset} and neither "
            f"phone_labels/{subset}_mfa.csv nor the TextGrid folder phone_labels/{subset}/ is in any of the data "
            f"folders: set mfa_labels "
            f"(--mfa_labels=\"{{{split}: PATH}}\", a CSV or a TextGrid folder; docs/data.md says where to get "
            f"them), give the split lexicon labels (--labels=\"{{..., {split}: lexicon}}\") or set "
            "mfa_fallback to lexicon (--mfa_fallback=lexicon)"
        )
    return src_path


def _input_files(subset_dirs: Mapping[str, Path], mfa_sources: Mapping[str, Path],
                 librispeech_root: Path) -> List[Path]:
    """The files the manifests are made from (audio, transcripts, MFA labels, ``SPEAKERS.TXT``), by which
    :func:`cached_prepare` tells whether they changed."""
    inputs: List[Path] = []
    for subset_dir in subset_dirs.values():
        inputs += list_files(subset_dir, (".flac", ".trans.txt"))
    for src in set(mfa_sources.values()):
        inputs += textgrid_files(src) if src.is_dir() else [src]
    speakers_txt = librispeech_root / "SPEAKERS.TXT"
    if speakers_txt.is_file():
        inputs.append(speakers_txt)
    return inputs


def _split_utterances(subset_dirs: Mapping[str, Path], split_subset: Mapping[str, str], splits: Sequence[str],
                      valid_speakers: Union[int, Sequence[str]], librispeech_root: Path,
                      seed: int) -> Dict[str, List[Utterance]]:
    """``{split: utterances}``: test and dev their whole subsets, train and valid train-clean-5 divided
    by speaker (:func:`_held_out_speakers`)."""
    per_subset = {s: scan_subset(d) for s, d in subset_dirs.items()}
    split_utts: Dict[str, List[Utterance]] = {}
    for split in ("test", DEV_SPLIT):
        if split in splits:
            split_utts[split] = per_subset[split_subset[split]]
    if "train" in splits or "valid" in splits:
        train_utts = per_subset[MINI_TRAIN]
        held_out = _held_out_speakers(train_utts, valid_speakers, librispeech_root, seed)
        for split in ("train", "valid"):
            if split in splits:
                split_utts[split] = [
                    u for u in train_utts if (u.spk_id in held_out) == (split == "valid")
                ]
    return split_utts


def _held_out_speakers(train_utts: Sequence[Utterance], valid_speakers: Union[int, Sequence[str]],
                       librispeech_root: Path, seed: int) -> List[str]:
    """The validation speakers: ``valid_speakers`` ids (checked to be train-clean-5's), or that many
    chosen by :func:`select_valid_speakers`."""
    speakers = sorted({u.spk_id for u in train_utts})
    if isinstance(valid_speakers, int):
        return select_valid_speakers(speakers, valid_speakers, read_speaker_genders(librispeech_root), seed)
    held_out = sorted(str(s) for s in valid_speakers)
    unknown = sorted(set(held_out) - set(speakers))
    if unknown or not held_out:
        raise DataPreparationError(
            f"valid_speakers {unknown or held_out} are not speakers of {MINI_TRAIN}"
        )
    return held_out


def _label_rows(rows: List[dict], split: str, kind: str, mfa: Mapping[str, List[str]], src: Optional[Path],
                mfa_fallback: str, lexicon: Optional[Lexicon], add_boundary_silence: bool) -> List[str]:
    """Give each of one split's ``rows`` its ``phn``: MFA labels (``kind`` "mfa", from ``mfa``, read from
    ``src``) or lexicon ones; returns the ids of the rows that fell back to lexicon labels (``mfa_fallback``)."""
    if kind == "mfa" and src is not None and rows and not any(row["ID"] in mfa for row in rows):
        labelled = f"ids such as {next(iter(mfa))}" if mfa else "no utterance"
        raise DataPreparationError(
            f"split {split!r}: none of its {len(rows)} utterance ids (such as {rows[0]['ID']}) is in its MFA labels "
            f"{src}, which hold {labelled}: give the labels of this split's audio (mfa_labels, a dict naming "
            f"the split: --mfa_labels=\"{{{split}: PATH}}\")")
    missing, fallback = [], []
    for row in rows:
        words = row["wrd"].split()
        if kind == "mfa" and row["ID"] in mfa:
            phones = mfa[row["ID"]]
        elif kind == "mfa" and mfa_fallback == "error":
            missing.append(row["ID"])
            continue
        else:
            if kind == "mfa":
                fallback.append(row["ID"])
            assert lexicon is not None
            phones = lexicon.words_to_phones(words, add_boundary_silence, row["ID"])
            validate_phones(phones, LIBRISPEECH_PHONES, f"utterance {row['ID']}")
        row["phn"] = " ".join(phones)
    if missing:
        raise DataPreparationError(
            f"split {split!r}: {len(missing)} utterance(s) have no MFA labels in {src}: "
            f"{', '.join(missing[:20])}{' ...' if len(missing) > 20 else ''}; set mfa_fallback to "
            "lexicon (--mfa_fallback=lexicon) to give them lexicon labels, or use lexicon labels for the "
            "split (--labels)"
        )
    return fallback


def prepare_librispeech(
    data_folder: Union[PathLike, Sequence[PathLike]],
    save_folder: PathLike,
    subsets: Sequence[str] = (MINI_TRAIN,),
    valid_fraction: float = 0.05,
    valid_utterances: Optional[int] = None,
    valid_by: str = "speaker",
    seed: int = DEFAULT_SEED,
    skip_bad_audio: bool = False,
    download: bool = False,
    extra_train_subsets: Sequence[str] = (),
    sample_rate: int = TARGET_SAMPLE_RATE,
) -> Dict[str, Path]:
    """Audio-only manifests (``ID,duration,wav,spk_id``) for APC pretraining.

    Writes ``apc_train.csv`` and ``apc_valid.csv``: the validation split holds about
    ``valid_utterances`` (or ``valid_fraction`` of all) utterances of ``subsets``, as whole speakers
    (``valid_by="speaker"``, speakers shuffled with ``seed`` and added until the target is reached)
    or as single utterances (``valid_by="utterance"``).  ``extra_train_subsets`` go to training
    whole, so adding audio leaves the validation split of ``subsets`` as it was.  ``sample_rate``
    (the model's) words the warning about files at another rate.  Idempotent like
    :func:`prepare_mini_librispeech`.
    """
    if valid_by not in ("speaker", "utterance"):
        raise DataPreparationError(f"valid_by must be 'speaker' or 'utterance', got {valid_by!r}")
    # one subset given as a string (--subsets=train-clean-5) is that subset, not its letters
    subsets = [subsets] if isinstance(subsets, str) else list(subsets)
    extra_train_subsets = [extra_train_subsets] if isinstance(extra_train_subsets, str) else list(extra_train_subsets)
    overlap = sorted(set(subsets) & set(extra_train_subsets))
    if overlap:
        raise DataPreparationError(f"subsets {overlap} are listed in both subsets and extra_train_subsets")
    subset_dirs = locate_subsets(data_folder, list(subsets), download)
    extra_dirs = locate_subsets(data_folder, list(extra_train_subsets), download) if extra_train_subsets else {}
    inputs = [f for d in [*subset_dirs.values(), *extra_dirs.values()] for f in _audio_files(d)]
    options = {"subsets": {k: str(v) for k, v in subset_dirs.items()}, "valid_fraction": valid_fraction,
               "valid_utterances": valid_utterances, "valid_by": valid_by, "seed": seed,
               "skip_bad_audio": skip_bad_audio}
    if extra_dirs:  # only when used, so that earlier preparations stay valid
        options["extra_train_subsets"] = {k: str(v) for k, v in extra_dirs.items()}

    def build(save: Path) -> Dict[str, Path]:
        utts = [u for d in subset_dirs.values() for u in scan_subset(d, with_transcripts=False)]
        target = valid_utterances if valid_utterances is not None else round(valid_fraction * len(utts))
        if not 0 < target < len(utts):
            raise DataPreparationError(f"validation size {target} impossible with {len(utts)} utterances")
        rng = random.Random(seed)
        if valid_by == "utterance":
            valid_ids = set(rng.sample(sorted(u.id for u in utts), target))
        else:
            speakers = sorted({u.spk_id for u in utts})
            rng.shuffle(speakers)
            per_spk = {s: sum(u.spk_id == s for u in utts) for s in speakers}
            held: set = set()
            for s in speakers[:-1]:  # always keep at least one training speaker
                if sum(per_spk[h] for h in held) >= target:
                    break
                held.add(s)
            valid_ids = {u.id for u in utts if u.spk_id in held}
            if not held:
                raise DataPreparationError(f"{', '.join(subset_dirs)}: one speaker only, none to hold out for "
                                           "validation: hold out utterances instead (valid_by: utterance under "
                                           "prepare_options in the hparams)")
        utts += [u for d in extra_dirs.values() for u in scan_subset(d, with_transcripts=False)]
        infos = check_audio_files([u.wav for u in utts], skip_bad_audio=skip_bad_audio, target_sr=sample_rate)
        rows = _audio_rows(utts, infos)
        if not any(r["ID"] in valid_ids for r in rows):  # every held-out file was unusable (skip_bad_audio)
            raise DataPreparationError(f"{', '.join(subset_dirs)}: no usable audio left in the validation split "
                                       f"({len(valid_ids)} utterances held out): fix or replace those files")
        split_rows = {split: [r for r in rows if (r["ID"] in valid_ids) == (split == "valid")]
                      for split in ("train", "valid")}
        for split, kept in split_rows.items():
            refuse_empty_split(save / f"apc_{split}.csv", split, kept)
        return {split: write_manifest(save / f"apc_{split}.csv", kept, AUDIO_COLUMNS) for split, kept in split_rows.items()}

    return cached_prepare(save_folder, "librispeech_apc_prepare", options, inputs, build)
