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

import math
from typing import Callable, Dict, NamedTuple, Optional

import torch
from torch import Tensor, nn

from surprisal_cc.model.nnet import LEAKY_SLOPE, keyword_names



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
    surprisal, or None where this controller does not read it (``uses_surprisal`` False, even where
    APC runs for the features); ``bias_shift``, a float added to the controller's
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
        self.net = nn.Sequential(nn.Linear(input_size, hidden_size), nn.LeakyReLU(LEAKY_SLOPE),
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
