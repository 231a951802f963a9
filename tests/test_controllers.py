"""Tests for surprisal_cc.model.controllers: decisions, the controllers, the registry, the learned controller."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from surprisal_cc.model.controllers import (
    CONTROLLERS,
    ConstantController,
    LearnedController,
    SurprisalController,
    build_controller,
    sample_decisions,
)
from surprisal_cc.model.encoders import ConditionalEncoder, masked_mixture, route_frames
from surprisal_cc.model.nnet import FrameNet
from surprisal_cc.model.nnet import lengths_to_mask


# ----------------------------------------------------------------------------------------------
# FLOP budget
# ----------------------------------------------------------------------------------------------


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

    import surprisal_cc.model.controllers as module

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
    z = ctrl.logit(x).detach()  # the controller's own arithmetic: a threshold test on ties never flips
    torch.testing.assert_close(z, _mlp(ctrl, x).detach())  # which is the MLP, up to summation order
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


