"""Controllers: per-frame choice between the small (0) and the big (1) network.

One interface, :class:`Controller`: ``probability(features, surprisal, mask=mask)`` gives p_big per frame,
``forward(...)`` turns it into a :class:`Decision` (Bernoulli sample when ``stochastic``, else
``p_big > 0.5``; the learned controller always thresholds), restricted to real frames.
Implementations:

=============  =====================================================================
name           rule
=============  =====================================================================
surprisal      p = sigmoid(w * surprisal + b); w, b calibrated once, then frozen
random         p fixed (default 0.5)
learned        MLP on the features (80 hidden units), s_t = [logit > 0], straight-through
               gradient, penalty lambda * U * mean over utterances of sum_t (s_t - 0.5)^2
               (U = 32; or the authors' sum over the batch's real frames)
big_only       p = 1
small_only     p = 0
=============  =====================================================================

Example
-------
>>> import torch
>>> ctrl = build_controller("surprisal", weight=1.0, bias=-2.0)
>>> mask = torch.ones(1, 4, dtype=torch.bool)
>>> d = ctrl(torch.zeros(1, 4, 512), torch.tensor([[0., 1., 3., 5.]]), mask, stochastic=False)
>>> d.use_big.tolist()
[[False, False, True, True]]
"""
from __future__ import annotations

import logging
import math
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

from .flops import static_flop_rows
from .nnet import keyword_names

logger = logging.getLogger(__name__)


class Decision(NamedTuple):
    """Output of a controller for one batch: probabilities, decisions, gate and auxiliary loss."""

    p_big: Tensor  # (B, T) probability of the big network, zero on padding
    use_big: Tensor  # (B, T) bool, False on padding
    gate: Optional[Tensor]  # (B, T) float equal to use_big with a straight-through gradient, or None
    aux_loss: Tensor  # scalar added to the task loss


class Controller(nn.Module):
    """Base class of the per-frame controllers.

    Subclasses implement :meth:`probability` (and may override :meth:`forward`). The class
    attribute ``uses_surprisal`` says whether the controller reads the APC surprisal;
    ``both_networks_in_training`` whether the encoder must run both networks on every real frame
    during training.

    The methods share these arguments: ``features`` (B, T, D), the input features of the encoder
    (the APC features, or filterbanks with ``input_features: fbank``); ``surprisal`` (B, T), the APC
    surprisal, or None when no APC model runs; ``bias_shift``, a float added to the controller's
    logit (the paper's test-time bias sweep); ``mask`` (B, T) bool, True on real frames.
    """

    uses_surprisal = False
    # The name build_controller and the hparams key ``controller`` know this controller by.
    name = "controller"
    # True: during training the encoder runs both networks on every real frame and mixes them
    # with the gate (the gradient the controller's estimator needs); evaluation always routes.
    both_networks_in_training = False
    # True: a bias shift added to the logit moves p_big (the test-time bias sweep applies).
    shifts_with_bias = True
    # True: ``stochastic=True`` draws the routing from p_big (sampled routing has something to draw).
    draws = True
    # True: p_big does not depend on the input, so only a draw routes (the deterministic rule
    # p_big > 0.5 would send every frame to one network): such a controller is always sampled.
    routes_by_chance = False
    # True: p_big = sigmoid(weight * surprisal + bias) with the buffers ``weight``, ``bias`` and
    # ``calibrated`` (SurprisalController's): the recipes fit w, b to the target p_big statistics before
    # training (calibrate_surprisal_controller), and a test-time FLOPs budget solves for its bias shift.
    calibrates_on_surprisal = False

    def probability(self, features: Tensor, surprisal: Optional[Tensor], *, bias_shift: float = 0.0,
                    mask: Optional[Tensor] = None) -> Tensor:
        """Probability p_big of the big network per frame.

        ``features``, ``surprisal``, ``bias_shift`` and ``mask`` (None: every frame is real): see the
        class docstring. A rule that pools over an utterance (a mean, a z-score) must read only the
        frames of ``mask``, so that an utterance's p_big does not depend on its batch's padding.

        Returns
        -------
        torch.Tensor
            (B, T) probabilities in [0, 1].
        """
        raise NotImplementedError

    def macs_per_frame(self) -> int:
        """Multiply-accumulates per frame (paper convention: parameters used per frame); a rule that
        computes more per frame than it has parameters overrides this."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        features: Tensor,
        surprisal: Optional[Tensor],
        mask: Tensor,
        *,
        stochastic: bool = True,
        bias_shift: float = 0.0,
    ) -> Decision:
        """Decide per frame which network runs.

        ``features``, ``surprisal`` and ``bias_shift``: see the class docstring.

        Arguments
        ---------
        mask : torch.Tensor
            (B, T) bool, True on real frames.
        stochastic : bool
            Bernoulli sampling (True) or the rule ``p_big > 0.5`` (False).

        Returns
        -------
        Decision
            ``p_big`` (float32, also under autocast) and ``use_big`` are zero / False on padding; no
            gate, zero auxiliary loss.
        """
        p_big = torch.where(mask, self.probability(features, surprisal, bias_shift=bias_shift, mask=mask).float(), 0.0)
        use_big = sample_decisions(p_big, stochastic) & mask
        return Decision(p_big, use_big, None, p_big.new_zeros(()))


def sample_decisions(p_big: Tensor, stochastic: bool) -> Tensor:
    """Bernoulli(p_big) when stochastic, else the deterministic rule p_big > 0.5.

    Arguments
    ---------
    p_big : torch.Tensor
        Probabilities of the big network, any shape.
    stochastic : bool
        Sample (True) or threshold (False).

    Returns
    -------
    torch.Tensor
        Bool tensor of the shape of ``p_big``: True where the big network runs.

    Example
    -------
    >>> import torch
    >>> sample_decisions(torch.tensor([0.2, 0.5, 0.7]), stochastic=False).tolist()
    [False, False, True]
    >>> sample_decisions(torch.tensor([0.0, 1.0]), stochastic=True).tolist()
    [False, True]
    """
    if stochastic:
        return torch.rand_like(p_big) < p_big
    return p_big > 0.5


class ConstantController(Controller):
    """p_big fixed for every frame: random (0 < p < 1), big-only (p = 1) or small-only (p = 0).

    A ``bias_shift`` moves p on the logit scale; it leaves p = 0 and p = 1 unchanged.

    Arguments
    ---------
    p_big : float
        Probability of the big network, in [0, 1].

    Example
    -------
    >>> import torch
    >>> ctrl = ConstantController(p_big=0.5)
    >>> ctrl.probability(torch.zeros(1, 3, 8), None).tolist()
    [[0.5, 0.5, 0.5]]
    >>> round(float(ctrl.probability(torch.zeros(1, 1, 8), None, bias_shift=1.0)), 3)
    0.731
    >>> ctrl.macs_per_frame()
    0
    """

    def __init__(self, p_big: float = 0.5):
        super().__init__()
        if not 0.0 <= p_big <= 1.0:
            raise ValueError(f"p_big (hparams key 'random_p_big') must be in [0, 1], got {p_big}")
        self.p_big = float(p_big)

    @property
    def name(self) -> str:
        """``big_only`` (p = 1), ``small_only`` (p = 0) or ``random``."""
        return {1.0: "big_only", 0.0: "small_only"}.get(self.p_big, "random")

    @property
    def shifts_with_bias(self) -> bool:
        """False for p = 0 and p = 1, which no shift of the logit moves."""
        return 0.0 < self.p_big < 1.0

    @property
    def draws(self) -> bool:
        """True for 0 < p < 1; p = 0 and p = 1 leave nothing to draw."""
        return 0.0 < self.p_big < 1.0

    @property
    def routes_by_chance(self) -> bool:
        """True for 0 < p < 1: the same p on every frame, so only the draw routes."""
        return 0.0 < self.p_big < 1.0

    def probability(self, features, surprisal, *, bias_shift: float = 0.0, mask=None):
        """(B, T) tensor filled with p_big (logit shifted by ``bias_shift``)."""
        p = self.p_big
        if bias_shift and 0.0 < p < 1.0:
            p = 1.0 / (1.0 + math.exp(-(math.log(p / (1.0 - p)) + bias_shift)))
        return features.new_full(features.shape[:2], p)

    def macs_per_frame(self) -> int:
        """Zero: a constant costs nothing per frame."""
        return 0


class SurprisalController(Controller):
    """p_big = sigmoid(weight * surprisal + bias): two parameters, frozen after calibration.

    ``weight``, ``bias`` and the flag ``calibrated`` are buffers: no optimiser updates them, and
    checkpoints save them.

    Arguments
    ---------
    weight : float
        Initial weight on the surprisal.
    bias : float
        Initial bias.

    Example
    -------
    >>> import torch
    >>> ctrl = SurprisalController()
    >>> ctrl.set_parameters(weight=2.0, bias=-4.0)
    >>> p = ctrl.probability(torch.zeros(1, 3, 8), torch.tensor([[0.0, 2.0, 4.0]]))
    >>> [round(v, 3) for v in p[0].tolist()], bool(ctrl.calibrated)
    ([0.018, 0.5, 0.982], True)
    """

    uses_surprisal = True
    name = "surprisal"
    calibrates_on_surprisal = True  # a subclass whose rule is not sigmoid(w * s + b) sets False

    def __init__(self, weight: float = 1.0, bias: float = 0.0):
        super().__init__()
        # Buffers, not parameters: the downstream optimiser never touches them, the
        # Checkpointer still saves them (the calibration is part of the model).
        self.register_buffer("weight", torch.tensor(float(weight)))
        self.register_buffer("bias", torch.tensor(float(bias)))
        self.register_buffer("calibrated", torch.tensor(False))

    def probability(self, features, surprisal, *, bias_shift: float = 0.0, mask=None):
        """(B, T) sigmoid(weight * surprisal + bias + bias_shift); ``features`` are not read."""
        if surprisal is None:
            raise ValueError("no surprisal was given to the surprisal controller: run the APC model on the "
                             "filterbanks (run_model(..., apc=FrozenAPC(...))) and pass its surprisal")
        return torch.sigmoid(self.weight * surprisal + self.bias + bias_shift)

    def macs_per_frame(self) -> int:
        """Two: one multiply-accumulate and one bias add."""
        return 2

    def set_parameters(self, weight: float, bias: float) -> None:
        """Set the calibrated weight and bias and mark the controller calibrated."""
        self.weight.fill_(weight)
        self.bias.fill_(bias)
        self.calibrated.fill_(True)


LEARNED_ESTIMATORS = ("both_networks", "routed")


class LearnedController(Controller):
    """Learned controller of the paper's baseline (Sec. 4.3, Eq. 5).

    A gating MLP on the features, ``z_t = Linear(80, 1)(LeakyReLU(Linear(D, 80)(h_t)))``, makes the
    deterministic decision ``s_t = [z_t > 0]`` (``p_big = sigmoid(z_t)`` is reported; the
    ``stochastic`` flag does not apply). In the backward pass the threshold is the identity:
    ``gate = s_t + z_t - stop_gradient(z_t)``, so d gate / d z_t = 1.

    Arguments
    ---------
    input_size : int
        Width D of the features.
    hidden_size : int
        Hidden units of the MLP (the paper: 80).
    penalty_weight : float
        lambda of the penalty on ``(s_t - 0.5)^2``.
    penalty_utterances : int, optional
        U: the penalty is ``lambda * U * mean over the batch's utterances of sum_t (s_t - 0.5)^2``,
        like the CTC loss (averaged over utterances), so its weight does not depend on how many
        utterances a batch holds. For a batch of U utterances it equals the authors'
        ``lambda * sum over the batch's real frames``, so with U = 32 (the paper's batch size)
        lambda keeps the paper's meaning (1e-3; grid 1e-1..1e-5). None: the authors' sum over the
        batch's frames, whose weight against the CTC grows with the batch's utterance count.
    estimator : str
        ``"both_networks"`` (default): during training both networks run on every real frame and
        the output is ``s * big(x) + (1 - s) * small(x)``, so the gradient reaching s_t is
        ``big(x_t) - small(x_t)`` on every frame (the paper's estimator). ``"routed"``: only the
        chosen network runs, also in training, so that gradient is ``+big(x_t)`` on big frames and
        ``-small(x_t)`` on small frames. Evaluation routes in both cases.

    Example
    -------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> ctrl = LearnedController(input_size=8, hidden_size=4)
    >>> mask = torch.tensor([[True, True, True], [True, True, False]])
    >>> d = ctrl(torch.randn(2, 3, 8), None, mask)
    >>> d.gate.shape, torch.allclose(d.gate, d.use_big.float()), bool(d.use_big[1, 2])
    (torch.Size([2, 3]), True, False)
    >>> round(d.aux_loss.item(), 6)  # 1e-3 * 32 * (3 + 2 real frames) * 0.25 / 2 utterances
    0.02
    >>> ctrl.penalty_utterances = None  # the authors' form: 1e-3 * 5 real frames * 0.25
    >>> round(ctrl(torch.randn(2, 3, 8), None, mask).aux_loss.item(), 6)
    0.00125
    """

    name = "learned"
    draws = False  # the decision z_t > 0 is deterministic in training and evaluation

    def __init__(self, input_size: int = 512, hidden_size: int = 80, penalty_weight: float = 1e-3,
                 estimator: str = "both_networks", penalty_utterances: Optional[int] = 32):
        super().__init__()
        if estimator not in LEARNED_ESTIMATORS:
            raise ValueError(f"unknown learned-controller estimator {estimator!r} (hparams key "
                             f"'learned_estimator'); choose one of {LEARNED_ESTIMATORS}")
        self.net = nn.Sequential(nn.Linear(input_size, hidden_size), nn.LeakyReLU(0.125),
                                 nn.Linear(hidden_size, 1))
        if penalty_utterances is not None and penalty_utterances <= 0:
            raise ValueError(f"learned-controller penalty_utterances (hparams key 'learned_penalty_utterances') "
                             f"must be a positive number of utterances or null, got {penalty_utterances}")
        self.penalty_weight = penalty_weight
        self.estimator = estimator
        self.penalty_utterances = penalty_utterances

    @property
    def both_networks_in_training(self) -> bool:
        """True with the ``both_networks`` estimator."""
        return self.estimator == "both_networks"

    def logit(self, features: Tensor, bias_shift: float = 0.0) -> Tensor:
        """(B, T) MLP output z_t (plus ``bias_shift``); the decision is z_t > 0."""
        return self.net(features).squeeze(-1).float() + bias_shift  # float32 statistics under bf16 autocast

    def probability(self, features, surprisal, *, bias_shift: float = 0.0, mask=None):
        """(B, T) sigmoid of the logit; ``surprisal`` is not read."""
        return torch.sigmoid(self.logit(features, bias_shift))

    def forward(self, features, surprisal, mask, *, stochastic: bool = True, bias_shift: float = 0.0) -> Decision:
        """Deterministic decision ``z_t > 0`` with a straight-through gate and the penalty.

        Arguments as in :meth:`Controller.forward`; ``stochastic`` is ignored.

        Returns
        -------
        Decision
            ``p_big = sigmoid(z_t)``, ``use_big``, ``gate`` (equal to ``use_big`` in value, with
            the gradient of z_t) and ``aux_loss`` (the penalty times ``penalty_weight``).
        """
        z = self.logit(features, bias_shift)
        use_big = (z.detach() > 0) & mask
        gate = use_big.to(z.dtype) + z - z.detach()  # value s_t, identity in the backward pass
        penalty = ((gate - 0.5).pow(2) * mask).sum()
        if self.penalty_utterances is not None:  # per utterance, averaged over the batch's utterances
            penalty = penalty * (self.penalty_utterances / mask.shape[0])
        return Decision(torch.sigmoid(z) * mask, use_big, gate, self.penalty_weight * penalty)


def random_routing(p_big: float = 0.5) -> ConstantController:
    """The big network on each frame with probability ``p_big`` (hparams key ``random_p_big``), in (0, 1).

    Example
    -------
    >>> random_routing(0.3).p_big
    0.3
    >>> random_routing(1.0)
    Traceback (most recent call last):
    ...
    ValueError: random_p_big 1 routes every frame to the big network: use controller big_only
    """
    if p_big in (0.0, 1.0):
        raise ValueError(f"random_p_big {p_big:g} routes every frame to the {'big' if p_big else 'small'} network: "
                         f"use controller {'big_only' if p_big else 'small_only'}")
    return ConstantController(p_big)


def big_only() -> ConstantController:
    """The big network on every frame."""
    return ConstantController(p_big=1.0)


def small_only() -> ConstantController:
    """The small network on every frame."""
    return ConstantController(p_big=0.0)


# The controllers by name (hparams key ``controller``); build_controller passes each the settings
# its constructor names.
CONTROLLERS: Dict[str, Callable[..., Controller]] = {
    "surprisal": SurprisalController,
    "random": random_routing,
    "learned": LearnedController,
    "big_only": big_only,
    "small_only": small_only,
}


def build_controller(name: str, **kwargs) -> Controller:
    """Controller by name (the YAML key ``controller``); unknown names list the choices.

    Settings that this controller's constructor does not name are ignored, so one hparams file can
    carry the settings of every controller and switch with one override (``--controller=random``);
    a setting that no controller of :data:`CONTROLLERS` names is an error (a misspelt key). A new
    controller is a :class:`Controller` subclass whose ``name`` is its key in :data:`CONTROLLERS`
    (``docs/extending.md``).

    Arguments
    ---------
    name : str
        A key of :data:`CONTROLLERS` (built in: ``surprisal``, ``random``, ``learned``, ``big_only``, ``small_only``).
    **kwargs
        Settings of the controllers (``weight``, ``bias``, ``p_big``, ``input_size``,
        ``hidden_size``, ``penalty_weight``, ``estimator``, ``penalty_utterances``).

    Returns
    -------
    Controller
        The new controller.

    Example
    -------
    >>> ctrl = build_controller("random", p_big=0.3, weight=2.0, hidden_size=80)
    >>> type(ctrl).__name__, ctrl.p_big
    ('ConstantController', 0.3)
    >>> build_controller("big_only").p_big
    1.0
    >>> all(build_controller(name).name == name for name in CONTROLLERS)
    True
    >>> build_controller("random", p_bgi=0.3)
    Traceback (most recent call last):
    ...
    ValueError: controller setting(s) ['p_bgi'] (hparams controller_options) are named by no controller; ...
    """
    if name not in CONTROLLERS:
        raise ValueError(f"unknown controller {name!r} (hparams key 'controller'); choose one of {sorted(CONTROLLERS)}")
    known = {controller: keyword_names(factory) for controller, factory in CONTROLLERS.items()}
    if None not in known.values():  # no controller takes any setting (**kwargs): a key none names is misspelt
        named = set().union(*known.values())
        unknown = sorted(set(kwargs) - named)
        if unknown:
            raise ValueError(f"controller setting(s) {unknown} (hparams controller_options) are named by no "
                             f"controller; the controllers take {sorted(named)}")
    accepted = known[name]
    controller = CONTROLLERS[name](**{k: v for k, v in kwargs.items() if accepted is None or k in accepted})
    if controller.name != name:
        raise ValueError(f"controller {type(controller).__name__} is registered as CONTROLLERS[{name!r}] but its "
                         f"name is {controller.name!r}: give the class name = {name!r}")
    return controller


# ----------------------------------------------------------------------------------------------
# Calibration of the surprisal controller
# ----------------------------------------------------------------------------------------------
def calibration_loss(p_big: Tensor, target_mean: float, target_var: float, unbiased: bool = False) -> Tensor:
    """Paper Eq. 4: 0.5 * (mean(p) - mu)^2 + 0.5 * (var(p) - sigma^2)^2.

    Arguments
    ---------
    p_big : torch.Tensor
        Probabilities of the big network, any shape (all elements count).
    target_mean : float
        mu, the target mean of p_big.
    target_var : float
        sigma^2, the target variance of p_big.
    unbiased : bool
        Use the sample variance (ddof=1, the authors' code) instead of ddof=0.

    Returns
    -------
    torch.Tensor
        Scalar loss.

    Example
    -------
    >>> import torch
    >>> p = torch.tensor([0.2, 0.4])
    >>> round(float(calibration_loss(p, 0.3, 0.01)), 6)
    0.0
    >>> round(float(calibration_loss(p, 0.5, 0.0, unbiased=True)), 4)
    0.0202
    """
    return 0.5 * (p_big.mean() - target_mean) ** 2 + 0.5 * (p_big.var(unbiased=unbiased) - target_var) ** 2


def target_mean_for_budget(budget_macs: float, small_only_macs: float, big_only_macs: float) -> float:
    """Mean p_big at which the expected MACs per frame equal ``budget_macs``.

    Expected cost = small_only + p_big * (big_only - small_only), because exactly one of the two
    networks runs per frame.

    Arguments
    ---------
    budget_macs : float
        Target MACs per frame, between the two bounds.
    small_only_macs : float
        MACs per frame of the model that always runs the small network.
    big_only_macs : float
        MACs per frame of the model that always runs the big network.

    Returns
    -------
    float
        The target mean of p_big, in [0, 1].

    Example
    -------
    >>> target_mean_for_budget(3e6, small_only_macs=2e6, big_only_macs=6e6)
    0.25
    """
    if not small_only_macs <= budget_macs <= big_only_macs:
        raise ValueError(
            f"FLOP budget {budget_macs:.0f} per frame is outside [{small_only_macs:.0f}, {big_only_macs:.0f}] "
            "(small-only .. big-only): choose a budget in that range"
        )
    return (budget_macs - small_only_macs) / (big_only_macs - small_only_macs)


def budget_big_fraction(encoder: nn.Module, apc_macs: int, fraction: float) -> float:
    """The fraction of frames on the big network at which the expected MACs per frame of ``encoder``
    (plus ``apc_macs``) are ``fraction`` x those of big-only; ValueError where its test-time controller
    is not the surprisal one, or no mix of the two networks costs that much.

    Example
    -------
    >>> class Routed:  # an encoder: its controller and component_macs() are read
    ...     controller = SurprisalController()
    ...     def component_macs(self):
    ...         return {"small_net": 100, "big_net": 500}
    >>> budget_big_fraction(Routed(), apc_macs=0, fraction=0.6)
    0.5
    >>> budget_big_fraction(Routed(), apc_macs=0, fraction=0.1)
    Traceback (most recent call last):
    ...
    ValueError: the budget 0.1 x big-only is outside (0.200, 1), the MACs per frame of small-only and big-only relative to big-only: choose a fraction in that range
    """
    controller = getattr(encoder, "controller", None)
    if not getattr(controller, "calibrates_on_surprisal", False):
        has = repr(controller.name) if controller is not None else f"none (a {type(encoder).__name__})"
        raise ValueError(f"a FLOPs budget needs the surprisal controller; this model's is {has}")
    if not getattr(encoder, "controller_at_test", True):
        raise ValueError("a FLOPs budget needs the surprisal controller at test time; this model tests with "
                         "random routing (controller_at_test False)")
    rows = static_flop_rows(encoder, apc_macs)
    lowest = rows["small-only"] / rows["big-only"]
    if not lowest < fraction < 1.0:
        raise ValueError(f"the budget {fraction:g} x big-only is outside ({lowest:.3f}, 1), the MACs per frame of "
                         "small-only and big-only relative to big-only: choose a fraction in that range")
    return target_mean_for_budget(fraction * rows["big-only"], rows["small-only"], rows["big-only"])


def bias_shift_for_big_fraction(controller: SurprisalController, surprisal: Tensor, big_fraction: float,
                                stochastic: bool = True, tolerance: float = 1e-4) -> float:
    """The test-time bias shift at which a fraction ``big_fraction`` of the frames of ``surprisal``
    is expected to go to the big network: the mean of ``sigmoid(w * s + b + shift)`` with stochastic
    routing, the fraction of frames with ``w * s + b + shift > 0`` with deterministic routing.

    Both fractions grow monotonically with the shift, so bisection finds it (to ``tolerance`` in
    the shift); no labels are read, only the controller and the surprisal of some held-out frames.

    Example
    -------
    >>> import torch
    >>> ctrl = SurprisalController()
    >>> ctrl.set_parameters(weight=1.0, bias=-1.0)
    >>> s = torch.linspace(-3.0, 3.0, 601)
    >>> round(bias_shift_for_big_fraction(ctrl, s, 0.5), 3)
    1.0
    >>> shift = bias_shift_for_big_fraction(ctrl, s, 0.25, stochastic=False)
    >>> round(float((s - 1.0 + shift > 0).float().mean()), 2)
    0.25
    """
    if not 0.0 < big_fraction < 1.0:
        raise ValueError(f"the fraction of frames on the big network must be in (0, 1), got {big_fraction}")
    logits = (controller.weight * surprisal.detach().double().flatten() + controller.bias).double()

    def fraction(shift: float) -> float:
        z = logits + shift
        return float(torch.sigmoid(z).mean() if stochastic else (z > 0).double().mean())

    low, high = float(-logits.max()) - 40.0, float(-logits.min()) + 40.0  # fractions ~0 and ~1
    while high - low > tolerance:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if fraction(middle) < big_fraction else (low, middle)
    return 0.5 * (low + high)


def solve_bias_shift(controller: SurprisalController, surprisal_batches: Iterable[Tensor], big_fraction: float,
                     stochastic: bool = True) -> Dict[str, float]:
    """The test-time bias shift of a FLOPs budget: :func:`bias_shift_for_big_fraction` on the frames of
    all ``surprisal_batches`` (tensors of the surprisal of real frames, read once), with
    ``big_fraction`` from :func:`budget_big_fraction`.

    Returns ``{"big_fraction", "bias_shift", "frames"}`` (``frames``: how many it was solved on).

    Example
    -------
    >>> import torch
    >>> controller = SurprisalController()
    >>> controller.set_parameters(weight=2.0, bias=0.5)
    >>> batches = list(torch.linspace(-1.0, 1.0, 201).split(100))  # symmetric about 0
    >>> solution = solve_bias_shift(controller, batches, 0.5)
    >>> solution["big_fraction"], round(solution["bias_shift"], 2), solution["frames"]
    (0.5, -0.5, 201)
    """
    with torch.no_grad():
        surprisal = torch.cat([batch.detach().float().flatten() for batch in surprisal_batches])
    shift = bias_shift_for_big_fraction(controller, surprisal, big_fraction, stochastic=stochastic)
    return {"big_fraction": big_fraction, "bias_shift": shift, "frames": int(surprisal.numel())}


CALIBRATION_METHODS = ("full_batch", "sgd", "authors_adam")
# The authors' controller reads the squared prediction error sum_d (x - xhat)^2 = 2 * surprisal.
AUTHORS_ERROR_SCALE = 2.0


def check_calibration_target(mean: float, var: Optional[float] = None) -> None:
    """A :class:`ValueError` of one line unless p_big's target ``mean`` is in (0, 1) and its target
    ``var`` (None: not checked) in [0, mean x (1 - mean)), the largest variance of p_big in [0, 1].

    Example
    -------
    >>> check_calibration_target(0.3, 0.02)
    >>> check_calibration_target(0.3, 0.25)
    Traceback (most recent call last):
        ...
    ValueError: controller_target_var must be in [0, 0.21) with controller_target_mean 0.3 (p_big in [0, 1] has variance below mean x (1 - mean)), got 0.25
    """
    if not 0 < mean < 1:
        raise ValueError(f"controller_target_mean must be in (0, 1), got {mean!r}")
    if var is not None and not 0 <= var < mean * (1 - mean):
        raise ValueError(f"controller_target_var must be in [0, {mean * (1 - mean):.4g}) with controller_target_mean "
                         f"{mean:g} (p_big in [0, 1] has variance below mean x (1 - mean)), got {var!r}")


def calibrate_surprisal_controller(
    controller: SurprisalController,
    surprisal_batches: Iterable[Tensor],
    target_mean: float,
    target_var: float,
    method: str = "full_batch",
    lr: Optional[float] = None,
    max_frames: int = 2_000_000,
    seed: int = 0,
) -> Dict[str, float]:
    """Fit (w, b) of ``p_big = sigmoid(w * surprisal + b)`` to a target mean and variance of p_big.

    Methods (hparams key ``calibration_method``):

    * ``"full_batch"`` (default): keeps the pass's surprisal (up to ``max_frames``, a seeded uniform
      subsample beyond that) and minimises Eq. 4 (ddof=0 variance) on all of it with L-BFGS, in the
      parametrisation ``logit = a * (s - m) / sd + c`` (m, sd of the first minibatch) from a = 1,
      c = logit(target_mean). It meets the target whenever it is reachable. Neither the paper's nor
      the authors' procedure.
    * ``"sgd"``: one SGD step (``lr``, default 10) per minibatch on Eq. 4 (ddof=0 variance), same
      parametrisation and start. The paper says "one pass of SGD" and gives no learning rate or
      start; this is one reading of it, not the authors' code.
    * ``"authors_adam"``: the authors' code: one Adam step (``lr``, default 0.01) per minibatch on
      Eq. 4 with the ddof=1 variance, on ``sigmoid(w' * e + b)`` with e = sum_d (x - xhat)^2 =
      2 * surprisal, from w' = 0.1, b = -1; then w = 2 w'. One pass (one step per minibatch) may
      stop short of the target.

    Arguments
    ---------
    controller : SurprisalController
        Receives the fitted (w, b) through :meth:`SurprisalController.set_parameters`.
    surprisal_batches : iterable of torch.Tensor
        1-D tensors of surprisal values of real frames (one per minibatch), read once.
    target_mean : float
        Target mean of p_big, in (0, 1) (see :func:`target_mean_for_budget`).
    target_var : float
        Target variance of p_big.
    method : str
        ``"full_batch"``, ``"sgd"`` or ``"authors_adam"``.
    lr : float, optional
        Learning rate of ``sgd`` (default 10) and ``authors_adam`` (default 0.01).
    max_frames : int
        Frames kept for ``full_batch`` and for the reported statistics.
    seed : int
        Seed of the subsampling.

    Returns
    -------
    dict
        ``weight``, ``bias``, ``method``, ``frames`` (frames seen), ``target_mean``,
        ``target_var``, and ``mean_p_big`` and ``var_p_big`` (ddof=0) on the kept frames.

    Example
    -------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> batches = [4 * torch.rand(1000) for _ in range(3)]
    >>> ctrl = SurprisalController()
    >>> out = calibrate_surprisal_controller(ctrl, batches, target_mean=0.3, target_var=0.02)
    >>> round(out["mean_p_big"], 3), round(out["var_p_big"], 3), out["frames"], bool(ctrl.calibrated)
    (0.3, 0.02, 3000, True)
    """
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"unknown calibration method {method!r} (hparams key 'calibration_method'): "
                         f"choose one of {CALIBRATION_METHODS}")
    check_calibration_target(target_mean)  # the variance is only warned about, below
    try:
        check_calibration_target(target_mean, target_var)
    except ValueError:  # a flops_budget's mean can put the configured variance out of reach
        logger.warning("controller_target_var %g cannot be met with target mean %g (p_big in [0, 1] has variance "
                       "below %.4g): the fit comes as close as it can; calibration.json has the variance reached",
                       target_var, target_mean, target_mean * (1 - target_mean))
    a, c, optimizer = _calibration_start(method, target_mean, lr)
    m = sd = None  # standardisation, from the first minibatch
    kept, n_seen = _UniformSample(max_frames, torch.Generator().manual_seed(seed)), 0
    for batch in surprisal_batches:
        s = batch.detach().reshape(-1).double().cpu()
        if s.numel() == 0:
            continue
        if m is None:
            m, sd = s.mean(), (s.std().clamp(min=1e-6) if s.numel() > 1 else s.new_tensor(1.0))
        n_seen += s.numel()
        if method == "sgd":
            _calibration_step(optimizer, torch.sigmoid(a * (s - m) / sd + c), target_mean, target_var)
        elif method == "authors_adam" and s.numel() > 1:
            _calibration_step(optimizer, torch.sigmoid(a * AUTHORS_ERROR_SCALE * s + c), target_mean, target_var,
                              unbiased=True)
        kept.add(s)
    if m is None:
        raise ValueError("controller calibration saw no frames: is the training set empty?")
    values = kept.values()
    if method == "full_batch":
        _fit_full_batch(a, c, (values - m) / sd, target_mean, target_var)
    with torch.no_grad():
        if method == "authors_adam":
            weight, bias = float(a * AUTHORS_ERROR_SCALE), float(c)
        else:  # back from the standardised parametrisation
            weight, bias = float(a / sd), float(c - a * m / sd)
        p = torch.sigmoid(weight * values + bias)
    controller.set_parameters(weight, bias)
    result = dict(weight=weight, bias=bias, mean_p_big=float(p.mean()), var_p_big=float(p.var(unbiased=False)),
                  target_mean=target_mean, target_var=target_var, frames=n_seen, method=method)
    logger.info("controller calibrated: %s", result)
    return result


def _calibration_start(method: str, target_mean: float,
                       lr: Optional[float]) -> Tuple[Tensor, Tensor, torch.optim.Optimizer]:
    """The starting (a, c) of :func:`calibrate_surprisal_controller` and the optimiser of its
    minibatch steps: the authors' (w', b) = (0.1, -1) with Adam, else the standardised
    parametrisation's (1, logit(target_mean)) with SGD."""
    if method == "authors_adam":  # w', b on the authors' error scale
        a = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
        c = torch.tensor(-1.0, dtype=torch.float64, requires_grad=True)
        return a, c, torch.optim.Adam([a, c], lr=0.01 if lr is None else lr)
    a = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    c = torch.tensor(math.log(target_mean / (1 - target_mean)), dtype=torch.float64, requires_grad=True)
    return a, c, torch.optim.SGD([a, c], lr=10.0 if lr is None else lr)


def _calibration_step(optimizer: torch.optim.Optimizer, p_big: Tensor, target_mean: float, target_var: float,
                      unbiased: bool = False) -> None:
    """One optimiser step on Eq. 4 of one minibatch's ``p_big``."""
    optimizer.zero_grad()
    calibration_loss(p_big, target_mean, target_var, unbiased=unbiased).backward()
    optimizer.step()


def _fit_full_batch(a: Tensor, c: Tensor, z: Tensor, target_mean: float, target_var: float) -> None:
    """Minimise Eq. 4 of ``sigmoid(a * z + c)`` over all the standardised surprisal ``z`` with L-BFGS,
    in place."""
    lbfgs = torch.optim.LBFGS([a, c], lr=1.0, max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                              line_search_fn="strong_wolfe")

    def closure():
        lbfgs.zero_grad()
        loss = 1e4 * calibration_loss(torch.sigmoid(a * z + c), target_mean, target_var)
        loss.backward()
        return loss

    lbfgs.step(closure)


class _UniformSample:
    """A seeded uniform sample, without replacement, of at most ``max_frames`` of the values added
    batch by batch, in bounded memory: each value draws a random key, and the ``max_frames`` smallest
    keys seen so far are kept (a value's chance does not depend on when it came).

    Example
    -------
    >>> sample = _UniformSample(3, torch.Generator().manual_seed(0))
    >>> sample.add(torch.arange(5.0)); sample.add(torch.arange(5.0, 10.0))
    >>> sample.values().numel(), _UniformSample(3, torch.Generator()).values().numel()
    (3, 0)
    """

    def __init__(self, max_frames: int, generator: torch.Generator):
        self.max_frames, self.generator = max_frames, generator
        self._values: List[Tensor] = []
        self._keys: List[Tensor] = []

    def add(self, values: Tensor) -> None:
        self._values.append(values)
        self._keys.append(torch.rand(values.numel(), generator=self.generator, dtype=torch.float64))
        if sum(v.numel() for v in self._values) > 2 * self.max_frames:  # compact: memory stays bounded
            values, keys = self._select()
            self._values, self._keys = [values], [keys]

    def values(self) -> Tensor:
        """The sample: every value added when there are at most ``max_frames``, in order."""
        return self._select()[0]

    def _select(self) -> Tuple[Tensor, Tensor]:
        """(values, their keys) of the ``max_frames`` smallest keys so far, in the order added."""
        values = torch.cat(self._values) if self._values else torch.zeros(0, dtype=torch.float64)
        keys = torch.cat(self._keys) if self._keys else torch.zeros(0, dtype=torch.float64)
        if values.numel() > self.max_frames:
            kept = keys.topk(self.max_frames, largest=False).indices.sort().values
            values, keys = values[kept], keys[kept]
        return values, keys
