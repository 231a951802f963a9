"""Controllers: per-frame choice between the small (0) and the big (1) network.

One interface, :class:`Controller`: ``probability(features, surprisal)`` gives p_big per frame,
``forward(...)`` turns it into a :class:`Decision` (Bernoulli sample when ``stochastic``, else
``p_big > 0.5``), restricted to real frames. Implementations:

=============  =====================================================================
name           rule
=============  =====================================================================
surprisal      p = sigmoid(w * surprisal + b); w, b calibrated once, then frozen
random         p fixed (default 0.5)
learned        MLP on the features (80 hidden units), hard decision, straight-through
               gradient, penalty lambda * sum_t (s_t - 0.5)^2
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
from typing import Callable, Dict, Iterable, NamedTuple, Optional

import torch
from torch import Tensor, nn

logger = logging.getLogger(__name__)


class Decision(NamedTuple):
    p_big: Tensor  # (B, T) probability of the big network, zero on padding
    use_big: Tensor  # (B, T) bool, False on padding
    gate: Optional[Tensor]  # (B, T) float equal to use_big with a straight-through gradient, or None
    aux_loss: Tensor  # scalar added to the task loss


class Controller(nn.Module):
    """Base class. Subclasses implement :meth:`probability` (and may override :meth:`forward`)."""

    uses_surprisal = False

    def probability(self, features: Tensor, surprisal: Optional[Tensor], bias_shift: float = 0.0) -> Tensor:
        raise NotImplementedError

    def macs_per_frame(self) -> int:
        """Multiply-accumulates per frame (paper convention: parameters used per frame)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        features: Tensor,
        surprisal: Optional[Tensor],
        mask: Tensor,
        stochastic: bool = True,
        bias_shift: float = 0.0,
    ) -> Decision:
        p_big = self.probability(features, surprisal, bias_shift) * mask
        use_big = sample_decisions(p_big, stochastic) & mask
        return Decision(p_big, use_big, None, p_big.new_zeros(()))


def sample_decisions(p_big: Tensor, stochastic: bool) -> Tensor:
    """Bernoulli(p_big) when stochastic, else the deterministic rule p_big > 0.5."""
    if stochastic:
        return torch.rand_like(p_big) < p_big
    return p_big > 0.5


class ConstantController(Controller):
    """p_big fixed for every frame: random (0 < p < 1), big-only (p = 1) or small-only (p = 0)."""

    def __init__(self, p_big: float = 0.5):
        super().__init__()
        if not 0.0 <= p_big <= 1.0:
            raise ValueError(f"p_big must be in [0, 1], got {p_big}")
        self.p_big = float(p_big)

    def probability(self, features, surprisal, bias_shift: float = 0.0):
        p = self.p_big
        if bias_shift and 0.0 < p < 1.0:
            p = 1.0 / (1.0 + math.exp(-(math.log(p / (1.0 - p)) + bias_shift)))
        return features.new_full(features.shape[:2], p)

    def macs_per_frame(self) -> int:
        return 0


class SurprisalController(Controller):
    """p_big = sigmoid(weight * surprisal + bias): two parameters, frozen after calibration."""

    uses_surprisal = True

    def __init__(self, weight: float = 1.0, bias: float = 0.0):
        super().__init__()
        # Buffers, not parameters: the downstream optimiser never touches them, the
        # Checkpointer still saves them (the calibration is part of the model).
        self.register_buffer("weight", torch.tensor(float(weight)))
        self.register_buffer("bias", torch.tensor(float(bias)))
        self.register_buffer("calibrated", torch.tensor(False))

    def probability(self, features, surprisal, bias_shift: float = 0.0):
        if surprisal is None:
            raise ValueError("the surprisal controller needs surprisal: run the APC model (features: apc)")
        return torch.sigmoid(self.weight * surprisal + self.bias + bias_shift)

    def macs_per_frame(self) -> int:
        return 2

    def set_parameters(self, weight: float, bias: float) -> None:
        self.weight.fill_(weight)
        self.bias.fill_(bias)
        self.calibrated.fill_(True)


class LearnedController(Controller):
    """Gating MLP on the features: Linear(D, 80) -> ReLU -> Linear(80, 1) -> sigmoid.

    The decision is hard (threshold, or a Bernoulli sample when stochastic); the straight-through
    estimator passes the gradient of the hard decision to p_big unchanged. The penalty is
    ``penalty_weight * sum_t (s_t - 0.5)^2`` per utterance, averaged over the batch (paper Eq. 5).
    """

    def __init__(self, input_size: int = 512, hidden_size: int = 80, penalty_weight: float = 1e-3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(input_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 1))
        self.penalty_weight = penalty_weight

    def probability(self, features, surprisal, bias_shift: float = 0.0):
        return torch.sigmoid(self.net(features).squeeze(-1) + bias_shift)

    def forward(self, features, surprisal, mask, stochastic: bool = True, bias_shift: float = 0.0) -> Decision:
        p_big = self.probability(features, surprisal, bias_shift) * mask
        use_big = sample_decisions(p_big.detach(), stochastic) & mask
        gate = use_big.float() + p_big - p_big.detach()
        penalty = ((gate - 0.5).pow(2) * mask).sum(dim=1).mean()
        return Decision(p_big, use_big, gate, self.penalty_weight * penalty)


CONTROLLERS: Dict[str, Callable[..., Controller]] = {
    "surprisal": SurprisalController,
    "random": ConstantController,
    "learned": LearnedController,
    "big_only": lambda **kw: ConstantController(p_big=1.0),
    "small_only": lambda **kw: ConstantController(p_big=0.0),
}


def build_controller(name: str, **kwargs) -> Controller:
    """Controller by name (the YAML key ``controller``); unknown names list the choices.

    Keyword arguments a controller does not take are ignored, so one hparams file can carry the
    settings of every controller and switch with one override (``--controller=random``).
    """
    if name not in CONTROLLERS:
        raise ValueError(f"unknown controller {name!r} (hparams key 'controller'); choose one of {sorted(CONTROLLERS)}")
    accepted = {
        "surprisal": ("weight", "bias"),
        "random": ("p_big",),
        "learned": ("input_size", "hidden_size", "penalty_weight"),
    }.get(name, ())
    return CONTROLLERS[name](**{k: v for k, v in kwargs.items() if k in accepted})


# ----------------------------------------------------------------------------------------------
# Calibration of the surprisal controller
# ----------------------------------------------------------------------------------------------
def calibration_loss(p_big: Tensor, target_mean: float, target_var: float) -> Tensor:
    """Paper Eq. 4: 0.5 * (mean(p) - mu)^2 + 0.5 * (var(p) - sigma^2)^2."""
    return 0.5 * (p_big.mean() - target_mean) ** 2 + 0.5 * (p_big.var(unbiased=False) - target_var) ** 2


def target_mean_for_budget(budget_macs: float, small_only_macs: float, big_only_macs: float) -> float:
    """Mean p_big at which the expected MACs per frame equal ``budget_macs``.

    Expected cost = small_only + p_big * (big_only - small_only), because exactly one of the two
    networks runs per frame.
    """
    if not small_only_macs <= budget_macs <= big_only_macs:
        raise ValueError(
            f"FLOP budget {budget_macs:.0f} per frame is outside [{small_only_macs:.0f}, {big_only_macs:.0f}] "
            "(small-only .. big-only): choose a budget in that range"
        )
    return (budget_macs - small_only_macs) / (big_only_macs - small_only_macs)


def calibrate_surprisal_controller(
    controller: SurprisalController,
    surprisal_batches: Iterable[Tensor],
    target_mean: float,
    target_var: float,
    method: str = "full_batch",
    lr: float = 10.0,
    max_frames: int = 2_000_000,
    seed: int = 0,
) -> Dict[str, float]:
    """Fit (w, b) so that p_big over the training frames has the target mean and variance.

    ``surprisal_batches`` yields 1-D tensors of surprisal values of real frames (one per batch).
    Both methods work in a standardised parametrisation ``logit = a * (s - m) / sd + c`` (m, sd
    from the first batch), starting from a = 1, c = logit(target_mean):

    * ``"sgd"`` is the paper's procedure: one pass of minibatch SGD on Eq. 4.
    * ``"full_batch"`` (default) collects the pass's surprisal (up to ``max_frames``, a seeded
      uniform subsample beyond that) and minimises Eq. 4 on all of it with L-BFGS, so the target is
      reached exactly whenever it is reachable, instead of approximately after one noisy pass.

    Returns the achieved mean and variance of p_big on the frames seen, and w, b.
    """
    if method not in ("full_batch", "sgd"):
        raise ValueError(f"unknown calibration method {method!r}: choose 'full_batch' or 'sgd'")
    if not 0.0 < target_mean < 1.0:
        raise ValueError(f"target mean of p_big must be in (0, 1), got {target_mean}")
    generator = torch.Generator().manual_seed(seed)
    a = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    c = torch.tensor(math.log(target_mean / (1 - target_mean)), dtype=torch.float64, requires_grad=True)
    m = sd = None
    kept, n_seen = [], 0
    optimizer = torch.optim.SGD([a, c], lr=lr)
    for batch in surprisal_batches:
        s = batch.detach().reshape(-1).double().cpu()
        if s.numel() == 0:
            continue
        if m is None:
            m, sd = s.mean(), s.std().clamp(min=1e-6)
        n_seen += s.numel()
        if method == "sgd":
            optimizer.zero_grad()
            calibration_loss(torch.sigmoid(a * (s - m) / sd + c), target_mean, target_var).backward()
            optimizer.step()
        kept.append(s)
        if sum(k.numel() for k in kept) > 2 * max_frames:
            kept = [_subsample(torch.cat(kept), max_frames, generator)]
    if m is None:
        raise ValueError("controller calibration saw no frames: is the training set empty?")
    values = _subsample(torch.cat(kept), max_frames, generator)
    z = (values - m) / sd
    if method == "full_batch":
        lbfgs = torch.optim.LBFGS([a, c], lr=1.0, max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                                  line_search_fn="strong_wolfe")

        def closure():
            lbfgs.zero_grad()
            loss = 1e4 * calibration_loss(torch.sigmoid(a * z + c), target_mean, target_var)
            loss.backward()
            return loss

        lbfgs.step(closure)
    with torch.no_grad():
        p = torch.sigmoid(a * z + c)
        weight, bias = float(a / sd), float(c - a * m / sd)
    controller.set_parameters(weight, bias)
    result = dict(weight=weight, bias=bias, mean_p_big=float(p.mean()), var_p_big=float(p.var(unbiased=False)),
                  target_mean=target_mean, target_var=target_var, frames=n_seen, method=method)
    logger.info("controller calibrated: %s", result)
    return result


def _subsample(values: Tensor, max_frames: int, generator: torch.Generator) -> Tensor:
    if values.numel() <= max_frames:
        return values
    return values[torch.randperm(values.numel(), generator=generator)[:max_frames]]
