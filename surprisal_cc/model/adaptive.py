"""Adaptive-depth CTC encoders: ACT (Graves, 2016) and PonderNet (Banino et al., 2021).

Both share the layout of :class:`~surprisal_cc.model.encoders.ConditionalEncoder`: BiGRU pre-net ->
per-frame pondering -> post-net (BiGRU + Linear). Pondering applies one shared step block up to
``max_steps`` (N) times to every real frame independently,

    s_n = LayerNorm(s_{n-1} + f(s_{n-1}))   (``residual=True``; else s_n = LayerNorm(f(s_{n-1}))),
    f   = FrameNet([D, step_hidden, D]) (Linear, LeakyReLU, Linear, LeakyReLU),
    h_n = sigmoid(Linear(D, 1)(s_n))  (halting unit),

and feeds a halting-weighted combination ``sum_n w_n s_n`` of the step states to the post-net.
The default block (D = 512, ``step_hidden=256``) and its halting unit cost 0.264M MACs per step,
about the small network, and ``max_steps=8`` steps about the big one, so a frame costs between
the small-only and the big-only model.
Frames that have halted are removed from the active set: each step gathers only the frames still
running, so they really stop computing, and ``frame_macs["step_block"]`` charges every frame
``steps executed x (f + halting unit)``. The halting unit runs at every executed step, also at the
last one where its output is unused, so that every step costs the same.

``stats``: ``"steps"`` (B, T) steps executed per frame (0 on padding) and ``"halting_p"``
(B, T, N), the weights w_n with which the step states were combined (one-hot at the halting step
when PonderNet samples or thresholds). There is no ``"p_big"``.

Example
-------
>>> import torch
>>> _ = torch.manual_seed(0)
>>> enc = ACTEncoder(input_size=20, num_outputs=5, hidden_size=8, step_hidden=32, max_steps=4).eval()
>>> out = enc(torch.randn(2, 6, 20), torch.tensor([6, 3]))
>>> out.log_probs.shape, out.stats["steps"][1].tolist()
(torch.Size([2, 6, 5]), [4.0, 4.0, 4.0, 0.0, 0.0, 0.0])
>>> ponder = PonderNetEncoder(input_size=20, num_outputs=5, hidden_size=8, step_hidden=32)
>>> float(ponder(torch.randn(2, 6, 20), torch.tensor([6, 3])).aux_loss.detach()) > 0
True
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from surprisal_cc.model.nnet import BiGRU, Encoder, EncoderOutput, FrameNet, PostNet, lengths_to_mask
from surprisal_cc.model.flops import module_macs, uniform_frame_macs

#: A halting rule of :meth:`AdaptiveEncoder.run_until_halted`: (rows still running, their halting
#: unit's outputs, whether this is the last step) -> (weight of this step's state, halts after it).
HaltingRule = Callable[[Tensor, Tensor, bool], Tuple[Tensor, Tensor]]


# ----------------------------------------------------------------------------------------------
# Building blocks and pure functions
# ----------------------------------------------------------------------------------------------
class StepBlock(nn.Module):
    """One pondering step on (M, D) frame states: ``LayerNorm(s + net(s))`` or ``LayerNorm(net(s))``.

    After the Universal Transformer's transition block, with ``net = FrameNet([D, hidden, D])`` (a
    LeakyReLU after each of its two Linear layers, the last one included). The
    normalisation keeps every step's state at the scale of the pre-net output. Without it the
    norm grows about 6x per step on a trained ACT model, which saturates the halting unit after
    the first step and feeds the post-net inputs far outside the range its GRUs work in.

    Arguments
    ---------
    width : int
        Width D of the frame states.
    hidden : int
        Hidden units of ``net``.
    residual : bool
        ``LayerNorm(s + net(s))`` (True) or ``LayerNorm(net(s))`` (False).

    Example
    -------
    >>> import torch
    >>> step = StepBlock(width=6, hidden=16)
    >>> s = step(torch.randn(3, 6))
    >>> s.shape, [round(abs(v), 4) for v in s.mean(-1).tolist()]  # layer-normalised rows
    (torch.Size([3, 6]), [0.0, 0.0, 0.0])
    """

    def __init__(self, width: int, hidden: int, residual: bool = True):
        super().__init__()
        self.net = FrameNet([width, hidden, width])
        self.norm = nn.LayerNorm(width)
        self.residual = residual

    def forward(self, s: Tensor) -> Tensor:
        """(M, D) states -> (M, D) next states."""
        return self.norm(s + self.net(s) if self.residual else self.net(s))


class HaltingUnit(nn.Module):
    """``sigmoid(Linear(D, 1)(s))`` -> (M,) halting probabilities.

    The weight starts at zero, so at initialisation every frame and step gets exactly
    ``sigmoid(bias_init)``; the weight still receives gradient (d logit / d W = s).

    Arguments
    ---------
    width : int
        Width D of the frame states.
    bias_init : float
        Initial bias (the logit of the initial halting probability).

    Example
    -------
    >>> import torch
    >>> HaltingUnit(width=4, bias_init=0.0)(torch.randn(3, 4)).tolist()
    [0.5, 0.5, 0.5]
    """

    def __init__(self, width: int, bias_init: float = 0.0):
        super().__init__()
        self.linear = nn.Linear(width, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.constant_(self.linear.bias, bias_init)

    def forward(self, s: Tensor) -> Tensor:
        """(M, D) states -> (M,) halting probabilities."""
        return torch.sigmoid(self.linear(s)).squeeze(-1)


def act_step(cum: Tensor, h: Tensor, threshold: float, last: bool) -> Tuple[Tensor, Tensor]:
    """One ACT step: weights p_n and halt flags from the running sum ``cum`` = sum_{j<n} h_j.

    A frame halts at the first n with ``cum + h_n >= threshold`` (= 1 - eps), or at the last step;
    it then gets the remainder ``R = 1 - cum`` instead of h_n.

    Arguments
    ---------
    cum : torch.Tensor
        (M,) sum of the halting probabilities of the earlier steps.
    h : torch.Tensor
        (M,) halting probabilities of this step.
    threshold : float
        1 - eps.
    last : bool
        Whether this is the last step (every frame halts).

    Returns
    -------
    p : torch.Tensor
        (M,) weight of this step's state.
    halt : torch.Tensor
        (M,) bool, True where the frame halts at this step.

    Example
    -------
    >>> import torch
    >>> p, halt = act_step(torch.tensor([0.0, 0.6]), torch.tensor([0.3, 0.5]), 0.99, last=False)
    >>> [round(v, 4) for v in p.tolist()], halt.tolist()
    ([0.3, 0.4], [False, True])
    """
    halt = torch.ones_like(h, dtype=torch.bool) if last else cum + h >= threshold
    return torch.where(halt, 1.0 - cum, h), halt


def act_weights(h: Tensor, epsilon: float) -> Tuple[Tensor, Tensor, Tensor]:
    """ACT weights for given halting probabilities ``h`` (M, N) -> (p (M, N), steps N(t), R(t)).

    The reference computation of the weights that :class:`ACTEncoder` forms step by step.

    Arguments
    ---------
    h : torch.Tensor
        (M, N) halting probabilities of N steps.
    epsilon : float
        A frame halts once its cumulative halting probability reaches 1 - epsilon.

    Returns
    -------
    p : torch.Tensor
        (M, N) weights of the step states (0 after the halting step).
    steps : torch.Tensor
        (M,) steps executed N(t), as floats.
    remainder : torch.Tensor
        (M,) remainder R(t), the weight of the halting step.

    Example
    -------
    >>> import torch
    >>> p, steps, r = act_weights(torch.tensor([[0.3, 0.5, 0.4], [0.995, 0.5, 0.5]]), 0.01)
    >>> [[round(x, 4) for x in row] for row in p.tolist()], steps.tolist(), [round(x, 4) for x in r.tolist()]
    ([[0.3, 0.5, 0.2], [1.0, 0.0, 0.0]], [3.0, 1.0], [0.2, 1.0])
    """
    m, n_steps = h.shape
    p, steps, remainder = torch.zeros_like(h), h.new_zeros(m), h.new_zeros(m)
    cum, running = h.new_zeros(m), torch.ones(m, dtype=torch.bool, device=h.device)
    for n in range(n_steps):
        p_n, halt = act_step(cum, h[:, n], 1.0 - epsilon, last=n == n_steps - 1)
        p[:, n] = torch.where(running, p_n, torch.zeros_like(p_n))
        steps += running.to(h.dtype)
        remainder = torch.where(running & halt, p_n, remainder)
        cum = cum + h[:, n]
        running = running & ~halt
    return p, steps, remainder


def halting_distribution(lam: Tensor) -> Tensor:
    """PonderNet p_n = lambda_n * prod_{j<n} (1 - lambda_j) for (M, N) lambdas; lambda_N is set to 1.

    Arguments
    ---------
    lam : torch.Tensor
        (M, N) halting probabilities lambda_n (the last column is not read).

    Returns
    -------
    torch.Tensor
        (M, N) halting distribution; each row sums to 1.

    Example
    -------
    >>> import torch
    >>> halting_distribution(torch.tensor([[0.5, 0.5, 0.2]])).tolist()
    [[0.5, 0.25, 0.25]]
    """
    lam = torch.cat([lam[:, :-1], torch.ones_like(lam[:, -1:])], dim=1)
    not_halted = torch.cumprod(torch.cat([torch.ones_like(lam[:, :1]), 1.0 - lam[:, :-1]], dim=1), dim=1)
    return lam * not_halted


def truncated_geometric(lambda_p: float, max_steps: int) -> Tensor:
    """Geometric(lambda_p) prior on steps 1..N, renormalised: g_n ∝ lambda_p (1 - lambda_p)^(n-1).

    Arguments
    ---------
    lambda_p : float
        Halting probability per step, in (0, 1).
    max_steps : int
        Number N of steps.

    Returns
    -------
    torch.Tensor
        (N,) float32 probabilities summing to 1.

    Example
    -------
    >>> [round(g, 4) for g in truncated_geometric(0.5, 3).tolist()]
    [0.5714, 0.2857, 0.1429]
    """
    n = torch.arange(max_steps, dtype=torch.float64)
    g = lambda_p * (1.0 - lambda_p) ** n
    return (g / g.sum()).float()


def kl_to_prior(p: Tensor, prior: Tensor) -> Tensor:
    """KL(p || prior) = sum_n p_n (log p_n - log prior_n) per row of (M, N) p, with 0 log 0 = 0.

    Finite (value and gradient) when some p_n are 0; ``prior`` must be positive.

    Arguments
    ---------
    p : torch.Tensor
        (M, N) halting distributions.
    prior : torch.Tensor
        (N,) positive prior probabilities.

    Returns
    -------
    torch.Tensor
        (M,) KL divergences.

    Example
    -------
    >>> import torch
    >>> kl = kl_to_prior(torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([0.5, 0.25, 0.25]))
    >>> [round(v, 4) for v in kl.tolist()]  # 0.5 log 2
    [0.3466]
    """
    positive = p > 0
    safe = torch.where(positive, p, torch.ones_like(p))
    terms = torch.where(positive, p * (torch.log(safe) - torch.log(prior.to(p))), torch.zeros_like(p))
    return terms.sum(-1)


# ----------------------------------------------------------------------------------------------
# Encoders
# ----------------------------------------------------------------------------------------------
class AdaptiveEncoder(Encoder):
    """Shared pre-net / step block / halting unit / post-net and output assembly of the encoders that
    halt per frame. A new one subclasses it and implements :meth:`ponder` (its halting over the
    pre-net states of the real frames, usually a halting rule given to :meth:`run_until_halted`,
    which skips the frames that have halted) and :meth:`aux_weight` (the weight of its per-frame
    term in ``aux_loss``); :class:`ACTEncoder` and :class:`PonderNetEncoder` are two.

    Arguments
    ---------
    input_size : int
        Width of the input features.
    num_outputs : int
        CTC outputs (labels and blank).
    max_steps : int
        Most steps N per frame.
    step_hidden : int
        Hidden units of the step block.
    residual : bool
        Residual step block (see :class:`StepBlock`).
    halting_bias_init : float
        Initial bias of the halting unit.
    hidden_size : int
        Units per direction of the pre-net and post-net BiGRUs (states are ``2 * hidden_size`` wide).
    dropout : float
        Dropout after the BiGRUs.
    """

    #: The hparams key of ``max_steps``, named by its error.
    max_steps_key = "max_steps"

    def __init__(self, input_size: int, num_outputs: int, max_steps: int, step_hidden: int, residual: bool,
                 halting_bias_init: float, hidden_size: int, dropout: float):
        super().__init__()
        if max_steps < 1:
            raise ValueError(f"max_steps (hparams key {self.max_steps_key!r}) must be >= 1, got {max_steps}")
        width = 2 * hidden_size
        self.max_steps = max_steps
        self.pre_net = BiGRU(input_size, hidden_size, dropout=dropout)
        self.step = StepBlock(width, step_hidden, residual)
        self.halting = HaltingUnit(width, halting_bias_init)
        self.post_net = PostNet(width, num_outputs, hidden_size, dropout=dropout)

    def component_macs(self) -> Dict[str, int]:
        """MACs per frame of the pre-net, of one step (block and halting unit) and of the post-net."""
        return {
            "pre_net": module_macs(self.pre_net),
            "step_block": module_macs(self.step) + module_macs(self.halting),
            "post_net": module_macs(self.post_net),
        }

    def ponder(self, s: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """(M, D) pre-net states of the real frames -> (output (M, D), steps (M,), weights (M, N), aux (M,))."""
        raise NotImplementedError

    def run_until_halted(self, s: Tensor, halting_rule: HaltingRule) -> Tuple[Tensor, Tensor, Tensor]:
        """Step the frames that have not halted, one step at a time; a halted frame computes nothing more.

        ``halting_rule(active, lam, last)`` gets, at each step, the rows of ``s`` still running
        (``active``), their halting unit's outputs ``lam`` and whether the step is the last; it
        returns the weight p_n of this step's state in each of their outputs and whether each halts
        after this step (all of them at the last). Returns the output sum_n p_n s_n (M, D), the steps
        each frame ran (M,) and the weights (M, N).
        """
        m = s.shape[0]
        out, weights, steps = torch.zeros_like(s), s.new_zeros(m, self.max_steps), s.new_zeros(m)
        active = torch.arange(m, device=s.device)
        for n in range(self.max_steps):
            s, lam = self._advance(s)
            p, halt = halting_rule(active, lam, n == self.max_steps - 1)
            out = out.index_add(0, active, p.unsqueeze(-1) * s)  # out += p_n s_n (a sum, not a lerp)
            weights = weights.index_put((active, torch.full_like(active, n)), p)
            steps = steps.index_add(0, active, torch.ones_like(p))
            active, s = active[~halt], s[~halt]
            if active.numel() == 0:
                break
        return out, steps, weights

    def aux_weight(self) -> float:
        """Weight of the per-frame auxiliary term in ``aux_loss``."""
        raise NotImplementedError

    def _advance(self, s: Tensor) -> Tuple[Tensor, Tensor]:
        """One step: (next state, halting probability), both float32.

        Under bf16 autocast the block's matrix products run in bf16, but states and halting sums
        stay float32: a bf16 cumulative sum (8 bits of mantissa) could not resolve the 1 - eps
        threshold.
        """
        s = self.step(s).float()
        return s, self.halting(s).float()

    def forward(self, feats: Tensor, lengths: Tensor, surprisal: Optional[Tensor] = None) -> EncoderOutput:
        """Encode a padded batch (see :meth:`Encoder.forward`); ``surprisal`` is not read."""
        batch, time = feats.shape[:2]
        lengths = lengths.to(feats.device)
        mask = lengths_to_mask(lengths, time)
        x = self.pre_net(feats, lengths)
        b, t = mask.nonzero(as_tuple=True)
        out, steps, weights, aux = (v.float() for v in self.ponder(x[b, t].float()))
        y = out.new_zeros(x.shape).index_put((b, t), out)
        logits = self.post_net(y, lengths)
        steps_bt = out.new_zeros(batch, time).index_put((b, t), steps)
        aux_bt = out.new_zeros(batch, time).index_put((b, t), aux)
        macs = self.component_macs()
        return EncoderOutput(
            log_probs=torch.log_softmax(logits, dim=-1),
            lengths=lengths,
            aux_loss=self.aux_weight() * aux_bt.sum() / max(aux_bt.shape[0], 1),  # per utterance; 0 for no utterance
            frame_macs={
                "pre_net": uniform_frame_macs(macs["pre_net"], mask),
                "step_block": steps_bt.detach().to(torch.float64) * float(macs["step_block"]),
                "post_net": uniform_frame_macs(macs["post_net"], mask),
            },
            stats={
                "steps": steps_bt.detach(),
                "halting_p": out.new_zeros(batch, time, self.max_steps).index_put((b, t), weights.detach()),
            },
        )


class ACTEncoder(AdaptiveEncoder):
    """Adaptive Computation Time (Graves, 2016) over a per-frame residual step block.

    Halting probabilities h_n; a frame halts at N(t) = the first n with sum_{j<=n} h_j >= 1 - eps
    (or n = ``max_steps``); weights p_n = h_n for n < N(t) and the remainder
    R(t) = 1 - sum_{n<N(t)} h_n at N(t); output sum_n p_n s_n. Ponder cost rho_t = N(t) + R(t)
    (gradient through R only); ``aux_loss = ponder_cost * mean_over_batch(sum_over_real_frames rho_t)``.
    The rule is deterministic and known before a later step runs, so halted frames are skipped in
    training as in evaluation.

    ``halting_bias_init=None`` sets the bias to logit(1/N): with the zero-initialised halting weight
    every h_n = 1/N, so every frame starts with all N steps weighted 1/N each (full depth, every step
    gets gradient) and the ponder cost learns to shorten. Graves's +1 would start at
    h = 0.73, i.e. 2 steps with 73% of the weight on the first, close to shallow from step one.

    Arguments
    ---------
    input_size, num_outputs, max_steps, step_hidden, hidden_size, dropout, residual
        As for every adaptive encoder (``AdaptiveEncoder``).
    epsilon : float
        Halting threshold 1 - epsilon on the cumulative halting probability, in (0, 1).
    ponder_cost : float
        Weight of the ponder cost in ``aux_loss``.
    halting_bias_init : float, optional
        Initial bias of the halting unit; None: logit(1 / N).

    Example
    -------
    >>> import torch
    >>> enc = ACTEncoder(input_size=20, num_outputs=5, hidden_size=8, step_hidden=32, max_steps=4)
    >>> round(torch.sigmoid(enc.halting.linear.bias).item(), 6)  # 1 / max_steps
    0.25
    >>> out = enc(torch.randn(2, 6, 20), torch.tensor([6, 3]))
    >>> out.stats["steps"].tolist()  # at initialisation: every real frame runs all steps
    [[4.0, 4.0, 4.0, 4.0, 4.0, 4.0], [4.0, 4.0, 4.0, 0.0, 0.0, 0.0]]
    >>> sorted(out.frame_macs)
    ['post_net', 'pre_net', 'step_block']
    """

    max_steps_key = "act_max_steps"

    def __init__(self, input_size: int, num_outputs: int, max_steps: int = 8, step_hidden: int = 256,
                 epsilon: float = 0.01, ponder_cost: float = 1e-4, halting_bias_init: Optional[float] = None,
                 hidden_size: int = 256, dropout: float = 0.5, residual: bool = True):
        if not 0.0 < epsilon < 1.0:
            raise ValueError(f"ACT epsilon must be in (0, 1), got {epsilon}: set it as epsilon under encoder_module: "
                             "adaptive_options: act: in the hparams (hparams/common/conditional_ctc.yaml)")
        if halting_bias_init is None:
            halting_bias_init = -math.log(max_steps - 1) if max_steps > 1 else 0.0  # logit(1 / N)
        super().__init__(input_size, num_outputs, max_steps, step_hidden, residual, halting_bias_init,
                         hidden_size, dropout)
        self.epsilon, self.ponder_cost = epsilon, ponder_cost

    def aux_weight(self) -> float:
        return self.ponder_cost

    def ponder(self, s: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """ACT steps on the frames still running; aux is the ponder cost N(t) + R(t)."""
        cum, remainder = s.new_zeros(s.shape[0]), s.new_zeros(s.shape[0])  # sum_{j<n} h_j; R(t)

        def halting_rule(active: Tensor, h: Tensor, last: bool) -> Tuple[Tensor, Tensor]:
            nonlocal cum, remainder
            p, halt = act_step(cum[active], h, 1.0 - self.epsilon, last)
            remainder = remainder.index_put((active[halt],), p[halt])
            cum = cum.index_add(0, active, h)
            return p, halt

        out, steps, weights = self.run_until_halted(s, halting_rule)
        return out, steps, weights, steps + remainder


class PonderNetEncoder(AdaptiveEncoder):
    """PonderNet (Banino et al., 2021) with per-frame halting and the expected representation.

    lambda_n = halting unit on s_n (lambda_N = 1), p_n = lambda_n prod_{j<n} (1 - lambda_j).
    Training runs all N steps on every real frame and feeds the expected state sum_n p_n s_n to
    the post-net (one CTC loss; a per-step CTC loss sum_n p_n L_n is ill-defined when every frame
    halts on its own); ``aux_loss = beta * mean_over_batch(sum_over_real_frames KL(p || g))`` with
    g the Geometric(``lambda_p``) truncated to N steps and renormalised (0 log 0 = 0).

    Evaluation (``inference``):

    - ``"truncated"`` (default): the state training used, with the steps that cannot change it
      skipped. A frame stops after step n once its halting mass not yet assigned,
      r_n = prod_{j<=n} (1 - lambda_j), is below ``tail_mass``; step n then gets all of the mass
      left, p_n + r_n, so the output sum_{j<=n} p_j s_j + r_n s_n differs from the training
      output by r_n * (the p-weighted mean of s_k - s_n over k > n), at most ``tail_mass`` times
      the largest distance between two step states. ``tail_mass=0`` runs all N steps and gives
      the training output exactly. ``aux_loss``: the KL of the weights used.
    - ``"expected"``: all N steps on every frame (= truncated with ``tail_mass=0``).
    - ``"sample"`` draws halt ~ Bernoulli(lambda_n) step by step, ``"threshold"`` halts at the
      first n with cumulative p >= 0.5 (the median of the halting distribution): both feed the
      post-net one step's state, which training never showed it alone (kept for comparison;
      aux_loss 0, since lambdas of skipped steps are never computed).

    Every early-exit mode runs the block only on frames still active.

    ``halting_bias_init=None`` sets the bias to logit(lambda_p), so p starts at the prior (KL ~ 0;
    every step keeps weight >= (1 - lambda_p)^(N-1) and receives gradient).

    Arguments
    ---------
    input_size, num_outputs, max_steps, step_hidden, hidden_size, dropout, residual
        As for every adaptive encoder (``AdaptiveEncoder``).
    beta : float
        Weight of the KL term in ``aux_loss``.
    lambda_p : float
        Parameter of the geometric prior, in (0, 1).
    inference : str
        Evaluation mode, one of ``INFERENCE_MODES``.
    tail_mass : float
        ``"truncated"``: a frame stops once its unassigned halting mass is below this, in [0, 1).
    halting_bias_init : float, optional
        Initial bias of the halting unit; None: logit(lambda_p).

    Example
    -------
    >>> import torch
    >>> enc = PonderNetEncoder(input_size=20, num_outputs=5, hidden_size=8, step_hidden=32, max_steps=4,
    ...                        inference="threshold").eval()
    >>> out = enc(torch.randn(2, 6, 20), torch.tensor([6, 3]))
    >>> out.stats["steps"].tolist()  # at initialisation lambda_1 = 0.5: the median halts at once
    [[1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]]
    >>> float(out.aux_loss)
    0.0
    >>> enc.inference, enc.tail_mass = "truncated", 0.1  # unassigned mass 0.5^n: 0.0625 < 0.1 after 4 steps
    >>> enc(torch.randn(2, 6, 20), torch.tensor([6, 3])).stats["steps"][0].tolist()
    [4.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    """

    max_steps_key = "pondernet_max_steps"
    INFERENCE_MODES = ("truncated", "expected", "sample", "threshold")
    #: The modes whose halting is drawn (``"sample"``) or its deterministic counterpart (``"threshold"``):
    #: the two that :meth:`set_test_sampling` switches between.
    DRAWN_INFERENCE_MODES = ("sample", "threshold")

    def __init__(self, input_size: int, num_outputs: int, max_steps: int = 8, step_hidden: int = 256,
                 beta: float = 0.01, lambda_p: float = 0.5, inference: str = "truncated", tail_mass: float = 0.05,
                 halting_bias_init: Optional[float] = None, hidden_size: int = 256, dropout: float = 0.5,
                 residual: bool = True):
        if not 0.0 < lambda_p < 1.0:
            raise ValueError(f"lambda_p (hparams key 'pondernet_lambda_p') must be in (0, 1), got {lambda_p}")
        if halting_bias_init is None:
            halting_bias_init = math.log(lambda_p / (1.0 - lambda_p))
        super().__init__(input_size, num_outputs, max_steps, step_hidden, residual, halting_bias_init,
                         hidden_size, dropout)
        self.beta, self.lambda_p, self.inference, self.tail_mass = beta, lambda_p, inference, tail_mass
        self.register_buffer("prior", truncated_geometric(lambda_p, max_steps), persistent=False)

    @property
    def inference(self) -> str:
        """The evaluation mode, one of ``INFERENCE_MODES`` (checked when set)."""
        return self._inference

    @inference.setter
    def inference(self, mode: str) -> None:
        if mode not in self.INFERENCE_MODES:
            raise ValueError(f"PonderNet inference (hparams key 'pondernet_inference') must be one of "
                             f"{self.INFERENCE_MODES}, got {mode!r}")
        self._inference = mode

    @property
    def tail_mass(self) -> float:
        """Unassigned mass below which truncated inference stops a frame, in [0, 1) (checked when set)."""
        return self._tail_mass

    @tail_mass.setter
    def tail_mass(self, mass: float) -> None:
        try:
            value = float(mass)
        except (TypeError, ValueError):
            raise ValueError(f"tail_mass (hparams key 'pondernet_tail_mass') must be a number in [0, 1), "
                             f"got {mass!r}") from None
        if not 0.0 <= value < 1.0:
            raise ValueError(f"tail_mass (hparams key 'pondernet_tail_mass') must be in [0, 1), got {mass}")
        self._tail_mass = value

    def aux_weight(self) -> float:
        return self.beta

    def routing_draws(self) -> bool:
        """Whether halting can be drawn at test time: True in the ``sample`` inference and in its
        deterministic counterpart ``threshold``, between which :meth:`set_test_sampling` switches."""
        return self.inference in self.DRAWN_INFERENCE_MODES

    def set_test_sampling(self, sampled: bool) -> None:
        """``sample`` inference (True) or ``threshold`` (False) where the inference is one of the two;
        the ``expected`` and ``truncated`` inference draw nothing (``sampled`` True is a ValueError)."""
        if self.routing_draws():
            self.inference = "sample" if sampled else "threshold"
        elif sampled:
            raise ValueError(f"this model's routing draws nothing ({self.routing_kind()})")

    def routing_kind(self) -> str:
        return f"{type(self).__name__}, {self.inference} inference"

    def ponder(self, s: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """All N steps in training and in ``"expected"`` mode, else early exit."""
        if self.training or self.inference == "expected":
            return self._ponder_expected(s)
        if self.inference == "truncated":
            return self._ponder_truncated(s)
        return self._ponder_early_exit(s)

    def _ponder_truncated(self, s: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """The expected state over the steps run; a frame stops once its unassigned mass < ``tail_mass``."""
        unassigned = s.new_ones(s.shape[0])  # prod_{j<n} (1 - lambda_j)

        def halting_rule(active: Tensor, lam: Tensor, last: bool) -> Tuple[Tensor, Tensor]:
            nonlocal unassigned
            before = unassigned[active]
            after = torch.zeros_like(lam) if last else before * (1.0 - lam)
            halt = torch.ones_like(lam, dtype=torch.bool) if last else after < self.tail_mass
            unassigned = unassigned.index_put((active,), after)
            return torch.where(halt, before, before - after), halt  # the halting step takes p_n + r_n

        out, steps, weights = self.run_until_halted(s, halting_rule)
        return out, steps, weights, kl_to_prior(weights, self.prior)

    def _ponder_expected(self, s: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """Every step on every frame; output sum_n p_n s_n, aux KL(p || prior)."""
        states, lambdas = [], []
        for _ in range(self.max_steps):
            s, lam = self._advance(s)
            states.append(s)
            lambdas.append(lam)
        p = halting_distribution(torch.stack(lambdas, dim=1))
        out = torch.einsum("mn,mnd->md", p, torch.stack(states, dim=1))
        steps = s.new_full((s.shape[0],), float(self.max_steps))
        return out, steps, p, kl_to_prior(p, self.prior)

    def _ponder_early_exit(self, s: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """Sampled or thresholded halting; output the halting step's state (weight 1), aux 0."""
        not_halted = s.new_ones(s.shape[0])  # prod_{j<n} (1 - lambda_j), for "threshold"

        def halting_rule(active: Tensor, lam: Tensor, last: bool) -> Tuple[Tensor, Tensor]:
            nonlocal not_halted
            if last:
                halt = torch.ones_like(lam, dtype=torch.bool)
            elif self.inference == "sample":
                halt = torch.rand_like(lam) < lam
            else:
                remaining = not_halted[active] * (1.0 - lam)
                halt = 1.0 - remaining >= 0.5
                not_halted = not_halted.index_put((active,), remaining)
            return halt.to(lam.dtype), halt

        out, steps, weights = self.run_until_halted(s, halting_rule)
        return out, steps, weights, s.new_zeros(s.shape[0])

