"""Fitting the surprisal controller's logit to targets: its weight and bias to the target mean and
variance of p_big before training (paper Eq. 4, :func:`calibrate_surprisal_controller`), and, at test
time, the bias shift that meets a FLOPs budget (:func:`solve_budget`).
Both apply to controllers that ``calibrates_on_surprisal``
(:class:`~surprisal_cc.model.controllers.SurprisalController`).

Example
-------
>>> import torch
>>> from surprisal_cc.model.controllers import SurprisalController
>>> ctrl = SurprisalController()
>>> generator = torch.Generator().manual_seed(0)
>>> batches = [torch.randn(500, generator=generator).abs() for _ in range(4)]
>>> out = calibrate_surprisal_controller(ctrl, batches, target_mean=0.65, target_var=0.04)
>>> round(out["mean_p_big"], 2), bool(ctrl.calibrated)
(0.65, True)
"""
from __future__ import annotations

import logging
import math
from typing import Dict, Iterable, List, Optional, Tuple

import torch
from torch import Tensor, nn

from surprisal_cc.checks import is_number
from surprisal_cc.model.controllers import SurprisalController
from surprisal_cc.model.flops import static_flop_rows

logger = logging.getLogger(__name__)


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
    >>> class Routed:  # an encoder: its test-time controller and component_macs() are read
    ...     def stage_controller(self, training):
    ...         return SurprisalController()
    ...     def component_macs(self):
    ...         return {"small_net": 100, "big_net": 500}
    >>> budget_big_fraction(Routed(), apc_macs=0, fraction=0.6)
    0.5
    >>> budget_big_fraction(Routed(), apc_macs=0, fraction=0.1)
    Traceback (most recent call last):
    ...
    ValueError: the budget 0.1 x big-only is outside (0.200, 1), the MACs per frame of small-only and big-only relative to big-only: choose a fraction in that range
    """
    controller = encoder.stage_controller(False)
    if controller is None or not controller.calibrates_on_surprisal:
        if not getattr(encoder, "controller_at_test", True):  # the conditional encoder's switch, named
            raise ValueError("a FLOPs budget needs the surprisal controller at test time; this model tests with "
                             "random routing (controller_at_test False)")
        has = repr(controller.name) if controller is not None else f"none (a {type(encoder).__name__})"
        raise ValueError(f"a FLOPs budget needs the surprisal controller; this model's is {has}")
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


def solve_budget(encoder: nn.Module, apc_macs: int, fraction: float,
                 surprisal_batches: Iterable[Tensor]) -> Dict[str, float]:
    """The test-time bias shift at which ``encoder`` (plus ``apc_macs``) spends ``fraction`` x the
    big-only MACs per frame on the frames of ``surprisal_batches``: :func:`budget_big_fraction`, then
    :func:`solve_bias_shift` with the encoder's own test-time sampling (``test_stochastic``).
    ValueError as :func:`budget_big_fraction`.

    Returns ``{"fraction", "big_fraction", "bias_shift", "frames"}``.

    Example
    -------
    >>> import torch
    >>> class Routed:  # an encoder: its test-time controller, test_stochastic and component_macs() are read
    ...     controller, test_stochastic = SurprisalController(), True
    ...     def stage_controller(self, training):
    ...         return self.controller
    ...     def component_macs(self):
    ...         return {"small_net": 100, "big_net": 500}
    >>> encoder = Routed()
    >>> encoder.controller.set_parameters(weight=2.0, bias=0.5)
    >>> solution = solve_budget(encoder, 0, 0.6, [torch.linspace(-1.0, 1.0, 201)])  # symmetric about 0
    >>> solution["fraction"], solution["big_fraction"], round(solution["bias_shift"], 2), solution["frames"]
    (0.6, 0.5, -0.5, 201)
    """
    big_fraction = budget_big_fraction(encoder, apc_macs, fraction)
    solution = solve_bias_shift(encoder.stage_controller(False), surprisal_batches, big_fraction,
                                stochastic=bool(encoder.test_stochastic))
    return {"fraction": fraction, **solution}


CALIBRATION_METHODS = ("full_batch", "sgd", "authors_adam")
# The authors' controller reads the squared prediction error sum_d (x - xhat)^2 = 2 * surprisal.
AUTHORS_ERROR_SCALE = 2.0


def check_calibration_target(mean: float, var: Optional[float] = None) -> None:
    """A :class:`ValueError` of one line unless p_big's target ``mean`` is a number in (0, 1) and its target
    ``var`` (None: not checked) in [0, mean x (1 - mean)), the largest variance of p_big in [0, 1].

    Example
    -------
    >>> check_calibration_target(0.3, 0.02)
    >>> check_calibration_target(0.3, 0.25)
    Traceback (most recent call last):
        ...
    ValueError: controller_target_var must be in [0, 0.21) with controller_target_mean 0.3 (p_big in [0, 1] has variance below mean x (1 - mean)), got 0.25
    """
    if not is_number(mean) or not 0 < mean < 1:
        raise ValueError(f"controller_target_mean must be a number in (0, 1), got {mean!r}")
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
