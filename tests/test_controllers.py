"""Tests for surprisal_cc.controllers: decisions, calibration, FLOP budget, learned controller."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from surprisal_cc.controllers import (
    AUTHORS_ERROR_SCALE,
    CONTROLLERS,
    ConstantController,
    LearnedController,
    SurprisalController,
    bias_shift_for_big_fraction,
    budget_big_fraction,
    build_controller,
    calibrate_surprisal_controller,
    calibration_loss,
    check_calibration_target,
    sample_decisions,
    solve_bias_shift,
    target_mean_for_budget,
)
from surprisal_cc.encoders import ConditionalEncoder, masked_mixture, route_frames
from surprisal_cc.nnet import FrameNet
from surprisal_cc.nnet import lengths_to_mask

torch.set_num_threads(1)

SMALL_ONLY, BIG_ONLY = 5_703_288, 7_540_344  # paper Table 1, MACs per frame


def surprisal_batches(kind: str, n_batches: int = 6, size: int = 500, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        if kind == "gamma":
            gamma = torch.distributions.Gamma(torch.tensor(3.0), torch.tensor(0.1))
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
            batches.append(gamma.sample((size,)))
        else:  # lognormal
            batches.append(torch.exp(3.0 + 0.5 * torch.randn(size, generator=g)))
    return batches


def p_stats(ctrl: SurprisalController, values: torch.Tensor):
    """Independent computation of mean / variance of p_big from the calibrated controller."""
    w, b = float(ctrl.weight), float(ctrl.bias)
    p = torch.sigmoid(w * values.double() + b)
    return float(p.mean()), float(p.var(unbiased=False))


# ----------------------------------------------------------------------------------------------
# calibration
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gamma", "lognormal"])
@pytest.mark.parametrize("target", [(0.5, 0.04), (0.65, 0.04)])
def test_full_batch_calibration_hits_target(kind, target):
    torch.manual_seed(0)
    batches = surprisal_batches(kind)
    ctrl = SurprisalController()
    assert not bool(ctrl.calibrated)
    result = calibrate_surprisal_controller(ctrl, iter(batches), *target, method="full_batch")
    mean, var = p_stats(ctrl, torch.cat(batches))
    assert abs(mean - target[0]) < 1e-3 and abs(var - target[1]) < 1e-3
    assert result["mean_p_big"] == pytest.approx(mean, abs=1e-6)
    assert result["var_p_big"] == pytest.approx(var, abs=1e-6)
    assert result["frames"] == sum(b.numel() for b in batches)
    assert (result["weight"], result["bias"]) == pytest.approx((float(ctrl.weight), float(ctrl.bias)), rel=1e-6)
    assert bool(ctrl.calibrated)
    assert float(ctrl.weight) > 0  # more surprising frames -> more likely big


def _sgd_losses(kind, target_mean, target_var, n_batches=20, size=2000, **kwargs):
    """Eq. 4 on all frames at the documented initialisation and after the one-pass SGD calibration."""
    torch.manual_seed(0)
    batches = surprisal_batches(kind, n_batches=n_batches, size=size)
    values = torch.cat(batches).double()
    # initialisation described in the docstring: logit = (s - m) / sd + logit(mu), m, sd of the first batch
    m, sd = batches[0].double().mean(), batches[0].double().std()
    p0 = torch.sigmoid((values - m) / sd + math.log(target_mean / (1 - target_mean)))
    loss0 = float(calibration_loss(p0, target_mean, target_var))
    ctrl = SurprisalController()
    result = calibrate_surprisal_controller(ctrl, iter(batches), target_mean, target_var, method="sgd", **kwargs)
    assert result["method"] == "sgd" and bool(ctrl.calibrated)
    assert result["frames"] == values.numel()
    p1 = torch.sigmoid(float(ctrl.weight) * values + float(ctrl.bias))
    return loss0, float(calibration_loss(p1, target_mean, target_var))


@pytest.mark.parametrize("kind", ["gamma", "lognormal"])
@pytest.mark.parametrize("target", [(0.5, 0.04), (0.65, 0.04), (0.5, 0.01)])
def test_sgd_calibration_improves_on_initialisation(kind, target):
    loss0, loss1 = _sgd_losses(kind, *target, lr=5.0)
    assert loss1 < loss0


def test_sgd_calibration_default_lr_improves_on_initialisation():
    results = [_sgd_losses(kind, *target) for kind in ("gamma", "lognormal")
               for target in ((0.5, 0.04), (0.65, 0.04))]
    assert all(loss1 < loss0 for loss0, loss1 in results), results


def test_authors_adam_calibration_is_their_procedure():
    """One Adam step (lr 0.01) per minibatch on Eq. 4 with the ddof=1 variance, on
    sigmoid(w' * e + b), e = 2 * surprisal, from w' = 0.1, b = -1; then w = 2 w'."""
    batches = surprisal_batches("lognormal", n_batches=30, size=400)
    w = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(-1.0, dtype=torch.float64, requires_grad=True)
    adam = torch.optim.Adam([w, b], lr=0.01)
    for s in batches:
        p = torch.sigmoid(w * 2.0 * s.double() + b)
        loss = 0.5 * (p.mean() - 0.5) ** 2 + 0.5 * (p.var() - 0.04) ** 2  # torch var: ddof=1
        adam.zero_grad()
        loss.backward()
        adam.step()
    ctrl = SurprisalController()
    result = calibrate_surprisal_controller(ctrl, iter(batches), 0.5, 0.04, method="authors_adam")
    assert AUTHORS_ERROR_SCALE == 2.0
    assert result["method"] == "authors_adam" and bool(ctrl.calibrated)
    assert float(ctrl.weight) == pytest.approx(2.0 * w.item(), rel=1e-5)
    assert float(ctrl.bias) == pytest.approx(b.item(), rel=1e-5)


@pytest.mark.parametrize("kind", ["gamma", "lognormal"])
@pytest.mark.parametrize("target", [(0.5, 0.04), (0.65, 0.04)])
def test_authors_adam_calibration_moves_toward_target(kind, target):
    batches = surprisal_batches(kind, n_batches=40, size=500)
    values = torch.cat(batches).double()
    start = torch.sigmoid(AUTHORS_ERROR_SCALE * 0.1 * values - 1.0)  # w' = 0.1, b = -1
    ctrl = SurprisalController()
    result = calibrate_surprisal_controller(ctrl, iter(batches), *target, method="authors_adam")
    mean, var = p_stats(ctrl, values)
    assert float(calibration_loss(torch.sigmoid(float(ctrl.weight) * values + float(ctrl.bias)), *target)) \
        < float(calibration_loss(start, *target))
    assert abs(mean - target[0]) < abs(float(start.mean()) - target[0])
    assert result["mean_p_big"] == pytest.approx(mean, abs=1e-6) and result["frames"] == values.numel()


def test_calibration_loss_formula():
    p = torch.tensor([0.1, 0.4, 0.9, 0.6])
    mean, var = 0.5, ((0.4 ** 2 + 0.1 ** 2 + 0.4 ** 2 + 0.1 ** 2) / 4)
    expected = 0.5 * (mean - 0.3) ** 2 + 0.5 * (var - 0.02) ** 2
    assert float(calibration_loss(p, 0.3, 0.02)) == pytest.approx(expected)
    sample_var = var * 4 / 3
    expected = 0.5 * (mean - 0.3) ** 2 + 0.5 * (sample_var - 0.02) ** 2
    assert float(calibration_loss(p, 0.3, 0.02, unbiased=True)) == pytest.approx(expected)


def test_calibration_errors():
    ctrl = SurprisalController()
    with pytest.raises(ValueError, match="method"):
        calibrate_surprisal_controller(ctrl, [torch.ones(3)], 0.5, 0.04, method="adam")
    with pytest.raises(ValueError, match=r"controller_target_mean must be in \(0, 1\), got 1.5"):
        calibrate_surprisal_controller(ctrl, [torch.ones(3)], 1.5, 0.04)
    with pytest.raises(ValueError, match="no frames"):
        calibrate_surprisal_controller(ctrl, [torch.zeros(0)], 0.5, 0.04)


def test_check_calibration_target():
    """The mean in (0, 1); the variance, where given, below mean x (1 - mean): one line each."""
    check_calibration_target(0.5, 0.0)
    check_calibration_target(0.05)  # the variance unchecked
    for mean in (0, 1, float("nan")):
        with pytest.raises(ValueError, match="controller_target_mean must be in"):
            check_calibration_target(mean, 0.01)
    for var in (-0.01, 0.25):
        with pytest.raises(ValueError, match=r"controller_target_var must be in \[0, 0.25\)") as raised:
            check_calibration_target(0.5, var)
        assert "\n" not in str(raised.value)


def test_unreachable_variance_is_warned_and_fitted_as_close_as_it_can(caplog):
    """A budget's mean can leave the configured variance out of reach: one warning, and the fit comes
    close to the mean with nearly the largest variance p_big can have there."""
    _ = torch.manual_seed(0)
    batches = [4 * torch.rand(2000) for _ in range(2)]
    with caplog.at_level("WARNING", logger="surprisal_cc.controllers"):
        out = calibrate_surprisal_controller(SurprisalController(), batches, target_mean=0.9, target_var=0.1)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "controller_target_var 0.1 cannot be met with target mean 0.9" in warned[0]
    assert abs(out["mean_p_big"] - 0.9) < 0.01 and out["var_p_big"] > 0.08  # near the largest, 0.9 x 0.1
    caplog.clear()
    with caplog.at_level("WARNING", logger="surprisal_cc.controllers"):
        calibrate_surprisal_controller(SurprisalController(), batches, target_mean=0.9, target_var=0.02)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_calibration_subsamples_beyond_max_frames():
    torch.manual_seed(0)
    batches = surprisal_batches("lognormal", n_batches=5, size=400)
    ctrl = SurprisalController()
    result = calibrate_surprisal_controller(ctrl, iter(batches), 0.5, 0.04, max_frames=300)
    assert result["frames"] == 2000
    mean, var = p_stats(ctrl, torch.cat(batches))
    # fitted on a 300-frame subsample: close to the target on all frames, not exact
    assert abs(mean - 0.5) < 0.05 and abs(var - 0.04) < 0.02


# ----------------------------------------------------------------------------------------------
# FLOP budget
# ----------------------------------------------------------------------------------------------
def test_target_mean_for_budget_formula():
    assert target_mean_for_budget(SMALL_ONLY, SMALL_ONLY, BIG_ONLY) == 0.0
    assert target_mean_for_budget(BIG_ONLY, SMALL_ONLY, BIG_ONLY) == 1.0
    assert target_mean_for_budget(6_000_000, SMALL_ONLY, BIG_ONLY) == pytest.approx(
        (6_000_000 - SMALL_ONLY) / (BIG_ONLY - SMALL_ONLY))


@pytest.mark.parametrize("budget", [6_410_000, 6_900_000])
def test_budget_calibration_hits_flop_budget(budget):
    torch.manual_seed(0)
    batches = surprisal_batches("gamma")
    mu = target_mean_for_budget(budget, SMALL_ONLY, BIG_ONLY)
    ctrl = SurprisalController()
    calibrate_surprisal_controller(ctrl, iter(batches), mu, 0.04)
    mean_p, _ = p_stats(ctrl, torch.cat(batches))
    expected_macs = SMALL_ONLY + mean_p * (BIG_ONLY - SMALL_ONLY)
    assert abs(expected_macs - budget) / budget < 0.01


@pytest.mark.parametrize("budget", [SMALL_ONLY - 1, BIG_ONLY + 1, 0])
def test_budget_outside_range(budget):
    with pytest.raises(ValueError, match="budget"):
        target_mean_for_budget(budget, SMALL_ONLY, BIG_ONLY)


# ----------------------------------------------------------------------------------------------
# decisions
# ----------------------------------------------------------------------------------------------
def _inputs(B=3, T=10, D=4, lengths=(10, 6, 1)):
    features = torch.randn(B, T, D)
    surprisal = torch.rand(B, T) * 6
    mask = lengths_to_mask(torch.tensor(lengths), T)
    return features, surprisal, mask


def test_deterministic_decisions():
    torch.manual_seed(0)
    features, surprisal, mask = _inputs()
    ctrl = SurprisalController(weight=1.5, bias=-4.0)
    d1 = ctrl(features, surprisal, mask, stochastic=False)
    d2 = ctrl(features, surprisal, mask, stochastic=False)
    assert torch.equal(d1.use_big, d2.use_big)
    p = torch.sigmoid(1.5 * surprisal - 4.0)
    assert torch.equal(d1.use_big, (p > 0.5) & mask)
    torch.testing.assert_close(d1.p_big, p * mask)
    assert 0 < int(d1.use_big.sum()) < int(mask.sum())  # both branches used
    assert d1.gate is None and float(d1.aux_loss) == 0.0


def test_sample_decisions():
    p = torch.tensor([0.0, 0.3, 0.5, 0.51, 1.0])
    assert sample_decisions(p, stochastic=False).tolist() == [False, False, False, True, True]
    torch.manual_seed(0)
    draws = torch.stack([sample_decisions(p, stochastic=True) for _ in range(2000)]).float().mean(0)
    assert draws[0] == 0 and draws[-1] == 1
    torch.testing.assert_close(draws, p, rtol=0, atol=0.04)


def test_stochastic_frequencies_approach_p():
    torch.manual_seed(0)
    T, reps = 40, 1000
    surprisal = torch.linspace(0, 4, T).expand(4, T)  # p from 0.12 to 0.88 along time
    ctrl = SurprisalController(weight=1.0, bias=-2.0)
    mask = torch.ones(4, T, dtype=torch.bool)
    features = torch.zeros(4, T, 1)
    counts = torch.zeros(T)
    for _ in range(reps // 4):
        counts += ctrl(features, surprisal, mask, stochastic=True).use_big.float().sum(0)
    freq = counts / reps
    p = torch.sigmoid(surprisal[0] - 2.0)
    assert (freq - p).abs().max() < 0.06  # binomial sd <= 0.016
    assert abs(float(freq.mean() - p.mean())) < 0.01
    # not deterministic: some frames with p < 0.5 were sent to the big network
    assert float(freq[p < 0.5].sum()) > 0


def test_random_controller_frequency():
    torch.manual_seed(0)
    ctrl = build_controller("random", p_big=0.3)
    features, _, _ = _inputs(B=4, T=40, lengths=(40, 40, 40, 40))
    mask = torch.ones(4, 40, dtype=torch.bool)
    freq = torch.stack([ctrl(features, None, mask).use_big for _ in range(100)]).float().mean()
    assert abs(float(freq) - 0.3) < 0.01


@pytest.mark.parametrize("name", ["surprisal", "random", "big_only", "learned"])
@pytest.mark.parametrize("stochastic", [True, False])
def test_decisions_false_on_padding(name, stochastic):
    torch.manual_seed(0)
    ctrl = build_controller(name, weight=10.0, bias=5.0, input_size=4)  # surprisal: p ~ 1 everywhere
    features, surprisal, mask = _inputs()
    d = ctrl(features, surprisal, mask, stochastic=stochastic)
    assert not d.use_big[~mask].any()
    assert torch.all(d.p_big[~mask] == 0)
    if name in ("surprisal", "big_only"):
        assert d.use_big[mask].all()


def test_build_controller_unknown_name():
    with pytest.raises(ValueError) as info:
        build_controller("oracle")
    message = str(info.value)
    assert "oracle" in message
    for name in ("surprisal", "random", "learned", "big_only", "small_only"):
        assert name in message
    assert {"surprisal", "random", "learned", "big_only", "small_only"} <= set(CONTROLLERS)  # and any registered since


def test_build_controller_refuses_a_setting_no_controller_names():
    """A misspelt controller_options key is an error naming it, not a silently kept default."""
    with pytest.raises(ValueError, match=r"\['penalty_wieght'\].*named by no controller"):
        build_controller("learned", input_size=4, penalty_wieght=0.5)
    build_controller("random", penalty_weight=0.5, input_size=4)  # another controller's setting: ignored


def test_build_controller_refuses_a_class_registered_under_another_name(monkeypatch):
    class Misnamed(ConstantController):
        name = "always_big"

    monkeypatch.setitem(CONTROLLERS, "big", Misnamed)
    with pytest.raises(ValueError, match=r"CONTROLLERS\['big'\].*'always_big'"):
        build_controller("big")


def test_probability_reads_the_padding_mask(monkeypatch):
    """forward hands probability the mask, so a rule pooled over an utterance can skip padding:
    an utterance's p_big is then the same alone and padded in a batch."""

    class ZScore(ConstantController):
        name = "zscore"

        def probability(self, features, surprisal, bias_shift=0.0, mask=None):
            energy = features.sum(-1)
            real = torch.ones_like(energy, dtype=torch.bool) if mask is None else mask
            count = real.sum(1, keepdim=True)
            mean = (energy * real).sum(1, keepdim=True) / count
            std = (((energy - mean) * real) ** 2).sum(1, keepdim=True).div(count).sqrt()
            return torch.sigmoid((energy - mean) / std + bias_shift)

    monkeypatch.setitem(CONTROLLERS, "zscore", ZScore)
    ctrl = build_controller("zscore")
    torch.manual_seed(0)
    alone = torch.randn(1, 6, 4)
    batch = torch.cat([torch.cat([alone, torch.full((1, 3, 4), 5.0)], 1), torch.randn(1, 9, 4)])
    p_alone = ctrl(alone, None, torch.ones(1, 6, dtype=torch.bool), stochastic=False).p_big
    p_batch = ctrl(batch, None, lengths_to_mask(torch.tensor([6, 9]), 9), stochastic=False).p_big
    torch.testing.assert_close(p_batch[0, :6], p_alone[0])
    assert torch.all(p_batch[0, 6:] == 0)
    # a rule that is NaN on padding (here: the z-score of an all-padding row) still gives p_big 0 there
    empty = ctrl(batch, None, lengths_to_mask(torch.tensor([6, 0]), 9), stochastic=True)
    assert torch.all(empty.p_big[1] == 0) and not empty.use_big[1].any()


def test_the_documented_lists_of_controllers_name_every_registered_one():
    """The controllers' table in the module's docstring and the hparams comment list CONTROLLERS."""
    import re
    from pathlib import Path

    import surprisal_cc.controllers as module

    table = re.findall(r"^(\w+) {2,}", module.__doc__.split("=====\n", 2)[2], flags=re.M)
    assert set(table) == set(CONTROLLERS)
    yaml = (Path(__file__).parents[1] / "hparams/common/conditional_ctc.yaml").read_text()
    listed = re.search(r"^controller: \w+ .*CONTROLLERS: (.*)$", yaml, flags=re.M).group(1)
    assert set(listed.split(" | ")) == set(CONTROLLERS)


def test_constant_controllers():
    torch.manual_seed(0)
    features, surprisal, mask = _inputs()
    for name, p in (("big_only", 1.0), ("small_only", 0.0), ("random", 0.5)):
        ctrl = build_controller(name, weight=3.0, bias=1.0, p_big=0.5, input_size=4)  # extra kwargs ignored
        assert isinstance(ctrl, ConstantController)
        d = ctrl(features, None, mask)
        assert torch.all(d.p_big[mask] == p), name
        assert ctrl.macs_per_frame() == 0
    assert build_controller("random", p_big=0.2).p_big == 0.2
    assert not build_controller("small_only")(features, None, mask).use_big.any()
    with pytest.raises(ValueError):
        ConstantController(1.5)


@pytest.mark.parametrize("stochastic", [True, False])
def test_budget_bias_shift_meets_the_fraction_on_the_held_out_frames(stochastic):
    """The solved shift routes the asked fraction of the frames it was solved on to the big network:
    in expectation (stochastic routing) or exactly up to one frame (deterministic routing)."""
    generator = torch.Generator().manual_seed(0)
    surprisal = torch.randn(5000, generator=generator, dtype=torch.float64).exp() * 40.0  # skewed, like surprisal
    ctrl = SurprisalController()
    ctrl.set_parameters(weight=0.05, bias=-1.5)
    for fraction in (0.1, 0.5, 0.62, 0.9):
        shift = bias_shift_for_big_fraction(ctrl, surprisal, fraction, stochastic=stochastic)
        logits = 0.05 * surprisal - 1.5 + shift
        reached = float(torch.sigmoid(logits).mean() if stochastic else (logits > 0).double().mean())
        assert reached == pytest.approx(fraction, abs=1e-4 if stochastic else 2 / surprisal.numel())
    shifts = [bias_shift_for_big_fraction(ctrl, surprisal, f, stochastic=stochastic) for f in (0.2, 0.4, 0.8)]
    assert shifts == sorted(shifts)  # a larger budget, a larger shift
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="fraction"):
            bias_shift_for_big_fraction(ctrl, surprisal, bad)


@pytest.mark.parametrize("stochastic", [True, False])
def test_solve_bias_shift_solves_on_every_batch_together(stochastic):
    """Batches of frames (any shape, read once) give the shift of all their frames together and how
    many frames it was solved on."""
    surprisal = torch.randn(5000, generator=torch.Generator().manual_seed(0)).exp() * 40.0
    ctrl = SurprisalController()
    ctrl.set_parameters(weight=0.05, bias=-1.5)
    batches = iter([surprisal[:1000], surprisal[1000:4000].reshape(2, 1500), surprisal[4000:]])
    solution = solve_bias_shift(ctrl, batches, 0.62, stochastic=stochastic)
    assert solution == {"big_fraction": 0.62, "frames": 5000,
                        "bias_shift": bias_shift_for_big_fraction(ctrl, surprisal, 0.62, stochastic=stochastic)}


def test_bias_shift_raises_p():
    torch.manual_seed(0)
    features, surprisal, mask = _inputs()
    ctrl = SurprisalController(weight=0.8, bias=-2.0)
    p0 = ctrl.probability(features, surprisal)
    p1 = ctrl.probability(features, surprisal, bias_shift=1.5)
    torch.testing.assert_close(p1, torch.sigmoid(0.8 * surprisal - 2.0 + 1.5))
    assert torch.all(p1 > p0)
    rnd = build_controller("random", p_big=0.5)
    torch.testing.assert_close(rnd.probability(features, None, bias_shift=1.0),
                               torch.full(mask.shape, 1 / (1 + math.exp(-1.0))))
    rnd3 = build_controller("random", p_big=0.3)
    expected = 1 / (1 + math.exp(-(math.log(0.3 / 0.7) + 2.0)))
    assert float(rnd3.probability(features, None, bias_shift=2.0)[0, 0]) == pytest.approx(expected)
    # constant 0 / 1 stay constant
    assert torch.all(build_controller("big_only").probability(features, None, bias_shift=-3.0) == 1)
    assert torch.all(build_controller("small_only").probability(features, None, bias_shift=3.0) == 0)
    # the shift goes through forward as well
    d = ctrl(features, surprisal, mask, stochastic=False, bias_shift=1.5)
    torch.testing.assert_close(d.p_big, p1 * mask)


def test_surprisal_controller_requires_surprisal():
    ctrl = SurprisalController()
    with pytest.raises(ValueError, match="surprisal"):
        ctrl.probability(torch.zeros(1, 2, 3), None)


def test_surprisal_controller_buffers_and_state_dict():
    ctrl = SurprisalController(weight=0.5, bias=-1.0)
    assert list(ctrl.parameters()) == []
    assert ctrl.uses_surprisal and ctrl.macs_per_frame() == 2
    state = ctrl.state_dict()
    assert set(state) == {"weight", "bias", "calibrated"}
    assert not bool(state["calibrated"])
    ctrl.set_parameters(2.5, -7.0)
    state = ctrl.state_dict()
    assert float(state["weight"]) == 2.5 and float(state["bias"]) == -7.0 and bool(state["calibrated"])
    fresh = SurprisalController()
    fresh.load_state_dict(state)
    assert float(fresh.weight) == 2.5 and float(fresh.bias) == -7.0 and bool(fresh.calibrated)


def test_surprisal_controller_not_in_optimizer_parameters():
    """Downstream optimisers never see the calibrated weight and bias."""
    ctrl = SurprisalController(weight=0.5, bias=-1.0)
    model = torch.nn.ModuleDict({"ctrl": ctrl, "lin": torch.nn.Linear(2, 2)})
    params = list(model.parameters())
    assert len(params) == 2 and all(p.requires_grad for p in params)


# ----------------------------------------------------------------------------------------------
# learned controller
# ----------------------------------------------------------------------------------------------
class Threshold(torch.autograd.Function):
    """[z > 0] in the forward pass, the identity in the backward pass (paper Sec. 4.3)."""

    @staticmethod
    def forward(ctx, z):
        return (z > 0).to(z.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad


def _learned_setup(seed=0, estimator="both_networks", penalty_utterances=None):
    torch.manual_seed(seed)
    D = 8
    ctrl = LearnedController(input_size=D, hidden_size=12, penalty_weight=0.01, estimator=estimator,
                             penalty_utterances=penalty_utterances)
    with torch.no_grad():  # about half of the frames above the threshold
        ctrl.net[2].bias.sub_(ctrl.net(torch.randn(64, D)).median())
    small, big = FrameNet([D, D]), FrameNet([D, 16, D])
    x = torch.randn(3, 7, D)
    lengths = torch.tensor([7, 5, 2])
    return ctrl, small, big, x, lengths


def _mlp(ctrl, x):
    w1, b1, w2, b2 = ctrl.net[0].weight, ctrl.net[0].bias, ctrl.net[2].weight, ctrl.net[2].bias
    return (torch.nn.functional.leaky_relu(x @ w1.T + b1, 0.125) @ w2.T + b2).squeeze(-1)


class RowCounter:
    def __init__(self, module):
        self.rows = 0
        module.register_forward_hook(lambda m, inp, out: setattr(self, "rows", self.rows + inp[0].shape[0]))


def test_learned_controller_macs_and_probability():
    ctrl, _, _, x, lengths = _learned_setup()
    assert ctrl.macs_per_frame() == 8 * 12 + 12 + 12 + 1
    assert not ctrl.uses_surprisal
    torch.testing.assert_close(ctrl.logit(x), _mlp(ctrl, x))
    torch.testing.assert_close(ctrl.probability(x, None), torch.sigmoid(_mlp(ctrl, x)))


@pytest.mark.parametrize("stochastic", [True, False])
def test_learned_controller_decision_is_the_threshold(stochastic):
    """s_t = [MLP(h_t) > 0] whatever the stochastic flag; a bias shift moves the threshold."""
    ctrl, _, _, x, lengths = _learned_setup()
    mask = lengths_to_mask(lengths, x.shape[1])
    z = _mlp(ctrl, x).detach()
    d = ctrl(x, None, mask, stochastic=stochastic)
    assert torch.equal(d.use_big, (z > 0) & mask)
    assert 0 < int(d.use_big.sum()) < int(mask.sum())
    torch.testing.assert_close(d.gate.detach(), d.use_big.float(), rtol=0, atol=1e-6)
    torch.testing.assert_close(d.p_big, torch.sigmoid(z) * mask)
    shifted = ctrl(x, None, mask, stochastic=stochastic, bias_shift=1.5)
    assert torch.equal(shifted.use_big, (z + 1.5 > 0) & mask)


@pytest.mark.parametrize("utterances", [None, 32])
def test_learned_controller_aux_loss(utterances):
    """None: lambda * sum over every real frame of the batch of (s_t - 0.5)^2 (the authors' form),
    d/dz_t = 2 lambda (s_t - 0.5); U: that times U / (utterances in the batch)."""
    ctrl, _, _, x, lengths = _learned_setup(penalty_utterances=utterances)
    mask = lengths_to_mask(lengths, x.shape[1])
    d = ctrl(x, None, mask)
    s = d.use_big.float()
    scale = 1.0 if utterances is None else utterances / 3
    expected = 0.01 * scale * ((s - 0.5) ** 2 * mask).sum()
    torch.testing.assert_close(d.aux_loss, expected)
    assert float(d.aux_loss.detach()) == pytest.approx(0.01 * scale * 0.25 * int(lengths.sum()))
    z = ctrl.logit(x).detach().requires_grad_(True)
    ctrl.logit = lambda features, bias_shift=0.0: z + bias_shift  # the same z, as a leaf
    ctrl(x, None, mask).aux_loss.backward()
    torch.testing.assert_close(z.grad, 0.02 * scale * (s - 0.5) * mask)


def test_learned_controller_penalty_per_utterance_ignores_batch_composition():
    """Per utterance: a batch of k copies of the same utterances costs what one copy does, as the
    CTC averaged over utterances does; the authors' sum grows k-fold. For a batch of U utterances
    the two forms agree."""
    ctrl, _, _, x, lengths = _learned_setup(penalty_utterances=32)
    mask = lengths_to_mask(lengths, x.shape[1])
    one = ctrl(x, None, mask).aux_loss
    four = ctrl(x.repeat(4, 1, 1), None, mask.repeat(4, 1)).aux_loss
    torch.testing.assert_close(four, one)
    ctrl.penalty_utterances = None
    torch.testing.assert_close(ctrl(x.repeat(4, 1, 1), None, mask.repeat(4, 1)).aux_loss,
                               4 * ctrl(x, None, mask).aux_loss)
    authors = ctrl(x.repeat(11, 1, 1)[:32], None, mask.repeat(11, 1)[:32]).aux_loss
    ctrl.penalty_utterances = 32
    torch.testing.assert_close(ctrl(x.repeat(11, 1, 1)[:32], None, mask.repeat(11, 1)[:32]).aux_loss, authors)
    with pytest.raises(ValueError, match="learned_penalty_utterances"):
        LearnedController(input_size=8, penalty_utterances=0)


def _encoder(ctrl, small, big):
    return ConditionalEncoder(small_net=small, big_net=big, controller=ctrl)


def _weighted_loss(out, lengths, weights):
    mask = lengths_to_mask(lengths, out.log_probs.shape[1]).unsqueeze(-1)
    return (out.log_probs * weights * mask).sum() + out.aux_loss


def test_learned_controller_gradient_equals_masked_formulation():
    """Training with the default estimator: the gradients of every parameter equal those of
    s * big(x) + (1 - s) * small(x), s = [MLP(x) > 0] with the threshold's backward the identity,
    plus lambda * sum_t (s_t - 0.5)^2, computed here by hand."""
    ctrl, small, big, x, lengths = _learned_setup()
    assert ctrl.estimator == "both_networks" and ctrl.both_networks_in_training
    enc = _encoder(ctrl, small, big).train()
    reference = copy.deepcopy(enc)
    mask = lengths_to_mask(lengths, x.shape[1])
    weights = torch.randn(3, 7, 8)
    out = enc(x, lengths)
    assert 0 < int(out.stats["use_big"].sum()) < int(mask.sum())
    _weighted_loss(out, lengths, weights).backward()

    c, sm, bg = reference.controller, reference.small_net, reference.big_net
    s = Threshold.apply(_mlp(c, x)).unsqueeze(-1)
    mixed = s * bg(x) + (1 - s) * sm(x)
    log_probs = torch.log_softmax(mixed, dim=-1)
    penalty = 0.01 * ((s.squeeze(-1) - 0.5) ** 2 * mask).sum()
    ((log_probs * weights * mask.unsqueeze(-1)).sum() + penalty).backward()
    torch.testing.assert_close(out.log_probs[mask], log_probs[mask].detach())
    for (name, p), p_ref in zip(enc.named_parameters(), reference.parameters()):
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("scheme", ["masked", "routed"])
def test_gate_gradient(scheme):
    """d(output)/d(gate): masked, big(x) - small(x) on every real frame; routed, +big(x) on big
    frames and -small(x) on small frames; 0 on padding."""
    torch.manual_seed(0)
    D = 8
    small, big = FrameNet([D, D]), FrameNet([D, 16, D])
    x, lengths = torch.randn(3, 7, D), torch.tensor([7, 5, 2])
    mask = lengths_to_mask(lengths, 7)
    p = torch.rand(3, 7, requires_grad=True)
    use_big = (p.detach() > 0.5) & mask
    gate = use_big.float() + p - p.detach()
    weights = torch.randn(3, 7, D)
    mix = masked_mixture if scheme == "masked" else route_frames
    (mix(x, lengths, use_big, small, big, gate=gate) * weights).sum().backward()
    with torch.no_grad():
        big_term, small_term = (weights * big(x)).sum(-1), (weights * small(x)).sum(-1)
        expected = (big_term - small_term if scheme == "masked" else torch.where(use_big, big_term, -small_term)) * mask
    torch.testing.assert_close(p.grad, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("estimator", ["both_networks", "routed"])
def test_learned_controller_networks_that_run_and_are_charged(estimator):
    """both_networks: both run on every real frame in training (and are charged for it); routed:
    only the chosen one. Evaluation always routes."""
    ctrl, small, big, x, lengths = _learned_setup(estimator=estimator)
    enc = _encoder(ctrl, small, big)
    small_rows, big_rows = RowCounter(small), RowCounter(big)
    n_real = int(lengths.sum())
    out = enc.train()(x, lengths)
    n_big = int(out.stats["use_big"].sum())
    both = estimator == "both_networks"
    assert (big_rows.rows, small_rows.rows) == ((n_real, n_real) if both else (n_big, n_real - n_big))
    assert float(out.frame_macs["big_net"].sum()) == big_rows.rows * enc.component_macs()["big_net"]
    assert float(out.frame_macs["small_net"].sum()) == small_rows.rows * enc.component_macs()["small_net"]
    small_rows.rows = big_rows.rows = 0
    out = enc.eval()(x, lengths)
    n_big = int(out.stats["use_big"].sum())
    assert (big_rows.rows, small_rows.rows) == (n_big, n_real - n_big)
    assert float(out.frame_macs["big_net"].sum()) == n_big * enc.component_macs()["big_net"]


def test_learned_controller_routed_estimator_gradient():
    """routed: a big frame is big(x) * gate, a small frame small(x) * (1 - gate), the threshold's
    backward the identity; the network that did not run gets no term."""
    ctrl, small, big, x, lengths = _learned_setup(estimator="routed")
    mask = lengths_to_mask(lengths, x.shape[1])
    d = ctrl(x, None, mask)
    out = route_frames(x, lengths, d.use_big, small, big, gate=d.gate)
    out.pow(2).sum().backward()
    grads = [p.grad.clone() for p in ctrl.parameters()]
    assert all(g.abs().sum() > 0 for g in grads)

    ctrl.zero_grad()
    s = Threshold.apply(_mlp(ctrl, x))
    hard = (s.detach() > 0.5) & mask
    gate = s.unsqueeze(-1)
    ref = torch.where(hard.unsqueeze(-1), gate * big(x), (1 - gate) * small(x)) * mask.unsqueeze(-1)
    torch.testing.assert_close(out.detach(), ref.detach(), rtol=1e-5, atol=1e-6)
    ref.pow(2).sum().backward()
    for g, p_ in zip(grads, ctrl.parameters()):
        torch.testing.assert_close(g, p_.grad, rtol=1e-4, atol=1e-6)



def test_learned_controller_is_trainable_and_registered():
    ctrl = build_controller("learned", input_size=8, hidden_size=80, penalty_weight=0.5, weight=3.0)
    assert isinstance(ctrl, LearnedController) and ctrl.penalty_weight == 0.5
    assert ctrl.estimator == "both_networks"
    assert ctrl.net[0].in_features == 8 and ctrl.net[0].out_features == 80
    assert all(p.requires_grad for p in ctrl.parameters())
    assert LearnedController().macs_per_frame() == 512 * 80 + 80 + 80 + 1
    routed = build_controller("learned", input_size=8, estimator="routed")
    assert routed.estimator == "routed" and not routed.both_networks_in_training
    assert not SurprisalController().both_networks_in_training
    with pytest.raises(ValueError, match="learned_estimator"):
        build_controller("learned", input_size=8, estimator="masked")


def test_flops_budget_names_the_controller_it_cannot_shift():
    """A FLOPs budget needs the surprisal controller; any other gets an error naming the one it has."""
    from surprisal_cc.architectures import build_encoder

    surprisal_encoder = build_encoder("conditional", input_size=8, num_outputs=5, controller="surprisal", hidden_size=8)
    assert 0.0 < budget_big_fraction(surprisal_encoder, apc_macs=100, fraction=0.9) < 1.0
    for name in ("random", "big_only", "small_only", "learned"):
        encoder = build_encoder("conditional", input_size=8, num_outputs=5, controller=name, hidden_size=8)
        with pytest.raises(ValueError, match=f"this model's is '{name}'"):
            budget_big_fraction(encoder, apc_macs=100, fraction=0.9)
    act = build_encoder("act", input_size=8, num_outputs=5, hidden_size=8)
    with pytest.raises(ValueError, match="this model's is none"):
        budget_big_fraction(act, apc_macs=100, fraction=0.9)
    class Thresholded(SurprisalController):  # another rule on the surprisal: neither calibrated nor shifted
        name = "thresholded"
        calibrates_on_surprisal = False

    other = build_encoder("conditional", input_size=8, num_outputs=5, controller="surprisal", hidden_size=8)
    other.controller = Thresholded()
    with pytest.raises(ValueError, match="this model's is 'thresholded'"):
        budget_big_fraction(other, apc_macs=100, fraction=0.9)
    surprisal_encoder.controller_at_test = False  # tested with random routing: no surprisal logit to shift
    with pytest.raises(ValueError, match="controller_at_test False"):
        budget_big_fraction(surprisal_encoder, apc_macs=100, fraction=0.9)


def test_calibration_subsample_is_uniform_over_the_whole_pass():
    """Beyond max_frames the kept frames are a uniform sample of the pass: early minibatches are
    kept as often as late ones (memory stays bounded by compacting every 2 x max_frames)."""
    from surprisal_cc.controllers import _UniformSample

    sample = _UniformSample(1000, torch.Generator().manual_seed(0))
    for i in range(10):  # 10,000 frames in 10 minibatches: the first five are 0, the last five 1
        sample.add(torch.full((1000,), float(i >= 5), dtype=torch.float64))
    kept = sample.values()
    assert kept.numel() == 1000
    assert abs(float((kept == 0).double().mean()) - 0.5) < 0.05  # binomial sd 0.016
    small = _UniformSample(1000, torch.Generator().manual_seed(0))
    small.add(torch.arange(3.0))
    assert small.values().tolist() == [0.0, 1.0, 2.0]  # all of a short pass, in order
