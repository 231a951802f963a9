"""Where is the APC model surprised? Surprisal on silence vs. speech frames, and routing plots.

Frames are labelled with forced alignments (the CSV export of MFA alignments with sample-level
``phn``/``phn_starts``/``phn_ends`` columns): a 20 ms frame gets the label of the segment that
contains the centre of its analysis window. ``sil``, ``sp`` and empty labels are silence.

    python -m surprisal_cc.analysis --apc results/LibriSpeech/apc/apc.pt \
        --mfa ../shared/data/phone_labels/dev-clean-2_mfa.csv \
        --audio-root ../shared/data/LibriSpeech --plot docs/results/routing_example.png
"""
from __future__ import annotations

import argparse
import ast
import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import torch

from .apc import APCModel, load_apc
from .cache import FeatureCache
from .controllers import SurprisalController
from .features import FeatureConfig, FilterbankFrontEnd

SILENCE_LABELS = {"sil", "sp", "", "<eps>"}


@dataclass
class AlignedUtterance:
    utt_id: str
    audio: Path
    labels: List[str]
    starts: List[int]
    ends: List[int]

    def frame_is_silence(self, num_frames: int, config: FeatureConfig) -> torch.Tensor:
        """Bool (num_frames,): the segment containing each frame's window centre is silence."""
        centres = (torch.arange(num_frames) * config.frame_skip * config.shift_samples
                   + config.window_samples // 2)
        silent = torch.ones(num_frames, dtype=torch.bool)  # outside every segment: silence
        for label, start, end in zip(self.labels, self.starts, self.ends):
            inside = (centres >= start) & (centres < end)
            silent[inside] = label.lower() in SILENCE_LABELS
        return silent


def read_aligned_csv(path: Path, audio_root: Path) -> Iterator[AlignedUtterance]:
    """Utterances of an MFA CSV export (``path``, ``phn``, ``phn_starts``, ``phn_ends`` columns)."""
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            labels = [str(x) for x in ast.literal_eval(row["phn"])]
            starts = [int(x) for x in row["phn_starts"].split()]
            ends = [int(x) for x in row["phn_ends"].split()]
            if not (len(starts) == len(ends) <= len(labels)):
                raise ValueError(f"{path}: utterance {row['path']}: {len(labels)} labels, "
                                 f"{len(starts)} starts, {len(ends)} ends")
            yield AlignedUtterance(Path(row["path"]).stem, audio_root / row["path"], labels[:len(starts)], starts, ends)


@torch.no_grad()
def surprisal_by_class(apc: APCModel, utterances: Iterator[AlignedUtterance], config: Optional[FeatureConfig] = None,
                       max_utterances: Optional[int] = None, cache_root: Optional[Path] = None) -> Dict[str, float]:
    """Mean surprisal over silence frames and over speech frames (frame-weighted, whole corpus).

    With ``cache_root``, surprisal already in the feature cache of this APC model is reused.
    """
    from .data.audio import read_audio

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
            fbank = front_end.single(read_audio(utt.audio))
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
    """Spectrogram, surprisal and (with a calibrated controller) the deterministic routing of one utterance."""
    from .data.audio import read_audio
    from .plots import plot_routing

    config = config or FeatureConfig()
    fbank = FilterbankFrontEnd(config).single(read_audio(utt.audio))
    surprisal = apc.eval()(fbank[None], torch.tensor([fbank.shape[0]])).surprisal[0]
    use_big = None
    if controller is not None:
        use_big = controller.probability(fbank[None], surprisal[None])[0] > 0.5
    silent = utt.frame_is_silence(fbank.shape[0], config)
    return plot_routing(fbank, surprisal, use_big, path, title=utt.utt_id, sil_mask=silent)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apc", required=True, help="exported APC model file")
    parser.add_argument("--mfa", required=True, help="MFA CSV export with sample-level phone boundaries")
    parser.add_argument("--audio-root", required=True, help="folder the CSV's paths are relative to")
    parser.add_argument("--max-utterances", type=int, default=None)
    parser.add_argument("--cache", help="feature cache folder to reuse surprisal from (e.g. results/MiniLibriSpeech/feature_cache)")
    parser.add_argument("--calibration", help="calibration.json of a run: draws its routing in the plot")
    parser.add_argument("--plot", help="write a routing plot of the first utterance to this PNG")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    apc = load_apc(args.apc)
    result = surprisal_by_class(apc, read_aligned_csv(Path(args.mfa), Path(args.audio_root)),
                                max_utterances=args.max_utterances,
                                cache_root=Path(args.cache) if args.cache else None)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if args.plot:
        controller = None
        if args.calibration:
            calibration = json.loads(Path(args.calibration).read_text())
            controller = SurprisalController(calibration["weight"], calibration["bias"])
        first = next(read_aligned_csv(Path(args.mfa), Path(args.audio_root)))
        print(routing_example(apc, first, Path(args.plot), controller))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
