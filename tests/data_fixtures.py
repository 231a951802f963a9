"""Corpora on disk for the tests, and where the real Mini-LibriSpeech audio is.

* Synthetic corpora (nothing in them is real speech): a small TIMIT tree of NIST SPHERE files
  (:func:`make_timit_fixture`), a tiny LibriSpeech tree (:func:`make_librispeech_fixture`), broken
  audio files (:func:`make_bad_audio_fixture`) and MFA label exports (:func:`write_mfa_csv`).
* Real audio: :func:`require_dev_clean_2` finds the shared dev-clean-2 (skips without it, fails under
  CI); :func:`make_mini_librispeech_subset` links a few of its speakers into a Mini-LibriSpeech layout
  and the fixture :func:`mini_corpus` builds one per test module.

Test modules import what they use (``from data_fixtures import mini_corpus``): pytest puts ``tests/``
on ``sys.path`` because the folder has no ``__init__.py``. The fixture lives here rather than in a
``conftest.py`` so that every test module names the fixtures it uses.
"""
from __future__ import annotations

import ast
import csv
import os
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pytest
import soundfile as sf

PathLike = Union[str, os.PathLike]
REPO = Path(__file__).resolve().parents[1]
# whether the running test may read the shared corpus (conftest.py: integration tests only)
CORPUS_ALLOWED = True


# ---------------------------------------------------------------------------------------------- real audio
def shared_data() -> Path:
    """``$SURPRISAL_CC_DATA``; else the first of ``<repo>/../shared/data`` and ``<repo>/data/MiniLibriSpeech``
    (where ``make mini_librispeech`` downloads) that holds ``LibriSpeech/dev-clean-2``."""
    if os.environ.get("SURPRISAL_CC_DATA"):
        return Path(os.environ["SURPRISAL_CC_DATA"])
    candidates = [REPO.parent / "shared" / "data", REPO / "data" / "MiniLibriSpeech"]
    return next((c for c in candidates if (c / "LibriSpeech" / "dev-clean-2").is_dir()), candidates[0])


def require_dev_clean_2() -> Path:
    """The shared data folder holding ``LibriSpeech/dev-clean-2``; skips the test without it (fails under CI).

    Only integration tests read it, so that the unit tests run on a clean clone."""
    if not CORPUS_ALLOWED:
        pytest.fail("this test reads the shared dev-clean-2: mark it @pytest.mark.integration", pytrace=False)
    root = shared_data()
    if not (root / "LibriSpeech" / "dev-clean-2").is_dir():
        message = f"Mini-LibriSpeech dev-clean-2 not found under {root} (set SURPRISAL_CC_DATA)"
        if os.environ.get("CI"):  # CI must run the integration tests on real audio, never skip them
            pytest.fail(f"{message}: CI needs it for the integration tests on real audio", pytrace=False)
        pytest.skip(message)
    return root


def _speaker_utterances(subset_dir: Path) -> Dict[str, List[Path]]:
    by_speaker: Dict[str, List[Path]] = {}
    for flac in sorted(subset_dir.glob("*/*/*.flac")):
        by_speaker.setdefault(flac.parts[-3], []).append(flac)
    return by_speaker


def make_mini_librispeech_subset(
    source_dev_clean_2: Path,
    root: Path,
    train_speakers: int = 4,
    test_speakers: int = 2,
    utterances_per_speaker: int = 4,
    mfa_csv: Optional[Path] = None,
    dev_speakers: int = 0,
) -> Path:
    """Create ``root/LibriSpeech/{train-clean-5,dev-clean-2}`` from speakers of a real dev-clean-2.

    The audio files are symbolic links to the source's, the transcripts are filtered to match, so the
    real recipes run end to end on real speech in seconds. Speakers are taken in sorted order: the
    first ``train_speakers`` form the stand-in train-clean-5, the next ``test_speakers`` the stand-in
    dev-clean-2. With ``mfa_csv``, a symbolic link ``root/phone_labels/dev-clean-2_mfa.csv`` points to
    it; ``dev_speakers`` more speakers form a stand-in ``mfa-dev`` whose labels are TextGrids in
    ``root/phone_labels/mfa-dev`` (:func:`write_textgrids_from_mfa_csv`). Returns ``root``.
    """
    source_dev_clean_2 = Path(source_dev_clean_2)
    speakers = _speaker_utterances(source_dev_clean_2)
    names: Sequence[str] = sorted(speakers)
    if len(names) < train_speakers + test_speakers:
        raise ValueError(f"{source_dev_clean_2} has {len(names)} speakers; need {train_speakers + test_speakers}")
    plan = {"train-clean-5": names[:train_speakers], "dev-clean-2": names[train_speakers:train_speakers + test_speakers]}
    for subset, chosen in plan.items():
        for speaker in chosen:
            for flac in speakers[speaker][:utterances_per_speaker]:
                chapter_dir = root / "LibriSpeech" / subset / flac.parts[-3] / flac.parts[-2]
                chapter_dir.mkdir(parents=True, exist_ok=True)
                link = chapter_dir / flac.name
                if not link.exists():
                    os.symlink(flac.resolve(), link)
                trans_name = f"{flac.parts[-3]}-{flac.parts[-2]}.trans.txt"
                source_lines = (flac.parent / trans_name).read_text().splitlines()
                line = next(l for l in source_lines if l.split(" ", 1)[0] == flac.stem)
                with open(chapter_dir / trans_name, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
    speakers_txt = source_dev_clean_2.parent / "SPEAKERS.TXT"
    if speakers_txt.exists() and not (root / "LibriSpeech" / "SPEAKERS.TXT").exists():
        os.symlink(speakers_txt.resolve(), root / "LibriSpeech" / "SPEAKERS.TXT")
    if mfa_csv is not None:
        (root / "phone_labels").mkdir(parents=True, exist_ok=True)
        link = root / "phone_labels" / "dev-clean-2_mfa.csv"
        if not link.exists():
            os.symlink(Path(mfa_csv).resolve(), link)
    if dev_speakers:
        if mfa_csv is None:
            raise ValueError("dev_speakers needs mfa_csv: the stand-in mfa-dev's TextGrids are made from it")
        start = train_speakers + test_speakers
        if len(names) < start + dev_speakers:
            raise ValueError(f"{source_dev_clean_2} has {len(names)} speakers; need {start + dev_speakers}")
        chosen = [f for s in names[start:start + dev_speakers] for f in speakers[s][:utterances_per_speaker]]
        for flac in chosen:
            chapter_dir = root / "LibriSpeech" / "mfa-dev" / flac.parts[-3] / flac.parts[-2]
            chapter_dir.mkdir(parents=True, exist_ok=True)
            if not (chapter_dir / flac.name).exists():
                os.symlink(flac.resolve(), chapter_dir / flac.name)
            trans_name = f"{flac.parts[-3]}-{flac.parts[-2]}.trans.txt"
            line = next(l for l in (flac.parent / trans_name).read_text().splitlines() if l.split(" ", 1)[0] == flac.stem)
            with open(chapter_dir / trans_name, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        write_textgrids_from_mfa_csv(mfa_csv, root / "phone_labels" / "mfa-dev", {f.stem for f in chosen})
    return root


VOWELS = {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"}


def write_textgrids_from_mfa_csv(mfa_csv: PathLike, folder: PathLike, utterances: Optional[set] = None) -> Dict[str, str]:
    """MFA TextGrids (words and phones tiers, as ``mfa align`` writes them and as mfa-dev ships them)
    made from the MFA export CSV's raw tiers: ``folder/<spk>/<chapter>/<utt>.TextGrid``, vowels given
    stress digits (0, 1, 2 in turn) as MFA's ARPAbet has them. Returns ``{utterance id: phonemes_39}``,
    the export's own 41-symbol labels for the same utterances."""
    def tier(name, marks, starts, ends):
        rows = [f'        item [{name[0]}]:', '            class = "IntervalTier"', f'            name = "{name[1]}"',
                "            xmin = 0", f"            xmax = {ends[-1] / 16000}",
                f"            intervals: size = {len(marks)}"]
        for i, (mark, a, b) in enumerate(zip(marks, starts, ends), 1):
            rows += [f"            intervals [{i}]:", f"                xmin = {a / 16000}",
                     f"                xmax = {b / 16000}", f'                text = "{mark}"']
        return rows

    expected = {}
    with open(mfa_csv, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            utt = Path(row["path"]).name.split(".")[0]
            if utterances is not None and utt not in utterances:
                continue
            phones = [p + str(i % 3) if p in VOWELS else p for i, p in enumerate(ast.literal_eval(row["phn"]))]
            phone_tier = tier((2, "phones"), phones, [int(x) for x in row["phn_starts"].split()],
                              [int(x) for x in row["phn_ends"].split()])
            word_tier = tier((1, "words"), ast.literal_eval(row["words"]), [int(x) for x in row["wrd_starts"].split()],
                             [int(x) for x in row["wrd_ends"].split()])
            spk, chapter, _ = utt.split("-")
            out = Path(folder) / spk / chapter / f"{utt}.TextGrid"
            out.parent.mkdir(parents=True, exist_ok=True)
            header = ['File type = "ooTextFile"', 'Object class = "TextGrid"', "", "xmin = 0",
                      f"xmax = {int(row['phn_ends'].split()[-1]) / 16000}", "tiers? <exists>", "size = 2", "item []:"]
            out.write_text("\n".join(header + word_tier + phone_tier) + "\n", encoding="utf-8")
            expected[utt] = row["phonemes_39"]
    return expected


@pytest.fixture(scope="module")
def mini_corpus(tmp_path_factory):
    """A stand-in Mini-LibriSpeech (``<root>/corpus``) from a few real dev-clean-2 speakers (symbolic links):
    4 speakers as train-clean-5, 2 as dev-clean-2, 1 as mfa-dev (TextGrids), 3 utterances each, MFA labels
    linked. Returns ``<root>``.
    Import it into a test module to use it there (``from data_fixtures import mini_corpus``)."""
    shared = require_dev_clean_2()
    root = tmp_path_factory.mktemp("mls")
    make_mini_librispeech_subset(shared / "LibriSpeech" / "dev-clean-2", root / "corpus", train_speakers=4,
                                 test_speakers=2, utterances_per_speaker=3, dev_speakers=1,
                                 mfa_csv=shared / "phone_labels" / "dev-clean-2_mfa.csv")
    return root


def counting_recipe(function: str, module: str = "surprisal_cc.model.ctc",
                    recipe: str = "recipes/MiniLibriSpeech/train.py") -> str:
    """Python source (for ``python -c``) that runs ``recipe`` with ``module.function`` wrapped to
    count its calls, and prints ``<function> calls: N`` at exit."""
    return f"""
import atexit, runpy
import {module} as target

calls, original = [], target.{function}
def counted(*args, **kwargs):
    calls.append(1)
    return original(*args, **kwargs)
target.{function} = counted
atexit.register(lambda: print("{function} calls:", len(calls)))
runpy.run_path("{recipe}", run_name="__main__")
"""


def run_fbank_big_only_epoch(root: Path, experiment: str, counted: str, **overrides):
    """One epoch of the real Mini-LibriSpeech recipe on the ``mini_corpus`` fixture's corpus (raw
    filterbanks, big-only, so no APC is needed; batches of 4, seed 3), with ``surprisal_cc.model.ctc.<counted>``'s
    calls counted. Returns (the run's printed output, its results.json)."""
    import json
    import os
    import subprocess
    import sys

    args = {"data_folder": root / "corpus", "experiment_root": root / experiment, "valid_speakers": 2,
            "number_of_epochs": 1, "batch_size": 4, "seed": 3, "input_features": "fbank",
            "controller": "big_only", **overrides}
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    hparams = REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml"
    proc = subprocess.run([sys.executable, "-c", counting_recipe(counted), hparams,
                           *[f"--{k}={v}" for k, v in args.items()]],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    results = root / experiment / "conditional-big_only-paper-fbank" / "seed3" / "results.json"
    return proc.stdout + proc.stderr, json.loads(results.read_text())


# ---------------------------------------------------------------------------------------------- preparation reuse
def assert_prepare_reuses(module, prepare: Callable[[], Dict[str, Path]], manifests: Mapping[str, Path]) -> None:
    """Call ``prepare()`` again and check that it returns ``manifests`` without rebuilding them: the
    audio check a rebuild starts with (``module.check_audio_files``, as the preparation module imported
    it) is not called, and no file in the manifests' folders is rewritten, added or removed
    (``st_mtime_ns``). Proves reuse without timing the call, which a loaded machine would slow down."""
    folders = {Path(p).parent for p in manifests.values()}

    def snapshot() -> Dict[Path, int]:
        return {f: f.stat().st_mtime_ns for d in folders for f in d.iterdir() if f.is_file()}

    before = snapshot()
    calls = []

    def no_audio_check(*args, **kwargs):
        calls.append(args)
        raise AssertionError("the repeated preparation checked the audio again instead of reusing its manifests")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "check_audio_files", no_audio_check)  # raises if the module no longer has it
        assert prepare() == manifests
    assert not calls
    assert snapshot() == before


# ---------------------------------------------------------------------------------------------- synthetic corpora
def tone(seconds: float = 0.3, sample_rate: int = 16000, freq: float = 220.0) -> np.ndarray:
    """A short int16 sine wave."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return (0.3 * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def write_sphere(path: PathLike, samples: np.ndarray, sample_rate: int = 16000) -> Path:
    """Write int16 mono ``samples`` as a NIST SPHERE file (1024-byte ``NIST_1A`` header)."""
    header = (
        "NIST_1A\n   1024\n"
        f"sample_count -i {len(samples)}\nsample_n_bytes -i 2\nchannel_count -i 1\n"
        f"sample_byte_format -s2 01\nsample_rate -i {sample_rate}\nsample_coding -s3 pcm\n"
        "end_head\n"
    ).encode("ascii")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header.ljust(1024, b" ") + samples.astype("<i2").tobytes())
    return path


# (61-phone transcription, expected 39-phone folding) -- hand-written
TIMIT_PHN_CASES: Dict[str, Tuple[str, str]] = {
    "sa": ("h# sh ix hv eh dcl jh ih dcl d ah kcl k q h#", "sil sh ih hh eh sil jh ih sil d ah sil k sil"),
    "si": ("h# ax-h bcl b ao tcl t q ix pau epi axr el em h#", "sil ah sil b aa sil t ih sil er l m sil"),
    "sx": ("h# en nx eng zh ux gcl g pcl p dx hh h#", "sil n n ng sh uw sil g sil p dx hh sil"),
}
TIMIT_WORDS = "she had"

# speaker -> (part, dialect region, upper-case names?)
TIMIT_FIXTURE_SPEAKERS: Dict[str, Tuple[str, str, bool]] = {
    "FCJF0": ("TRAIN", "DR1", True),
    "mdwk0": ("TRAIN", "DR2", False),
    "MDAB0": ("TEST", "DR1", True),   # core test
    "mjsw0": ("TEST", "DR3", False),  # development set
    "FCMR0": ("TEST", "DR1", True),   # plain test speaker: in neither split
}
TIMIT_FIXTURE_SENTENCES = ("SA1", "SA2", "SI1027", "SX127")


def make_timit_fixture(root: PathLike) -> Path:
    """Create a TIMIT-layout tree under ``root``; returns ``root``.

    ``TRAIN/`` is upper case, ``test/`` lower case; speaker folders and file names follow the
    per-speaker case in :data:`TIMIT_FIXTURE_SPEAKERS`.  Every speaker has SA1, SA2, SI1027, SX127;
    their ``.PHN`` content comes from :data:`TIMIT_PHN_CASES` (by sentence type).
    """
    root = Path(root)
    for spk, (part, region, upper) in TIMIT_FIXTURE_SPEAKERS.items():
        part_name = part if part == "TRAIN" else part.lower()
        folder = root / part_name / (region if upper else region.lower()) / spk
        for sent in TIMIT_FIXTURE_SENTENCES:
            name = sent if upper else sent.lower()
            ext = (lambda e: e.upper() if upper else e.lower())
            samples = tone(0.3)
            write_sphere(folder / f"{name}{ext('.wav')}", samples)
            phones = TIMIT_PHN_CASES[sent[:2].lower()][0].split()
            bounds = np.linspace(0, len(samples), len(phones) + 1).astype(int)
            (folder / f"{name}{ext('.phn')}").write_text(
                "".join(f"{a} {b} {p}\n" for a, b, p in zip(bounds[:-1], bounds[1:], phones))
            )
            words = TIMIT_WORDS.split()
            (folder / f"{name}{ext('.wrd')}").write_text(
                "".join(f"{i * 100} {(i + 1) * 100} {w}\n" for i, w in enumerate(words))
            )
            (folder / f"{name}{ext('.txt')}").write_text(f"0 {len(samples)} She had.\n")
    return root


def make_librispeech_fixture(
    root: PathLike,
    subsets: Mapping[str, Mapping[str, Sequence[str]]],
    genders: Mapping[str, str] = (),  # type: ignore[assignment]
    sample_rate: int = 16000,
) -> Path:
    """Tiny LibriSpeech tree: ``subsets = {subset: {"<spk>-<chapter>": [transcript, ...]}}``.

    Writes ``root/LibriSpeech/<subset>/<spk>/<chapter>/<spk>-<chapter>-NNNN.flac`` (0.2 s tones),
    the ``.trans.txt`` files and ``SPEAKERS.TXT`` (from ``genders``).
    """
    base = Path(root) / "LibriSpeech"
    for subset, chapters in subsets.items():
        for spk_chapter, lines in chapters.items():
            spk, chapter = spk_chapter.split("-")
            folder = base / subset / spk / chapter
            folder.mkdir(parents=True, exist_ok=True)
            trans = []
            for i, text in enumerate(lines):
                utt = f"{spk_chapter}-{i:04d}"
                sf.write(folder / f"{utt}.flac", tone(0.2, sample_rate), sample_rate)
                trans.append(f"{utt} {text}\n")
            (folder / f"{spk_chapter}.trans.txt").write_text("".join(trans))
    rows = "".join(f"{s:<5}| {g} | subset | 1.00 | Reader {s}\n" for s, g in dict(genders).items())
    (base / "SPEAKERS.TXT").write_text(";ID  |SEX| SUBSET |MINUTES| NAME\n" + rows)
    return Path(root)


def make_bad_audio_fixture(root: PathLike) -> Dict[str, Path]:
    """Broken/unusual audio: ``corrupt``, ``empty`` (0 bytes), ``no_samples``, ``too_short``
    (10 ms), ``rate_8k``, ``stereo`` and a ``good`` file; returns ``{kind: path}``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    paths = {k: root / f"{k}.flac" for k in ("good", "corrupt", "empty", "too_short", "rate_8k", "stereo")}
    paths["no_samples"] = root / "no_samples.wav"  # valid WAV header, 0 frames
    sf.write(paths["good"], tone(0.2), 16000)
    paths["corrupt"].write_bytes(b"fLaC" + bytes(range(256)) * 4)
    paths["empty"].write_bytes(b"")
    sf.write(paths["no_samples"], np.zeros(0, dtype=np.int16), 16000)
    sf.write(paths["too_short"], tone(0.01), 16000)
    sf.write(paths["rate_8k"], tone(0.2, 8000), 8000)
    sf.write(paths["stereo"], np.stack([tone(0.2), tone(0.2, freq=330)], axis=1), 16000)
    return paths


MFA_CSV_HEADER = "path,wrd,phonemes_39,phonemes_61,phn,phn_starts,phn_ends,words,wrd_starts,wrd_ends\n"


def write_label_manifest(path: Path, rows: dict) -> Path:
    """A recipe manifest (ID, duration, wav, spk_id, wrd, phn) of ``rows = {utt_id: (words, phones)}``
    with placeholder audio, for label pipelines that never read it."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["ID", "duration", "wav", "spk_id", "wrd", "phn"])
        writer.writerows([utt, "1.0", "x.flac", "s", words, phones] for utt, (words, phones) in rows.items())
    return path


def write_mfa_csv(path: Path, subset: str, labels: dict) -> Path:
    """A CSV in the published MFA export format: ``labels = {utt_id: "sil AH ... sil"}``."""
    rows = []
    for utt, phones in labels.items():
        spk, chapter, _ = utt.split("-")
        rows.append(f"{subset}/{spk}/{chapter}/{utt}.flac,x,{phones},{phones},,,,,,\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(MFA_CSV_HEADER + "".join(rows))
    return path
