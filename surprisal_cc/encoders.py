"""CTC encoders: the encoder interface and the conditional (small/big) encoder with real routing.

Every encoder maps features (B, T, D) with exact frame lengths (and, when it needs it, per-frame
surprisal) to an :class:`EncoderOutput`: CTC log-probabilities, an auxiliary loss to add to the
CTC loss, the MACs that actually ran on every real frame per component, and per-frame statistics.

:class:`ConditionalEncoder` (paper Fig. 1): pre-net -> per frame either the small or the big
network -> post-net. Routing gathers the real frames chosen for each network, runs each network
only on its frames and scatters the results back (``execution="routed"``). ``execution="masked"``
runs both networks on every real frame and selects with the mask, as the paper's public code did;
it is a reference for tests and benchmarks and is charged for both networks. The learned
controller's default estimator needs both outputs, so its training runs masked (evaluation routes).

Example
-------
>>> import torch
>>> from surprisal_cc.controllers import build_controller
>>> enc = ConditionalEncoder.paper(input_size=512, num_outputs=42, controller=build_controller("random"))
>>> out = enc(torch.randn(2, 9, 512), torch.tensor([9, 5]))
>>> out.log_probs.shape, int(out.stats["use_big"][1, 5:].sum())
(torch.Size([2, 9, 42]), 0)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence

import torch
from torch import Tensor, nn

from .controllers import ConstantController, Controller
from .features import lengths_to_mask
from .flops import module_macs, uniform_frame_macs


@dataclass
class EncoderOutput:
    log_probs: Tensor  # (B, T, V) CTC log-probabilities
    lengths: Tensor  # (B,) frame counts
    aux_loss: Tensor  # scalar added to the CTC loss (controller penalty, ponder cost, KL)
    frame_macs: Dict[str, Tensor]  # component -> (B, T) MACs that ran per real frame
    stats: Dict[str, Tensor] = field(default_factory=dict)  # per-frame statistics, e.g. p_big, steps


class Encoder(nn.Module):
    """Interface of all CTC encoders (conditional, ACT, PonderNet)."""

    def needs_surprisal(self, training: bool) -> bool:
        return False

    def component_macs(self) -> Dict[str, int]:
        """Static MACs per frame of each component (one step / one branch each)."""
        raise NotImplementedError

    def forward(self, feats: Tensor, lengths: Tensor, surprisal: Optional[Tensor] = None) -> EncoderOutput:
        raise NotImplementedError


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------
def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse every sequence of ``x`` (B, T, D) within its own length; padding stays at the end.

    An involution: ``reverse_padded(reverse_padded(x, l), l)`` equals ``x``.
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
        forward_out, _ = self.forward_gru(x)
        backward_out, _ = self.backward_gru(reverse_padded(x, lengths))
        out = torch.cat([forward_out, reverse_padded(backward_out, lengths)], dim=-1)
        return self.dropout(out) * lengths_to_mask(lengths, x.shape[1]).unsqueeze(-1)


class Conv1dPreNet(nn.Module):
    """Conv1D over time ('same' length, zero outside real frames) -> LeakyReLU -> dropout (Appendix A)."""

    def __init__(self, input_size: int, channels: int = 512, kernel_size: int = 11, dropout: float = 0.0,
                 leaky_slope: float = 0.125):
        super().__init__()
        self.conv = nn.Conv1d(input_size, channels, kernel_size, padding=kernel_size // 2)
        self.activation = nn.LeakyReLU(leaky_slope)
        self.dropout = nn.Dropout(dropout)
        self.output_size = channels

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        mask = lengths_to_mask(lengths, x.shape[1]).unsqueeze(-1)
        y = self.conv((x * mask).transpose(1, 2)).transpose(1, 2)
        return self.dropout(self.activation(y)) * mask


class FrameNet(nn.Module):
    """Per-frame network for the routed branches: [dropout] -> Linear/LeakyReLU stack.

    ``sizes = [in, hidden..., out]``. With ``context = k > 1`` the first layer sees a window of k
    frames centred on the frame (a Conv1D of length k evaluated only at the routed frames).
    """

    def __init__(self, sizes: Sequence[int], context: int = 1, input_dropout: float = 0.0,
                 leaky_slope: float = 0.125, final_activation: bool = True):
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
        return self.net(frames)


class PostNet(nn.Module):
    """Post-net: BiGRU + dropout, then Linear to the CTC outputs (or Linear only if ``hidden_size`` is 0)."""

    def __init__(self, input_size: int, num_outputs: int, hidden_size: int = 256, dropout: float = 0.5):
        super().__init__()
        self.rnn = BiGRU(input_size, hidden_size, dropout=dropout) if hidden_size else None
        self.output = nn.Linear(2 * hidden_size if hidden_size else input_size, num_outputs)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        return self.output(self.rnn(x, lengths) if self.rnn is not None else x)


def _gather_rows(flat: Tensor, time: int, lengths: Tensor, positions: Tensor, context: int = 1) -> Tensor:
    """Rows of ``flat`` (B*T, D), a flattened (B, T, D) batch, at flat positions ``b*T + t`` -> (N, D*context).

    One ``index_select``. With context k > 1, frames t - k//2 .. t + k//2 of the same utterance are
    concatenated (zeros outside its real frames), in the layout of a Conv1D over time.
    """
    if context == 1:
        return flat.index_select(0, positions)
    offsets = torch.arange(context, device=flat.device) - context // 2
    b = torch.div(positions, time, rounding_mode="floor")
    start = b * time
    times = (positions - start)[:, None] + offsets[None, :]
    valid = (times >= 0) & (times < lengths.to(flat.device)[b][:, None])
    windows = flat.index_select(0, (start[:, None] + times.clamp(0, time - 1)).reshape(-1))
    windows = windows.view(len(positions), context, -1) * valid.unsqueeze(-1).to(flat.dtype)
    return windows.transpose(1, 2).reshape(len(positions), -1)


def gather_frames(x: Tensor, lengths: Tensor, batch_idx: Tensor, time_idx: Tensor, context: int = 1) -> Tensor:
    """Rows of ``x`` (B, T, D) at (batch_idx, time_idx) -> (N, D * context).

    With context k > 1, frames t - k//2 .. t + k//2 are concatenated (zeros outside the real frames),
    in the layout of a Conv1D over time.
    """
    batch, time, dim = x.shape
    return _gather_rows(x.reshape(batch * time, dim), time, lengths, batch_idx * time + time_idx, context)


def route_frames(
    x: Tensor,
    lengths: Tensor,
    use_big: Tensor,
    small_net: FrameNet,
    big_net: FrameNet,
    gate: Optional[Tensor] = None,
) -> Tensor:
    """Run ``big_net`` only on the real frames with ``use_big`` and ``small_net`` only on the others.

    Returns (B, T, out) with zeros on padding, in the networks' output dtype (bf16 under autocast).
    ``gate`` (B, T), equal to ``use_big`` in value, carries a straight-through gradient: big outputs
    are multiplied by ``gate`` and small outputs by ``1 - gate``, so d(output)/d(gate) is +big(x) on
    big frames and -small(x) on small frames.

    The batch is handled as (B*T, D) rows. The real rows of both networks are gathered with one
    ``index_select`` on flat positions (big rows first) and split, and the outputs go back into one
    zero output with ``index_copy_`` (two in place; one of the concatenated outputs when autograd
    records, so the backward pass is one ``index_select`` and one ``index_add_``). When every real
    frame goes to one network only that network runs, on the real rows; on a batch without padding
    (and context 1) it runs on the flat batch itself, with no gather and no scatter.
    """
    batch, time, dim = x.shape
    rows = batch * time
    flat = x.reshape(rows, dim)
    real = lengths_to_mask(lengths.to(x.device), time).reshape(rows)
    big = use_big.reshape(rows).to(x.device) & real
    n_real, n_big = torch.stack([real.sum(), big.sum()]).tolist()
    if n_real == 0:
        return x.new_zeros(batch, time, big_net.output_size)

    def gated(y: Tensor, positions: Optional[Tensor], sign: float) -> Tensor:
        """``y`` times the gate at ``positions`` (None: every row) for big rows, 1 - gate for small rows."""
        if gate is None:
            return y
        g = gate.reshape(rows) if positions is None else gate.reshape(rows).index_select(0, positions)
        g = g.unsqueeze(-1)
        return y * (g if sign > 0 else 1.0 - g)

    if n_big in (0, n_real):  # every real frame goes to one network
        net, sign = (big_net, 1.0) if n_big else (small_net, -1.0)
        if n_real == rows and net.context == 1:  # no padding: the flat batch as it is
            return gated(net(flat), None, sign).reshape(batch, time, -1)
        positions = real.nonzero().squeeze(1)
        y = gated(net(_gather_rows(flat, time, lengths, positions, net.context)), positions, sign)
        return y.new_zeros(rows, y.shape[-1]).index_copy_(0, positions, y).view(batch, time, -1)

    big_positions = big.nonzero().squeeze(1)
    small_positions = (real & ~big).nonzero().squeeze(1)
    positions = torch.cat([big_positions, small_positions])
    if big_net.context == small_net.context:
        big_in, small_in = _gather_rows(flat, time, lengths, positions, big_net.context).split(
            [n_big, n_real - n_big])
    else:
        big_in = _gather_rows(flat, time, lengths, big_positions, big_net.context)
        small_in = _gather_rows(flat, time, lengths, small_positions, small_net.context)
    y_big = gated(big_net(big_in), big_positions, 1.0)
    y_small = gated(small_net(small_in), small_positions, -1.0).to(y_big.dtype)
    out = y_big.new_zeros(rows, y_big.shape[-1])  # the networks' output dtype (bf16 under autocast)
    if y_big.requires_grad or y_small.requires_grad:
        out.index_copy_(0, positions, torch.cat([y_big, y_small]))
    else:
        out.index_copy_(0, big_positions, y_big)
        out.index_copy_(0, small_positions, y_small)
    return out.view(batch, time, -1)


def masked_mixture(x: Tensor, lengths: Tensor, use_big: Tensor, small_net: FrameNet, big_net: FrameNet,
                   gate: Optional[Tensor] = None) -> Tensor:
    """Run both networks on every real frame and mix them: ``m * big(x) + (1 - m) * small(x)``.

    ``m`` is ``gate`` when given (so d(output)/d(gate) is big(x) - small(x) on every real frame),
    else the 0/1 ``use_big``. Returns (B, T, out) with zeros on padding.
    """
    b, t = lengths_to_mask(lengths, x.shape[1]).nonzero(as_tuple=True)
    big = big_net(gather_frames(x, lengths, b, t, big_net.context))
    small = small_net(gather_frames(x, lengths, b, t, small_net.context))
    m = (gate[b, t] if gate is not None else use_big[b, t]).to(big.dtype).unsqueeze(-1)
    y = m * big + (1.0 - m) * small
    return y.new_zeros(x.shape[0], x.shape[1], big_net.output_size).index_put((b, t), y)


# ----------------------------------------------------------------------------------------------
# Conditional encoder
# ----------------------------------------------------------------------------------------------
class ConditionalEncoder(Encoder):
    """pre-net -> (small | big per frame) -> post-net -> CTC log-probabilities.

    Arguments
    ---------
    pre_net, post_net : modules called as ``module(x, lengths)``, or None (Appendix A models).
        Without a post-net the small and big networks output the CTC logits themselves.
    small_net, big_net : :class:`FrameNet`.
    controller : :class:`~surprisal_cc.controllers.Controller` deciding per frame.
    controller_at_train, controller_at_test : if False, that stage uses a random p = 0.5 controller
        instead (the paper's ablation "surprisal during training/testing off").
    train_stochastic, test_stochastic : Bernoulli sampling (True) or ``p_big > 0.5`` (False).
    test_bias_shift : added to the controller logit at test time (Appendix B sweep).
    execution : "routed" (default) or "masked" (both networks on every real frame, mixed by the
        decision; a reference, charged for both networks). A controller with
        ``both_networks_in_training`` (the learned controller's default estimator) makes training
        run masked, so its gate gets the gradient big(x) - small(x); evaluation then stays routed.
    """

    def __init__(
        self,
        small_net: FrameNet,
        big_net: FrameNet,
        controller: Controller,
        pre_net: Optional[nn.Module] = None,
        post_net: Optional[nn.Module] = None,
        controller_at_train: bool = True,
        controller_at_test: bool = True,
        train_stochastic: bool = True,
        test_stochastic: bool = True,
        test_bias_shift: float = 0.0,
        execution: str = "routed",
    ):
        super().__init__()
        if execution not in ("routed", "masked"):
            raise ValueError(f"execution must be 'routed' or 'masked', got {execution!r}")
        if small_net.output_size != big_net.output_size:
            raise ValueError(f"small and big networks must have the same output size "
                             f"({small_net.output_size} != {big_net.output_size})")
        self.pre_net, self.small_net, self.big_net, self.post_net = pre_net, small_net, big_net, post_net
        self.controller = controller
        self.random_controller = ConstantController(0.5)
        self.controller_at_train, self.controller_at_test = controller_at_train, controller_at_test
        self.train_stochastic, self.test_stochastic = train_stochastic, test_stochastic
        self.test_bias_shift = test_bias_shift
        self.execution = execution

    @classmethod
    def paper(cls, input_size: int, num_outputs: int, controller: Controller, **kwargs) -> "ConditionalEncoder":
        """The architecture of the paper's main experiments (Sec. 4.2, Table 1)."""
        return cls(controller=controller, **conditional_architecture("paper", input_size, num_outputs), **kwargs)

    def active_controller(self) -> Controller:
        use_main = self.controller_at_train if self.training else self.controller_at_test
        return self.controller if use_main else self.random_controller

    def needs_surprisal(self, training: bool) -> bool:
        use_main = self.controller_at_train if training else self.controller_at_test
        return use_main and self.controller.uses_surprisal

    def component_macs(self) -> Dict[str, int]:
        return {
            "pre_net": module_macs(self.pre_net),
            "small_net": module_macs(self.small_net),
            "big_net": module_macs(self.big_net),
            "post_net": module_macs(self.post_net),
            "controller": self.controller.macs_per_frame(),
        }

    def forward(self, feats: Tensor, lengths: Tensor, surprisal: Optional[Tensor] = None) -> EncoderOutput:
        mask = lengths_to_mask(lengths, feats.shape[1])
        x = self.pre_net(feats, lengths) if self.pre_net is not None else feats
        controller = self.active_controller()
        stochastic = self.train_stochastic if self.training else self.test_stochastic
        bias_shift = 0.0 if self.training else self.test_bias_shift
        decision = controller(feats, surprisal, mask, stochastic=stochastic, bias_shift=bias_shift)
        both = self.execution == "masked" or (self.training and controller.both_networks_in_training)
        mix = masked_mixture if both else route_frames
        y = mix(x, lengths, decision.use_big, self.small_net, self.big_net, decision.gate)
        logits = self.post_net(y, lengths) if self.post_net is not None else y
        macs = self.component_macs()
        big_frames = mask if both else decision.use_big & mask
        small_frames = mask if both else (~decision.use_big) & mask
        frame_macs = {
            "pre_net": uniform_frame_macs(macs["pre_net"], mask),
            "small_net": uniform_frame_macs(macs["small_net"], small_frames),
            "big_net": uniform_frame_macs(macs["big_net"], big_frames),
            "post_net": uniform_frame_macs(macs["post_net"], mask),
            "controller": uniform_frame_macs(controller.macs_per_frame(), mask),
        }
        return EncoderOutput(
            log_probs=torch.log_softmax(logits, dim=-1),
            lengths=lengths,
            aux_loss=decision.aux_loss,
            frame_macs=frame_macs,
            stats={"p_big": decision.p_big, "use_big": decision.use_big},
        )


ARCHITECTURES = ("paper", "model1", "model2", "model3")


def conditional_architecture(name: str, input_size: int, num_outputs: int, hidden_size: int = 256,
                             dropout: float = 0.5, kernel_size: int = 11) -> Dict[str, Optional[nn.Module]]:
    """Pre-net, small, big and post-net of the paper's main model or of Appendix A's models 1-3."""
    width = 2 * hidden_size
    if name == "paper":
        return dict(pre_net=BiGRU(input_size, hidden_size, dropout=dropout), small_net=FrameNet([width, width]),
                    big_net=FrameNet([width, 4 * width, width]),
                    post_net=PostNet(width, num_outputs, hidden_size, dropout=dropout))
    if name in ("model1", "model2"):  # Conv1D pre-net (model 2: + dropout), small/big output the logits
        return dict(pre_net=Conv1dPreNet(input_size, width, kernel_size, dropout=dropout if name == "model2" else 0.0),
                    small_net=FrameNet([width, num_outputs], final_activation=False),
                    big_net=FrameNet([width, 4 * width, num_outputs], final_activation=False), post_net=None)
    if name == "model3":  # no pre-net: small = Conv1D to the logits, big = Conv1D 512 + Linear
        return dict(pre_net=None,
                    small_net=FrameNet([input_size, num_outputs], context=kernel_size, input_dropout=dropout,
                                       final_activation=False),
                    big_net=FrameNet([input_size, width, num_outputs], context=kernel_size, input_dropout=dropout,
                                     final_activation=False), post_net=None)
    raise ValueError(f"unknown architecture {name!r} (hparams key 'architecture'); choose one of {ARCHITECTURES}")


def build_encoder(name: str, input_size: int, num_outputs: int, controller: str = "surprisal",
                  architecture: str = "paper", controller_options: Optional[Dict] = None,
                  conditional_options: Optional[Dict] = None, adaptive_options: Optional[Dict] = None,
                  hidden_size: int = 256, dropout: float = 0.5) -> Encoder:
    """Encoder by name (the YAML key ``encoder``): ``conditional``, ``act`` or ``pondernet``.

    Each family takes only its own options, so one hparams file carries all of them and a single
    override switches (``--encoder=act``, ``--controller=learned``, ``--architecture=model3``).
    """
    from .controllers import build_controller

    if name == "conditional":
        ctrl = build_controller(controller, input_size=input_size, **(controller_options or {}))
        parts = conditional_architecture(architecture, input_size, num_outputs, hidden_size, dropout)
        return ConditionalEncoder(controller=ctrl, **parts, **(conditional_options or {}))
    from .adaptive import ADAPTIVE_ENCODERS

    if name in ADAPTIVE_ENCODERS:
        return ADAPTIVE_ENCODERS[name](input_size=input_size, num_outputs=num_outputs, hidden_size=hidden_size,
                                       dropout=dropout, **(adaptive_options or {}).get(name, {}))
    raise ValueError(f"unknown encoder {name!r} (hparams key 'encoder'); "
                     f"choose one of {['conditional', *sorted(ADAPTIVE_ENCODERS)]}")
