"""CTC encoders: the conditional (small/big) encoder with real routing (the interface every encoder
shares, :class:`~surprisal_cc.model.nnet.Encoder`, is in :mod:`surprisal_cc.model.nnet`; the model files and
:func:`~surprisal_cc.model.architectures.build_encoder`, which builds any encoder, in :mod:`surprisal_cc.model.architectures`).

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
>>> from surprisal_cc.model.architectures import build_encoder
>>> enc = build_encoder("conditional", input_size=512, num_outputs=42, controller="random")
>>> out = enc(torch.randn(2, 9, 512), torch.tensor([9, 5]))
>>> out.log_probs.shape, int(out.stats["use_big"][1, 5:].sum())
(torch.Size([2, 9, 42]), 0)
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor, nn

from surprisal_cc.model.controllers import ConstantController, Controller
from surprisal_cc.model.flops import module_macs, uniform_frame_macs
from surprisal_cc.model.nnet import Encoder, EncoderOutput, FrameNet, lengths_to_mask


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
    b, t = lengths_to_mask(lengths.to(x.device), x.shape[1]).nonzero(as_tuple=True)
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
    controller : :class:`~surprisal_cc.model.controllers.Controller` deciding per frame.
    controller_at_train, controller_at_test : if False, that stage uses a random p = 0.5 controller
        instead (the paper's ablation "surprisal during training/testing off").
    train_stochastic, test_stochastic : Bernoulli sampling (True) or ``p_big > 0.5`` (False). A
        controller that routes by chance (random) is always sampled: False is refused for its stage.
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
        for training, key in ((True, "train_stochastic"), (False, "test_stochastic")):
            if not getattr(self, key):
                self._check_deterministic_routing(training, key)

    def stage_controller(self, training: bool) -> Controller:
        """The controller that routes in training (True) or evaluation (False)."""
        use_main = self.controller_at_train if training else self.controller_at_test
        return self.controller if use_main else self.random_controller

    def active_controller(self) -> Controller:
        """The controller that routes in the current mode (``self.training``)."""
        return self.stage_controller(self.training)

    def routing_draws(self) -> bool:
        """Whether the test-time controller draws from ``p_big`` (surprisal, random; not learned,
        big-only or small-only, whose decisions are fixed)."""
        return self.stage_controller(False).draws

    def set_test_sampling(self, sampled: bool) -> None:
        """Bernoulli draws from ``p_big`` at test time (True) or ``p_big > 0.5`` (False). ValueError for
        True where the test-time controller draws nothing (learned, big-only, small-only), and for False
        where it routes by chance (random)."""
        if sampled and not self.routing_draws():
            raise ValueError(f"this model's routing draws nothing ({self.routing_kind()})")
        if not sampled:
            self._check_deterministic_routing(False)
        self.test_stochastic = bool(sampled)

    def _check_deterministic_routing(self, training: bool, setting: Optional[str] = None) -> None:
        """ValueError where the controller of the training (True) or test (False) stage routes by chance
        (random: the same p_big on every frame), so that deterministic routing (``p_big > 0.5``) would run
        one network on every frame. ``setting`` names the constructor option that asked for it
        (``train_stochastic``, ``test_stochastic``); None: :meth:`set_test_sampling`."""
        controller = self.stage_controller(training)
        if not controller.routes_by_chance:
            return
        if setting is None:
            raise ValueError(f"the {controller.name!r} controller routes by chance (the same p_big on every "
                             "frame): deterministic routing would run one network on every frame")
        raise ValueError(f"{setting} False with the {controller.name!r} controller, which routes by chance (the same "
                         f"p_big on every frame), would run one network on every frame: set {setting} True")

    def routing_kind(self) -> str:
        return f"{type(self).__name__}, {self.stage_controller(False).name} controller"

    def needs_surprisal(self, training: bool) -> bool:
        return self.stage_controller(training).uses_surprisal

    def component_macs(self) -> Dict[str, int]:
        """Static MACs per frame of each component; ``controller`` is the trained controller's, also
        where ``controller_at_test: False`` routes by chance at test (which costs nothing, and what ran
        is what the measured MACs charge)."""
        return {
            "pre_net": module_macs(self.pre_net),
            "small_net": module_macs(self.small_net),
            "big_net": module_macs(self.big_net),
            "post_net": module_macs(self.post_net),
            "controller": self.controller.macs_per_frame(),
        }

    def forward(self, feats: Tensor, lengths: Tensor, surprisal: Optional[Tensor] = None) -> EncoderOutput:
        lengths = lengths.to(feats.device)
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
        ran_on = {  # the frames each component of component_macs() ran on
            "pre_net": mask,
            "small_net": mask if both else (~decision.use_big) & mask,
            "big_net": mask if both else decision.use_big & mask,
            "post_net": mask,
            "controller": mask,
        }
        macs = {**self.component_macs(), "controller": controller.macs_per_frame()}  # the controller that ran
        frame_macs = {name: uniform_frame_macs(macs[name], frames) for name, frames in ran_on.items()}
        return EncoderOutput(
            log_probs=torch.log_softmax(logits, dim=-1),
            lengths=lengths,
            aux_loss=decision.aux_loss,
            frame_macs=frame_macs,
            stats={"p_big": decision.p_big, "use_big": decision.use_big},
        )

