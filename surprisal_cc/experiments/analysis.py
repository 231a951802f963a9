"""Where is the APC model surprised? Surprisal on silence vs. speech frames, and routing plots.

Frames are labelled with forced alignments (the CSV export of MFA alignments with sample-level
``phn``/``phn_starts``/``phn_ends`` columns): a 20 ms frame gets the label of the segment that
contains the centre of its analysis window. MFA's silence marks (``sil``, ``sp``, empty) are silence.

    surprisal-cc analyse --apc results/LibriSpeech/apc/apc.pt \
        --mfa ../shared/data/phone_labels/dev-clean-2_mfa.csv \
        --audio-root ../shared/data/LibriSpeech --plot docs/results/routing_example.png
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import soundfile as sf
import torch

from surprisal_cc.checks import make_output_folder
from surprisal_cc.model.apc import APCModel, load_apc
from surprisal_cc.training.cache import FeatureCache
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.controllers import SurprisalController
from surprisal_cc.data.mfa import SILENCE_MARKS, read_mfa_export
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.model.features import FilterbankFrontEnd


@dataclass
class AlignedUtterance:
    """One utterance with its aligned segments (sample boundaries, end exclusive).

    MFA's CSV export counts samples of the audio file as it is; a model at another sample rate
    compares times, not sample indices (``sample_rate``).

    Arguments
    ---------
    utt_id : str
        Utterance id.
    audio : pathlib.Path
        Audio file.
    labels : list of str
        Segment labels (phones, ``sil``, ``sp``).
    starts : list of int
        First sample of each segment.
    ends : list of int
        Sample after the last one of each segment.
    sample_rate : int, optional
        The rate of ``starts`` and ``ends``; None: the features' (see :meth:`frame_is_silence`).

    Example
    -------
    >>> from pathlib import Path
    >>> from surprisal_cc.model.feature_config import FeatureConfig
    >>> utt = AlignedUtterance("a", Path("a.flac"), ["sil", "AH", "sil"], [0, 640, 1280], [640, 1280, 1600])
    >>> utt.frame_is_silence(6, FeatureConfig()).tolist()  # window centres 200, 520, ..., 1800
    [True, True, False, False, True, True]
    >>> AlignedUtterance("a", Path("a.flac"), ["sil", "AH", "sil"], [0, 1280, 2560], [1280, 2560, 3200],
    ...                  sample_rate=32000).frame_is_silence(6, FeatureConfig()).tolist()  # the same times
    [True, True, False, False, True, True]
    """

    utt_id: str
    audio: Path
    labels: List[str]
    starts: List[int]
    ends: List[int]
    sample_rate: Optional[int] = None

    def frame_is_silence(self, num_frames: int, config: FeatureConfig) -> torch.Tensor:
        """Whether the segment containing each frame's window centre is silence.

        Frames outside every segment count as silence.

        Arguments
        ---------
        num_frames : int
            Frames of the utterance.
        config : FeatureConfig
            Frame shift, window, frame skip and sample rate of the features; the segments'
            samples are at ``sample_rate``, or at the features' rate where it is None.

        Returns
        -------
        torch.Tensor
            Bool (num_frames,).
        """
        centres = (torch.arange(num_frames) * config.frame_skip * config.shift_samples
                   + config.window_samples // 2)
        rate = self.sample_rate or config.sample_rate
        # centre / config.sample_rate >= start / rate, in whole numbers (exact at every rate)
        centres, scale = centres * rate, config.sample_rate
        silent = torch.ones(num_frames, dtype=torch.bool)  # outside every segment: silence
        for label, start, end in zip(self.labels, self.starts, self.ends):
            inside = (centres >= start * scale) & (centres < end * scale)
            silent[inside] = label.lower() in SILENCE_MARKS
        return silent


def read_aligned_csv(path: Path, audio_root: Path) -> Iterator[AlignedUtterance]:
    """Utterances of an MFA CSV export (``path``, ``phn``, ``phn_starts``, ``phn_ends`` columns),
    their samples at the rate of each audio file (read from its header; a file that is not there:
    the features' rate).

    Arguments
    ---------
    path : pathlib.Path
        The CSV file: ``phn`` is a Python list literal of labels, ``phn_starts`` and ``phn_ends``
        are space-separated sample indices.
    audio_root : pathlib.Path
        Folder the ``path`` column is relative to.

    Returns
    -------
    iterator of AlignedUtterance
        One per row; the utterance id is :func:`surprisal_cc.data.mfa.utterance_id` of its path.

    Example
    -------
    >>> import csv, tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with open(Path(folder) / "mfa.csv", "w", newline="") as f:
    ...         csv.writer(f).writerows([["path", "phn", "phn_starts", "phn_ends"],
    ...                                  ["spk/a.flac", "['sil', 'AH']", "0 640", "640 1280"]])
    ...     utts = list(read_aligned_csv(Path(folder) / "mfa.csv", Path("corpus")))
    >>> utts[0].utt_id, utts[0].audio.as_posix(), utts[0].labels, utts[0].ends
    ('a', 'corpus/spk/a.flac', ['sil', 'AH'], [640, 1280])
    """
    for row in read_mfa_export(path, ("phn", "phn_starts", "phn_ends"), "sample-level phone boundaries"):
        labels, starts, ends = row.phn, row.phn_starts, row.phn_ends
        if not (len(starts) == len(ends) <= len(labels)):
            raise ValueError(f"{path}: utterance {row.path}: {len(labels)} labels, "
                             f"{len(starts)} starts, {len(ends)} ends")
        audio = audio_root / row.path
        try:
            rate = sf.info(str(audio)).samplerate if audio.is_file() else None
        except RuntimeError:  # undecodable: reading the audio names the file later
            rate = None
        yield AlignedUtterance(row.utt_id, audio, labels[:len(starts)], starts, ends, rate)


@torch.no_grad()
def surprisal_by_class(apc: APCModel, utterances: Iterator[AlignedUtterance], config: Optional[FeatureConfig] = None,
                       max_utterances: Optional[int] = None, cache_root: Optional[Path] = None) -> Dict[str, float]:
    """Mean surprisal over silence frames and over speech frames (frame-weighted, whole corpus).

    Arguments
    ---------
    apc : APCModel
        The APC model (put in eval mode).
    utterances : iterator of AlignedUtterance
        The aligned utterances (e.g. :func:`read_aligned_csv`).
    config : FeatureConfig, optional
        Filterbank settings, the audio read at its sample rate; None: the defaults.
    max_utterances : int, optional
        Stop after this many utterances.
    cache_root : pathlib.Path, optional
        Feature cache folder: surprisal already in the cache of this APC model is reused.

    Returns
    -------
    dict
        ``mean_surprisal_silence``, ``mean_surprisal_speech``, ``frames_silence``,
        ``frames_speech`` and ``speech_to_silence_ratio``.
    """
    config = config or FeatureConfig()
    front_end = FilterbankFrontEnd(config)
    apc = apc.eval()
    cache = FeatureCache(cache_root, apc, config) if cache_root is not None else None
    sums = {"silence": 0.0, "speech": 0.0}
    counts = {"silence": 0, "speech": 0}
    for i, utt in enumerate(utterances):
        if max_utterances is not None and i >= max_utterances:
            break
        if cache is not None and cache.has(utt.utt_id):
            surprisal = cache.load(utt.utt_id)["surprisal"]
        else:
            if not utt.audio.is_file():
                raise FileNotFoundError(f"{utt.audio}: no such audio file (utterance {utt.utt_id} of the "
                                        "alignments): is the audio root the folder their paths are relative to?")
            fbank = front_end.single(config.read_audio(utt.audio))
            surprisal = apc(fbank[None], torch.tensor([fbank.shape[0]])).surprisal[0]
        silent = utt.frame_is_silence(surprisal.shape[0], config)
        for name, mask in (("silence", silent), ("speech", ~silent)):
            sums[name] += float(surprisal[mask].sum())
            counts[name] += int(mask.sum())
    result = {f"mean_surprisal_{k}": sums[k] / max(counts[k], 1) for k in sums}
    result.update({f"frames_{k}": counts[k] for k in counts})
    result["speech_to_silence_ratio"] = result["mean_surprisal_speech"] / max(result["mean_surprisal_silence"], 1e-9)
    return result


@torch.no_grad()
def routing_example(apc: APCModel, utt: AlignedUtterance, path: Path, controller: Optional[SurprisalController] = None,
                    config: Optional[FeatureConfig] = None) -> Path:
    """Spectrogram, surprisal and (with a calibrated controller) the deterministic routing of one utterance.

    Arguments
    ---------
    apc : APCModel
        The APC model (put in eval mode).
    utt : AlignedUtterance
        The utterance; its silence segments are shaded.
    path : pathlib.Path
        Output PNG.
    controller : SurprisalController, optional
        Draws the routing ``p_big > 0.5``; None: spectrogram and surprisal only.
    config : FeatureConfig, optional
        Filterbank settings, the audio read at its sample rate; None: the defaults.

    Returns
    -------
    pathlib.Path
        The written figure (see :func:`~surprisal_cc.experiments.plots.plot_routing`).
    """
    from surprisal_cc.experiments.plots import plot_routing

    config = config or FeatureConfig()
    fbank = FilterbankFrontEnd(config).single(config.read_audio(utt.audio))
    surprisal = apc.eval()(fbank[None], torch.tensor([fbank.shape[0]])).surprisal[0]
    use_big = None
    if controller is not None:
        use_big = controller.probability(fbank[None], surprisal[None])[0] > 0.5
    silent = utt.frame_is_silence(fbank.shape[0], config)
    return plot_routing(fbank, surprisal, use_big, path, title=utt.utt_id, sil_mask=silent)


def run_analysis(args: argparse.Namespace) -> int:
    """``surprisal-cc analyse``: print (and optionally save) the surprisal by class, draw a routing plot."""
    apc = load_apc(args.apc)
    # everything that can fail before the pass over the corpus: inputs read, output folders made
    controller = _calibrated_controller(Path(args.calibration)) if args.calibration else None
    if not Path(args.mfa).is_file():
        raise ConfigurationError(f"--mfa {args.mfa}: {'a folder' if Path(args.mfa).is_dir() else 'no such file'}; "
                                 "analyse reads MFA's export CSV, whose phones have sample-level times")
    first = next(read_aligned_csv(Path(args.mfa), Path(args.audio_root)), None)
    if first is None:
        raise ValueError(f"{args.mfa}: no utterances")
    for option, output in (("--json", args.json), ("--plot", args.plot)):
        if output:
            make_output_folder(option, output)
    result = surprisal_by_class(apc, read_aligned_csv(Path(args.mfa), Path(args.audio_root)),
                                max_utterances=args.max_utterances,
                                cache_root=Path(args.cache) if args.cache else None)
    print(json.dumps(result, indent=2), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if args.plot:
        print(routing_example(apc, first, Path(args.plot), controller))
    return 0


def _calibrated_controller(path: Path) -> SurprisalController:
    """The surprisal controller of a run's ``calibration.json`` (its ``weight`` and ``bias``)."""
    try:
        calibration = json.loads(path.read_text(encoding="utf-8"))
        return SurprisalController(float(calibration["weight"]), float(calibration["bias"]))
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(f"--calibration {path}: not a run's calibration.json with a weight and a bias "
                         f"({type(err).__name__}: {err})") from None
