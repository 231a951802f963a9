"""Multiply-accumulate (MAC) accounting in the paper's convention.

One multiply-accumulate = one FLOP, and a bias add counts as one, so for the layers used here the
MACs per input frame equal the parameter count (paper, footnote 4): Linear ``in*out + out``,
GRU ``3 * (in*H + H*H + 2H)`` per direction, Conv1d ``in*out*k + out`` per output frame,
LayerNorm ``2 * width``. Operations without parameters (activations, residual adds, the
halting-weighted sum of ACT / PonderNet step states) are not charged.

Static tables describe what one frame costs in each component; :class:`MacMeter` accumulates
what actually ran, frame by frame, over real (unpadded) frames.

Example
-------
>>> from torch import nn
>>> module_macs(nn.Linear(512, 2048))
1050624
>>> module_macs(nn.GRU(512, 256, bidirectional=True))
1182720
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional

import torch
from torch import Tensor, nn

MATMUL_LAYERS = (nn.Linear, nn.Conv1d, nn.GRU, nn.LSTM, nn.RNN)


def module_macs(module: Optional[nn.Module]) -> int:
    """MACs per frame of a module made of Linear / GRU / LSTM / Conv1d / LayerNorm layers (and parameter-free ones).

    A module with a ``macs_per_frame()`` method reports its own count.

    Arguments
    ---------
    module : torch.nn.Module or None
        The module; None counts 0.

    Returns
    -------
    int
        MACs per input frame.

    Example
    -------
    >>> from torch import nn
    >>> module_macs(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.LayerNorm(3)))
    21
    >>> module_macs(None)
    0
    """
    if module is None:
        return 0
    if hasattr(module, "macs_per_frame"):
        return int(module.macs_per_frame())
    if isinstance(module, (*MATMUL_LAYERS, nn.LayerNorm)):  # LayerNorm: scale and shift per element
        return sum(p.numel() for p in module.parameters())
    return sum(module_macs(child) for child in module.children())


def weight_only_macs(module: nn.Module) -> int:
    """MACs of the matrix products without bias adds.

    This is what ``torch.utils.flop_counter`` counts (divided by 2). Elementwise parameters (an
    input scale, LayerNorm) are not counted.

    Arguments
    ---------
    module : torch.nn.Module
        The module.

    Returns
    -------
    int
        Weights of its Linear / Conv1d / GRU / LSTM / RNN layers.

    Example
    -------
    >>> from torch import nn
    >>> weight_only_macs(nn.Linear(4, 3)), module_macs(nn.Linear(4, 3))
    (12, 15)
    """
    return sum(p.numel() for layer in module.modules() if isinstance(layer, MATMUL_LAYERS)
               for name, p in layer.named_parameters(recurse=False) if not name.startswith("bias"))


class MacMeter:
    """Accumulates MACs that ran, per component, and the number of real frames.

    Example
    -------
    >>> import torch
    >>> meter = MacMeter()
    >>> meter.update({"big_net": torch.tensor([[10., 0.], [10., 0.]])}, num_frames=3)
    >>> meter.per_frame()
    {'big_net': 6.666666666666667, 'total': 6.666666666666667}
    """

    def __init__(self):
        self.totals: Dict[str, float] = {}
        self.frames = 0

    def update(self, frame_macs: Mapping[str, Tensor], num_frames: int, uniform: Mapping[str, int] = ()) -> None:
        """Add the MACs of one batch.

        Arguments
        ---------
        frame_macs : mapping of str to torch.Tensor
            Component -> (B, T) MACs that ran per frame (zero on padding).
        num_frames : int
            Real frames in the batch.
        uniform : mapping of str to int
            Component -> MACs per frame, for components that run on every real frame.
        """
        for name, macs in frame_macs.items():
            self.totals[name] = self.totals.get(name, 0.0) + float(macs.detach().double().sum())
        for name, macs in dict(uniform).items():
            self.totals[name] = self.totals.get(name, 0.0) + float(macs) * num_frames
        self.frames += int(num_frames)

    def per_frame(self) -> Dict[str, float]:
        """Mean MACs per real frame of each component, and their sum as ``total``."""
        frames = max(self.frames, 1)
        table = {name: total / frames for name, total in self.totals.items()}
        table["total"] = sum(table.values())
        return table


def uniform_frame_macs(macs: int, mask: Tensor) -> Tensor:
    """(B, T) tensor with ``macs`` on real frames and 0 on padding.

    Example
    -------
    >>> import torch
    >>> uniform_frame_macs(5, torch.tensor([[True, True, False]])).tolist()
    [[5.0, 5.0, 0.0]]
    """
    return mask.to(torch.float64) * float(macs)


def format_flop_table(rows: Mapping[str, float], unit: float = 1e6) -> str:
    """Markdown table of MACs per frame, in millions (values below 1000 as plain counts).

    Arguments
    ---------
    rows : mapping of str to float
        Component -> MACs per frame (e.g. :meth:`MacMeter.per_frame`).
    unit : float
        Divisor of the values of 1000 and more.

    Returns
    -------
    str
        The table, without a final newline.

    Example
    -------
    >>> print(format_flop_table({"big_net": 2.5e6, "controller": 2}))
    | component | MACs per frame |
    |---|---:|
    | big_net | 2.50M |
    | controller | 2 |
    """
    lines = ["| component | MACs per frame |", "|---|---:|"]
    for name, value in rows.items():
        shown = f"{value / unit:.2f}M" if value >= 1000 else f"{value:.0f}"
        lines.append(f"| {name} | {shown} |")
    return "\n".join(lines)
