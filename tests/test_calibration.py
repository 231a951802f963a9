"""Tests for surprisal_cc.model.calibration: the surprisal controller fitted to p_big statistics (Eq. 4), to a
FLOPs budget, and the test-time bias shift that meets one."""
from __future__ import annotations

import math

import pytest
import torch

from surprisal_cc.model.calibration import (
    AUTHORS_ERROR_SCALE,
    bias_shift_for_big_fraction,
    budget_big_fraction,
    calibrate_surprisal_controller,
    calibration_loss,
    check_calibration_target,
    solve_bias_shift,
    target_mean_for_budget,
)
from surprisal_cc.model.controllers import SurprisalController

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
    with pytest.raises(ValueError, match=r"controller_target_mean must be a number in \(0, 1\), got 1.5"):
        calibrate_surprisal_controller(ctrl, [torch.ones(3)], 1.5, 0.04)
    with pytest.raises(ValueError, match="no frames"):
        calibrate_surprisal_controller(ctrl, [torch.zeros(0)], 0.5, 0.04)


def test_check_calibration_target():
    """The mean in (0, 1); the variance, where given, below mean x (1 - mean): one line each."""
    check_calibration_target(0.5, 0.0)
    check_calibration_target(0.05)  # the variance unchecked
    for mean in (0, 1, float("nan"), "abc", True):
        with pytest.raises(ValueError, match=r"controller_target_mean must be a number in \(0, 1\)"):
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
    with caplog.at_level("WARNING", logger="surprisal_cc.model.controllers"):
        out = calibrate_surprisal_controller(SurprisalController(), batches, target_mean=0.9, target_var=0.1)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "controller_target_var 0.1 cannot be met with target mean 0.9" in warned[0]
    assert abs(out["mean_p_big"] - 0.9) < 0.01 and out["var_p_big"] > 0.08  # near the largest, 0.9 x 0.1
    caplog.clear()
    with caplog.at_level("WARNING", logger="surprisal_cc.model.controllers"):
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


@pytest.mark.parametrize("stochastic", [True, False])
def test_budget_bias_shift_meets_the_fraction_on_the_frames_it_is_solved_on(stochastic):
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


def test_flops_budget_names_the_controller_it_cannot_shift():
    """A FLOPs budget needs the surprisal controller; any other gets an error naming the one it has."""
    from surprisal_cc.model.architectures import build_encoder

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
    from surprisal_cc.model.calibration import _UniformSample

    sample = _UniformSample(1000, torch.Generator().manual_seed(0))
    for i in range(10):  # 10,000 frames in 10 minibatches: the first five are 0, the last five 1
        sample.add(torch.full((1000,), float(i >= 5), dtype=torch.float64))
    kept = sample.values()
    assert kept.numel() == 1000
    assert abs(float((kept == 0).double().mean()) - 0.5) < 0.05  # binomial sd 0.016
    small = _UniformSample(1000, torch.Generator().manual_seed(0))
    small.add(torch.arange(3.0))
    assert small.values().tolist() == [0.0, 1.0, 2.0]  # all of a short pass, in order
