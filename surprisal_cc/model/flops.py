"""Multiply-accumulate (MAC) accounting in the paper's convention.

One multiply-accumulate = one FLOP, and a bias add counts as one, so for the layers used here the
MACs per input frame equal the parameter count (paper, footnote 4): Linear ``in*out + out``,
GRU ``3 * (in*H + H*H + 2H)`` per direction, Conv1d ``in*out*k + out`` per output frame,
LayerNorm ``2 * width``. Operations without parameters (activations, the step block's residual
add, the halting-weighted sum of ACT / PonderNet step states) are not charged; the one exception is
the residual APC head's add of the input frame to its prediction (``input_size`` per frame,
:meth:`~surprisal_cc.model.apc.APCModel.macs_per_frame`).

Static tables describe what one frame costs in each component (:func:`static_flop_rows`);
:class:`MacMeter` accumulates what actually ran, frame by frame, over real (unpadded) frames, and
:class:`RoutingStats` how the frames were routed.

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


class RoutingStats:
    """What ran on the real frames of the batches seen: the running mean/variance of p_big and the
    fraction of frames sent to the big network (small/big routing), or the mean number of steps
    (ACT, PonderNet).

    Example
    -------
    >>> import torch
    >>> routing = RoutingStats()
    >>> mask = torch.tensor([[True, True, False]])
    >>> routing.update({"p_big": torch.tensor([[0.2, 0.6, 0.9]]),
    ...                 "use_big": torch.tensor([[False, True, True]])}, mask)
    >>> {name: round(value, 3) for name, value in routing.summary().items()}
    {'p_big_mean': 0.4, 'p_big_var': 0.04, 'big_fraction': 0.5}
    """

    def __init__(self):
        self.n = 0
        self.sum_p = self.sum_p2 = self.sum_big = 0.0
        self.steps_frames = 0
        self.sum_steps = 0.0

    def update(self, stats: Mapping[str, Tensor], mask: Tensor) -> None:
        """Add one batch: an encoder's ``stats`` (``p_big`` and ``use_big``, or ``steps``; (B, T)
        each) on the frames where ``mask`` (B, T) is True."""
        if "steps" in stats:
            self.sum_steps += float(stats["steps"][mask].sum())
            self.steps_frames += int(mask.sum())
        if "p_big" not in stats:
            return
        p = stats["p_big"].detach()[mask].double()
        self.n += p.numel()
        self.sum_p += float(p.sum())
        self.sum_p2 += float((p * p).sum())
        self.sum_big += float(stats["use_big"][mask].sum())

    def summary(self) -> Dict[str, float]:
        """``p_big_mean``, ``p_big_var`` and ``big_fraction`` when p_big was seen; ``mean_steps``
        when steps were."""
        summary: Dict[str, float] = {}
        if self.n:
            mean = self.sum_p / self.n
            summary.update(p_big_mean=mean, p_big_var=self.sum_p2 / self.n - mean ** 2,
                           big_fraction=self.sum_big / self.n)
        if self.steps_frames:
            summary["mean_steps"] = self.sum_steps / self.steps_frames
        return summary


def count_batch(meter: MacMeter, routing: RoutingStats, out, apc_macs: Optional[int] = None) -> None:
    """Add what ran on one batch to ``meter`` and ``routing``: the per-frame MACs of ``out`` (an
    :class:`~surprisal_cc.model.nnet.EncoderOutput`), with ``apc_macs`` (None: the APC did not run) on every
    real frame, and its routing statistics. The Brain and ``evaluate`` both count with it.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> out = SimpleNamespace(log_probs=torch.zeros(2, 3, 4), lengths=torch.tensor([3, 1]),
    ...                       frame_macs={"big_net": torch.tensor([[5., 5., 5.], [5., 0., 0.]])},
    ...                       stats={"steps": torch.tensor([[1., 2., 3.], [2., 0., 0.]])})
    >>> meter, routing = MacMeter(), RoutingStats()
    >>> count_batch(meter, routing, out, apc_macs=10)
    >>> meter.per_frame(), routing.summary()
    ({'big_net': 5.0, 'apc': 10.0, 'total': 15.0}, {'mean_steps': 2.0})
    """
    mask = torch.arange(out.log_probs.shape[1], device=out.lengths.device)[None, :] < out.lengths[:, None]
    meter.update(out.frame_macs, int(out.lengths.sum()), uniform={"apc": apc_macs} if apc_macs is not None else {})
    routing.update(out.stats, mask)


def static_flop_rows(encoder: nn.Module, apc_macs: int) -> Dict[str, float]:
    """Per-component MACs per frame of an :class:`~surprisal_cc.model.nnet.Encoder` (its
    ``component_macs()``) and of the APC model, plus the big-only / small-only totals when it
    routes between a small and a big network (paper Table 1 rows).

    Example
    -------
    >>> class Routed:  # any encoder: only its component_macs() is read
    ...     def component_macs(self):
    ...         return {"pre_net": 10, "small_net": 100, "big_net": 400, "post_net": 20, "controller": 2}
    >>> rows = static_flop_rows(Routed(), apc_macs=50)
    >>> rows["big-only"], rows["small-only"]
    (480, 180)
    """
    rows: Dict[str, float] = {"apc": apc_macs, **encoder.component_macs()}
    if "small_net" in rows:
        shared = rows["apc"] + rows.get("pre_net", 0) + rows.get("post_net", 0)
        rows["big-only"] = shared + rows["big_net"]
        rows["small-only"] = shared + rows["small_net"]
    return rows


def expected_macs_at_mean_p_big(rows: Mapping[str, float], mean_p_big: float) -> float:
    """Expected MACs per frame of a model that routes between a small and a big network when its
    controller sends on average a fraction ``mean_p_big`` of the frames to the big one.

    Exactly one of the two networks runs per frame, so the cost is
    ``small-only + mean_p_big * (big-only - small-only)``, plus the controller's own MACs (which
    the small-only and big-only rows leave out): the inverse of
    :func:`~surprisal_cc.model.calibration.target_mean_for_budget`, controller included.

    Arguments
    ---------
    rows : mapping of str to float
        :func:`static_flop_rows` of a routed encoder (``small-only``, ``big-only`` and, when it has
        one, ``controller``).
    mean_p_big : float
        Mean p_big (e.g. the controller's ``controller_target_mean``), in [0, 1].

    Returns
    -------
    float
        Expected MACs per frame.

    Example
    -------
    >>> rows = {"small-only": 2e6, "big-only": 6e6, "controller": 2}
    >>> expected_macs_at_mean_p_big(rows, 0.25)
    3000002.0
    >>> from surprisal_cc.model.calibration import target_mean_for_budget
    >>> target_mean_for_budget(3000002.0 - rows["controller"], rows["small-only"], rows["big-only"])
    0.25
    """
    small, big = rows["small-only"], rows["big-only"]
    return small + mean_p_big * (big - small) + rows.get("controller", 0)


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
