"""What the functions beside :class:`~surprisal_cc.inference.asr.ConditionalASR` read of the model they are
given (:mod:`~surprisal_cc.inference.passes`, :mod:`~surprisal_cc.inference.long_audio`,
:mod:`~surprisal_cc.inference.budget`, :mod:`~surprisal_cc.inference.evaluation`): its public attributes and
two of its methods. ``ConditionalASR`` imports those modules, so they name the model by this protocol,
not by an import; importing this module loads no torch (the command line's help reads
:mod:`~surprisal_cc.inference.long_audio`'s constants).

>>> from surprisal_cc.inference.asr import ConditionalASR
>>> isinstance(ConditionalASR.untrained(["AH", "sil"]), LoadedModel), isinstance(object(), LoadedModel)
(True, False)
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only
    import torch

    from surprisal_cc.decoding.search import CTCBeamSearch
    from surprisal_cc.model.apc import FrozenAPC
    from surprisal_cc.model.feature_config import FeatureConfig
    from surprisal_cc.model.features import FilterbankFrontEnd
    from surprisal_cc.model.nnet import Encoder

__all__ = ["LoadedModel"]


@runtime_checkable
class LoadedModel(Protocol):
    """A loaded model (a :class:`~surprisal_cc.inference.asr.ConditionalASR`): its networks, front end and
    beam search, how it runs (device, precision, threads, routing, input level) and where it came from."""

    config: Dict[str, Any]
    labels: List[str]
    feature_config: FeatureConfig
    front_end: FilterbankFrontEnd
    frame_shift_s: float
    encoder: Encoder  # a FLOPs budget sets its test_bias_shift (evaluate restores it after)
    apc: Optional[FrozenAPC]
    apc_macs: int
    uses_apc: bool
    use_apc_features: bool
    beam_search: CTCBeamSearch
    device: torch.device
    precision: str
    threads: Optional[int]
    routing: str
    seed: Optional[int]
    input_level_dbfs: Optional[float]
    source: Optional[Path]

    def transcribe_batch(self, wavs: torch.Tensor, wav_lens: Optional[torch.Tensor] = None, *,
                         num_samples: Optional[torch.Tensor] = None, sample_rate: Optional[int] = None,
                         timestamps: bool = True) -> list: ...

    def set_bias_shift(self, shift: float) -> None: ...
