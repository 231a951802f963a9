"""Neural building blocks and the encoder interface shared by every CTC encoder.

:class:`Encoder` is the interface of the conditional (:mod:`surprisal_cc.model.encoders`) and the
adaptive-depth (:mod:`surprisal_cc.model.adaptive`) encoders; :class:`EncoderOutput` is what they return.
The blocks (:class:`BiGRU`, :class:`Conv1dPreNet`, :class:`FrameNet`, :class:`PostNet`) are what
the model files under ``surprisal_cc/model/graphs/`` assemble.

Example
-------
>>> import torch
>>> lengths = torch.tensor([5, 3])
>>> pre = Conv1dPreNet(input_size=8, channels=6, kernel_size=3)
>>> gru = BiGRU(input_size=6, hidden_size=4, dropout=0.0)
>>> post = PostNet(input_size=8, num_outputs=5, hidden_size=4, dropout=0.0)
>>> h = gru(pre(torch.randn(2, 5, 8), lengths), lengths)
>>> h.shape, bool((h[1, 3:] == 0).all()), post(h, lengths).shape
(torch.Size([2, 5, 8]), True, torch.Size([2, 5, 5]))
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Set, Union

import torch
from speechbrain.dataio.dataio import length_to_mask
from torch import Tensor, nn

from surprisal_cc.errors import ConfigurationError


def lengths_to_mask(lengths: Tensor, max_len: Optional[int] = None) -> Tensor:
    """Boolean mask (B, T), True on real frames (SpeechBrain's ``length_to_mask`` in bool).

    Arguments
    ---------
    lengths : torch.Tensor
        (B,) frame counts (integers).
    max_len : int, optional
        Width T of the mask; None: the longest length.

    Returns
    -------
    torch.Tensor
        (B, T) bool, on the device of ``lengths``.

    Example
    -------
    >>> import torch
    >>> lengths_to_mask(torch.tensor([3, 1]), 4)
    tensor([[ True,  True,  True, False],
            [ True, False, False, False]])
    """
    return length_to_mask(lengths, max_len, dtype=torch.bool, device=lengths.device)


def with_options(factory, options: Optional[Dict[str, Any]] = None, **kwargs):
    """``factory(**kwargs, **options)``: how a model file passes an hparams mapping of settings to a
    constructor, so that settings it leaves out keep the constructor's defaults (declared once).

    Example
    -------
    >>> with_options(FrameNet, {"leaky_slope": 0.2}, sizes=[4, 2]).output_size
    2
    """
    return factory(**kwargs, **dict(options or {}))


def keyword_names(factory: Callable[..., Any]) -> Optional[Set[str]]:
    """The settings ``factory`` takes by name, or None when it takes any (``**kwargs``): what a
    mapping of settings passed to it may hold.

    Example
    -------
    >>> def prepare_toy(save_folder, *, speakers=2):
    ...     return {}
    >>> sorted(keyword_names(prepare_toy)), keyword_names(with_options)
    (['save_folder', 'speakers'], None)
    """
    parameters = inspect.signature(factory).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


#: Negative slope of every LeakyReLU of the paper's networks (APC, pre-nets, routed branches, the learned
#: controller's gate), as the authors' code has it.
LEAKY_SLOPE = 0.125

#: Hex digits of a :func:`weights_fingerprint` as results files and model folders record it.
FINGERPRINT_DIGITS = 12


def weights_fingerprint(module: nn.Module, digits: int = FINGERPRINT_DIGITS) -> str:
    """The identity of a module's weights: the first ``digits`` hex digits of the SHA-256 of its
    state_dict (names, dtypes, shapes and values), the same on every machine and device.

    Example
    -------
    >>> import copy
    >>> a = nn.Linear(2, 2)
    >>> b = copy.deepcopy(a)
    >>> weights_fingerprint(a) == weights_fingerprint(b), len(weights_fingerprint(a))
    (True, 12)
    >>> with torch.no_grad():
    ...     _ = b.bias.add_(1e-3)
    >>> weights_fingerprint(a) == weights_fingerprint(b)
    False
    """
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:digits]


@dataclass
class EncoderOutput:
    """What an :class:`Encoder` returns for one batch.

    Arguments
    ---------
    log_probs : torch.Tensor
        (B, T, V) CTC log-probabilities.
    lengths : torch.Tensor
        (B,) frame counts.
    aux_loss : torch.Tensor
        Scalar added to the CTC loss (controller penalty, ponder cost or KL term).
    frame_macs : dict of str to torch.Tensor
        Per component, the (B, T) multiply-accumulates that ran on each real frame (0 on padding).
    stats : dict of str to torch.Tensor
        Per-frame statistics, e.g. ``"p_big"``, ``"use_big"`` (conditional) or ``"steps"``
        (adaptive depth).
    """

    log_probs: Tensor  # (B, T, V) CTC log-probabilities
    lengths: Tensor  # (B,) frame counts
    aux_loss: Tensor  # scalar added to the CTC loss (controller penalty, ponder cost, KL)
    frame_macs: Dict[str, Tensor]  # component -> (B, T) MACs that ran per real frame
    stats: Dict[str, Tensor] = field(default_factory=dict)  # per-frame statistics, e.g. p_big, steps


class Encoder(nn.Module):
    """Interface of all CTC encoders (conditional, ACT, PonderNet).

    Subclasses implement :meth:`component_macs` and :meth:`forward`, and override
    :meth:`needs_surprisal` when they read the APC surprisal. The test-time routing hooks
    (:meth:`stage_controller`, :meth:`routing_draws`, :meth:`set_test_sampling`,
    :meth:`routing_kind` and :attr:`test_bias_shift`) are what inference, evaluation, realignment and
    the Brain use to set how a model routes its frames at test time (a FLOPs budget also reads the
    attribute ``test_stochastic``: :func:`~surprisal_cc.model.calibration.solve_budget`); their defaults
    describe an encoder that routes nothing at random (ACT), so a new encoder overrides only what it has.

    Example
    -------
    >>> class Plain(Encoder):  # routes nothing: the defaults
    ...     pass
    >>> enc = Plain()
    >>> enc.stage_controller(False) is None, enc.routing_draws(), enc.routing_kind()
    (True, False, 'Plain')
    >>> enc.set_test_sampling(False)  # deterministic: what it does anyway
    >>> enc.set_test_sampling(True)
    Traceback (most recent call last):
        ...
    ValueError: this model's routing draws nothing (Plain)
    """

    #: Added to the test-time controller's logit (paper Appendix B); read by an encoder whose
    #: :meth:`stage_controller` at test time shifts with a bias, 0 otherwise.
    test_bias_shift: float = 0.0

    def needs_surprisal(self, training: bool) -> bool:
        """Whether :meth:`forward` needs the APC surprisal in training (True) or evaluation (False)."""
        return False

    def stage_controller(self, training: bool) -> Optional[nn.Module]:
        """The :class:`~surprisal_cc.model.controllers.Controller` that routes frames in training (True) or
        evaluation (False); None for an encoder that no controller routes (adaptive depth)."""
        return None

    def routing_draws(self) -> bool:
        """Whether test-time routing can be drawn at random, so that ``set_test_sampling(True)``
        draws it (a controller that draws from ``p_big``; PonderNet's sampled halting)."""
        return False

    def set_test_sampling(self, sampled: bool) -> None:
        """Draw the test-time routing (True) or take its deterministic counterpart (False).
        ValueError where the routing draws nothing (:meth:`routing_draws`) and ``sampled`` is True,
        or where only a draw can route it and ``sampled`` is False."""
        if sampled:
            raise ValueError(f"this model's routing draws nothing ({self.routing_kind()})")

    def routing_kind(self) -> str:
        """What routes this encoder's frames at test time, for messages, e.g. ``"ACTEncoder"``."""
        return type(self).__name__

    def component_macs(self) -> Dict[str, int]:
        """Static MACs per frame of each component (one step / one branch each)."""
        raise NotImplementedError

    def forward(self, feats: Tensor, lengths: Tensor, surprisal: Optional[Tensor] = None) -> EncoderOutput:
        """Encode a padded batch.

        Arguments
        ---------
        feats : torch.Tensor
            (B, T, D) input features.
        lengths : torch.Tensor
            (B,) frame counts, on any device: an encoder moves them to ``feats``' device first.
        surprisal : torch.Tensor, optional
            (B, T) APC surprisal, for encoders whose :meth:`needs_surprisal` is True.

        Returns
        -------
        EncoderOutput
            Log-probabilities, lengths, auxiliary loss, per-frame MACs and statistics.
        """
        raise NotImplementedError



def routes_by_chance(encoder: Encoder) -> bool:
    """Whether only a draw routes ``encoder``'s frames at test time (the random controller: the same
    ``p_big`` on every frame, so that its routing is always sampled).

    Example
    -------
    >>> routes_by_chance(Encoder())
    False
    """
    controller = encoder.stage_controller(False)
    return controller is not None and controller.routes_by_chance


@contextlib.contextmanager
def seeded_draws(seed: Optional[int], device: Union[str, torch.device] = "cpu") -> Iterator[None]:
    """The body draws from torch's RNG seeded with ``seed`` (on ``device`` too where it is a GPU), the
    global RNG restored after; ``seed`` None: nothing changes.

    Example
    -------
    >>> with seeded_draws(3):
    ...     first = torch.rand(2)
    >>> with seeded_draws(3):
    ...     bool(torch.equal(first, torch.rand(2)))
    True
    """
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if torch.device(device).type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def bias_shift_problem(encoder: Encoder) -> Optional[str]:
    """Why a test-time bias shift cannot move ``encoder``'s routing, or None where it can: the shift
    is added to the logit of its test-time controller (:meth:`Encoder.stage_controller`), which an
    adaptive-depth encoder lacks and big-only or small-only ignore. Inference and the recipes' bias
    sweep both ask it.

    Example
    -------
    >>> bias_shift_problem(Encoder())
    'the Encoder has no controller whose logit a bias shift moves'
    """
    controller = encoder.stage_controller(False)
    if controller is None:
        return f"the {type(encoder).__name__} has no controller whose logit a bias shift moves"
    if not controller.shifts_with_bias:
        return f"the {controller.name!r} controller has no bias to shift"
    return None


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------

def unwrap(module: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel / DataParallel wrapper (the module itself otherwise).

    Example
    -------
    >>> layer = nn.Linear(2, 2)
    >>> unwrap(layer) is layer
    True
    """
    return getattr(module, "module", module)


def absolute_lengths(padded) -> Tensor:
    """Exact integer lengths from SpeechBrain's relative lengths of a PaddedData.

    Example
    -------
    >>> from speechbrain.dataio.batch import PaddedData
    >>> absolute_lengths(PaddedData(torch.zeros(2, 10), torch.tensor([1.0, 0.3]))).tolist()
    [10, 3]
    """
    return (padded.lengths * padded.data.shape[1]).round().long()

#: What an encoder reads per frame (``input_features``): APC features h_t or the filterbank frames.
INPUT_FEATURES = ("apc", "fbank")


def input_size_for(input_features: str, apc_hidden_size: int = 512, n_mels: int = 80) -> int:
    """Encoder input width: APC features (``apc``) or raw filterbanks (``fbank``).

    Example
    -------
    >>> input_size_for("apc"), input_size_for("fbank")
    (512, 80)
    """
    if input_features not in INPUT_FEATURES:
        raise ConfigurationError(f"input_features must be 'apc' or 'fbank', got {input_features!r}")
    return apc_hidden_size if input_features == "apc" else n_mels


def runs_apc(input_features: str, encoder: nn.Module, training: Optional[bool] = None) -> bool:
    """Whether a model runs the APC: for its features (``input_features == "apc"``) or for the
    surprisal ``encoder`` (possibly wrapped, e.g. by DDP) reads in training (``training=True``),
    evaluation (``False``) or either (``None``: what preparing a training run must provide).

    Example
    -------
    >>> runs_apc("fbank", Encoder()), runs_apc("apc", Encoder())
    (False, True)
    """
    encoder = unwrap(encoder)
    modes = (True, False) if training is None else (training,)
    return input_features == "apc" or any(encoder.needs_surprisal(mode) for mode in modes)


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse every sequence of ``x`` (B, T, D) within its own length; padding stays at the end.

    An involution: ``reverse_padded(reverse_padded(x, l), l)`` equals ``x``.

    Arguments
    ---------
    x : torch.Tensor
        (B, T, D) padded batch, padding at the end.
    lengths : torch.Tensor
        (B,) frame counts.

    Returns
    -------
    torch.Tensor
        (B, T, D): frames ``0 .. lengths[b] - 1`` of each sequence in reverse order, padding unmoved.

    Example
    -------
    >>> import torch
    >>> x = torch.tensor([[1., 2., 3., 0.], [4., 5., 0., 0.]]).unsqueeze(-1)
    >>> reverse_padded(x, torch.tensor([3, 2])).squeeze(-1).tolist()
    [[3.0, 2.0, 1.0, 0.0], [5.0, 4.0, 0.0, 0.0]]
    """
    time = torch.arange(x.shape[1], device=x.device)[None, :]
    lengths = lengths.to(x.device)[:, None]
    index = torch.where(time < lengths, lengths - 1 - time, time)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


class BiGRU(nn.Module):
    """Bidirectional GRU over real frames only, then dropout.

    The backward direction runs on each sequence reversed within its own length, so padding
    (kept at the end) never reaches a real frame: exact like a packed sequence, as fast as an
    unpacked ``nn.GRU`` (which lets padding into the backward direction), and much faster than
    PyTorch's packed GRU on the CPU (``benchmarks/bench_rnn.py``). Same parameters and MACs as
    ``nn.GRU(bidirectional=True)``.

    Arguments
    ---------
    input_size : int
        Width of the input frames.
    hidden_size : int
        Units per direction; the output has ``2 * hidden_size`` (``output_size``).
    num_layers : int
        Must be 1 (stack BiGRU modules for more layers).
    dropout : float
        Dropout on the output.

    Example
    -------
    >>> import torch
    >>> gru = BiGRU(input_size=8, hidden_size=4, dropout=0.0)
    >>> out = gru(torch.randn(2, 5, 8), torch.tensor([5, 3]))
    >>> out.shape, gru.output_size, bool((out[1, 3:] == 0).all())
    (torch.Size([2, 5, 8]), 8, True)
    """

    def __init__(self, input_size: int, hidden_size: int = 256, num_layers: int = 1, dropout: float = 0.5):
        super().__init__()
        if num_layers != 1:
            raise ValueError("BiGRU supports one layer; stack BiGRU modules for more")
        self.forward_gru = nn.GRU(input_size, hidden_size, batch_first=True)
        self.backward_gru = nn.GRU(input_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.output_size = 2 * hidden_size

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """(B, T, input_size) frames, (B,) lengths -> (B, T, 2 * hidden_size), zero on padding."""
        lengths = lengths.to(x.device)
        forward_out, _ = self.forward_gru(x)
        backward_out, _ = self.backward_gru(reverse_padded(x, lengths))
        out = torch.cat([forward_out, reverse_padded(backward_out, lengths)], dim=-1)
        return self.dropout(out) * lengths_to_mask(lengths, x.shape[1]).unsqueeze(-1)


class Conv1dPreNet(nn.Module):
    """Conv1D over time ('same' length, zero outside real frames) -> LeakyReLU -> dropout (Appendix A).

    Arguments
    ---------
    input_size : int
        Width of the input frames.
    channels : int
        Output channels (``output_size``).
    kernel_size : int
        Frames the convolution sees (odd, so that the output keeps the input's length).
    dropout : float
        Dropout on the output.
    leaky_slope : float
        Negative slope of the LeakyReLU.

    Example
    -------
    >>> import torch
    >>> pre = Conv1dPreNet(input_size=8, channels=6, kernel_size=3)
    >>> y = pre(torch.randn(2, 5, 8), torch.tensor([5, 2]))
    >>> y.shape, bool((y[1, 2:] == 0).all())
    (torch.Size([2, 5, 6]), True)
    """

    def __init__(self, input_size: int, channels: int = 512, kernel_size: int = 11, dropout: float = 0.0,
                 leaky_slope: float = LEAKY_SLOPE):
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"Conv1dPreNet kernel_size must be a positive odd number (the output keeps the "
                             f"input's length), got {kernel_size}")
        self.conv = nn.Conv1d(input_size, channels, kernel_size, padding=kernel_size // 2)
        self.activation = nn.LeakyReLU(leaky_slope)
        self.dropout = nn.Dropout(dropout)
        self.output_size = channels

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """(B, T, input_size) frames, (B,) lengths -> (B, T, channels), zero on padding."""
        mask = lengths_to_mask(lengths.to(x.device), x.shape[1]).unsqueeze(-1)
        y = self.conv((x * mask).transpose(1, 2)).transpose(1, 2)
        return self.dropout(self.activation(y)) * mask


class FrameNet(nn.Module):
    """Per-frame network for the routed branches: [dropout] -> Linear/LeakyReLU stack.

    ``sizes = [in, hidden..., out]``. With ``context = k > 1`` the first layer sees a window of k
    frames centred on the frame (a Conv1D of length k evaluated only at the routed frames).

    Arguments
    ---------
    sizes : sequence of int
        ``[in, hidden..., out]``: width of a frame, of the hidden layers and of the output.
    context : int
        Frames per input window (odd); the input rows are ``in * context`` wide, the k frames
        concatenated (see :func:`~surprisal_cc.model.encoders.gather_frames`).
    input_dropout : float
        Dropout on the input (none when 0).
    leaky_slope : float
        Negative slope of the LeakyReLUs.
    final_activation : bool
        Whether the last Linear is followed by a LeakyReLU too.

    Example
    -------
    >>> import torch
    >>> net = FrameNet([4, 16, 2], context=3)
    >>> net(torch.randn(7, 12)).shape, net.input_size, net.output_size
    (torch.Size([7, 2]), 4, 2)
    """

    def __init__(self, sizes: Sequence[int], context: int = 1, input_dropout: float = 0.0,
                 leaky_slope: float = LEAKY_SLOPE, final_activation: bool = True):
        super().__init__()
        if context < 1 or context % 2 == 0:
            raise ValueError(f"FrameNet context must be a positive odd number, got {context}")
        self.context = context
        layers = [nn.Dropout(input_dropout)] if input_dropout else []
        dims = [sizes[0] * context, *sizes[1:]]
        for i, (n_in, n_out) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(n_in, n_out))
            if final_activation or i < len(dims) - 2:
                layers.append(nn.LeakyReLU(leaky_slope))
        self.net = nn.Sequential(*layers)
        self.input_size, self.output_size = sizes[0], sizes[-1]

    def forward(self, frames: Tensor) -> Tensor:
        """(N, in * context) frame windows -> (N, out)."""
        return self.net(frames)


class PostNet(nn.Module):
    """Post-net: BiGRU + dropout, then Linear to the CTC outputs (or Linear only if ``hidden_size`` is 0).

    Arguments
    ---------
    input_size : int
        Width of the input frames.
    num_outputs : int
        CTC outputs (labels and blank).
    hidden_size : int
        Units per direction of the BiGRU; 0: no BiGRU.
    dropout : float
        Dropout after the BiGRU.

    Example
    -------
    >>> import torch
    >>> post = PostNet(input_size=8, num_outputs=5, hidden_size=4, dropout=0.0)
    >>> post(torch.randn(2, 5, 8), torch.tensor([5, 3])).shape
    torch.Size([2, 5, 5])
    """

    def __init__(self, input_size: int, num_outputs: int, hidden_size: int = 256, dropout: float = 0.5):
        super().__init__()
        self.rnn = BiGRU(input_size, hidden_size, dropout=dropout) if hidden_size else None
        self.output = nn.Linear(2 * hidden_size if hidden_size else input_size, num_outputs)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """(B, T, input_size) frames, (B,) lengths -> (B, T, num_outputs) logits."""
        return self.output(self.rnn(x, lengths) if self.rnn is not None else x)


