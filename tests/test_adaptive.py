"""Tests for the ACT and PonderNet adaptive-depth encoders (surprisal_cc/model/adaptive.py)."""
from __future__ import annotations

import doctest
import math
from typing import List, Optional

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import surprisal_cc.model.adaptive as adaptive
from surprisal_cc.model.adaptive import (
    ACTEncoder,
    PonderNetEncoder,
    StepBlock,
    act_weights,
    halting_distribution,
    kl_to_prior,
    truncated_geometric,
)
from surprisal_cc.model.architectures import build_encoder
from surprisal_cc.model.flops import module_macs

SMALL = dict(input_size=6, num_outputs=5, hidden_size=4, step_hidden=16, dropout=0.0)  # D = 8


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class ScriptedHalting(nn.Module):
    """Halting unit replacement: frame id in column 0 of the state -> table[id, step]."""

    def __init__(self, table: List[List[float]]):
        super().__init__()
        self.table = torch.tensor(table)
        self.calls = 0

    def forward(self, s: Tensor) -> Tensor:
        h = self.table[s[:, 0].round().long(), self.calls]
        self.calls += 1
        return h


class CountingDelta(nn.Module):
    """Step-net replacement: returns (0, 1, 1, ...) for every row and records the rows it was fed."""

    def __init__(self):
        super().__init__()
        self.rows: List[int] = []

    def forward(self, s: Tensor) -> Tensor:
        self.rows.append(s.shape[0])
        delta = torch.ones_like(s)
        delta[:, 0] = 0.0
        return delta


def scripted(enc, table: List[List[float]]) -> CountingDelta:
    counter = CountingDelta()
    enc.step.net = counter
    enc.step.norm = nn.Identity()  # hand-computable states: s_n = s_0 + n on the columns >= 1
    enc.halting = ScriptedHalting(table)
    return counter


def initial_states(num_frames: int, width: int = 8) -> Tensor:
    s = torch.ones(num_frames, width)
    s[:, 0] = torch.arange(num_frames, dtype=torch.float32)
    return s


def diverse_halting(enc, bias: Optional[float] = 0.0) -> None:
    """Halting probabilities that differ from frame to frame: a large random halting weight on the
    un-normalised step states (in these tiny random models the LayerNorm output points the same way
    for every frame; the normalisation has its own test)."""
    nn.init.normal_(enc.halting.linear.weight, std=2.0)
    if bias is not None:
        nn.init.constant_(enc.halting.linear.bias, bias)
    enc.step.norm = nn.Identity()


def batch(b: int = 3, t: int = 7):
    return torch.randn(b, t, SMALL["input_size"]), torch.tensor([7, 4, 1])[:b]


def count_rows(module: nn.Module) -> List[int]:
    rows: List[int] = []
    module.register_forward_hook(lambda m, inp, out: rows.append(inp[0].shape[0]))
    return rows


def ctc(out) -> Tensor:
    targets = torch.tensor([[1, 2], [3, 3], [4, 0]])[: out.log_probs.shape[0]]
    target_lengths = torch.tensor([2, 2, 1])[: out.log_probs.shape[0]]
    return F.ctc_loss(out.log_probs.transpose(0, 1), targets, out.lengths, target_lengths, zero_infinity=True)


# ---------------------------------------------------------------------------------------------
# ACT
# ---------------------------------------------------------------------------------------------
def test_act_weights_hand_computed():
    h = torch.tensor([[0.3, 0.5, 0.4], [0.995, 0.5, 0.5], [0.2, 0.2, 0.2], [0.6, 0.5, 0.9]])
    p, steps, remainder = act_weights(h, epsilon=0.01)
    expected = torch.tensor([[0.3, 0.5, 0.2], [1.0, 0.0, 0.0], [0.2, 0.2, 0.6], [0.6, 0.4, 0.0]])
    torch.testing.assert_close(p, expected)
    torch.testing.assert_close(p.sum(1), torch.ones(4))
    assert steps.tolist() == [3.0, 1.0, 3.0, 2.0]
    torch.testing.assert_close(remainder, torch.tensor([0.2, 1.0, 0.6, 0.4]))


def test_act_ponder_hand_computed_and_precedence():
    """3 steps, s_n = s_0 + n on column 1, so output column 1 = sum_n p_n (1 + n).

    Frame 0 (h = 0.3, 0.5, 0.4): 0.3*2 + 0.5*3 + 0.2*4 = 2.9. The precedence bug
    ``acc * 1 - p + p * s`` gives 1.9 and the lerp ``acc * (1 - p) + p * s`` gives 2.24.
    """
    enc = ACTEncoder(**SMALL, max_steps=3, epsilon=0.01)
    table = [[0.3, 0.5, 0.4], [0.995, 0.5, 0.5], [0.2, 0.2, 0.2]]
    counter = scripted(enc, table)
    out, steps, weights, rho = enc.ponder(initial_states(3))

    torch.testing.assert_close(out[:, 1], torch.tensor([2.9, 2.0, 3.4]))
    torch.testing.assert_close(out[:, 0], torch.tensor([0.0, 1.0, 2.0]))  # weights sum to 1
    buggy, lerp = 0.0, 0.0
    for p_n, s_n in zip([0.3, 0.5, 0.2], [2.0, 3.0, 4.0]):
        buggy = s_n * p_n + buggy * 1 - p_n
        lerp = s_n * p_n + lerp * (1 - p_n)
    assert abs(out[0, 1].item() - buggy) > 0.5 and abs(out[0, 1].item() - lerp) > 0.5

    torch.testing.assert_close(weights, act_weights(torch.tensor(table), 0.01)[0])
    assert steps.tolist() == [3.0, 1.0, 3.0]
    torch.testing.assert_close(rho, torch.tensor([3.2, 2.0, 3.6]))  # N + R
    assert counter.rows == [3, 2, 2]  # frame 1 halted at step 1 and is never fed to step 2


def test_act_bias_init_starts_at_full_depth():
    enc = ACTEncoder(**SMALL, max_steps=4).eval()
    assert torch.sigmoid(enc.halting.linear.bias).item() == pytest.approx(0.25)
    out = enc(*batch())
    mask = out.stats["steps"] > 0
    assert (out.stats["steps"][mask] == 4).all()
    torch.testing.assert_close(out.stats["halting_p"][mask], torch.full((int(mask.sum()), 4), 0.25))


def test_act_weights_sum_to_one_and_padding():
    enc = ACTEncoder(**SMALL, max_steps=4)
    diverse_halting(enc)
    feats, lengths = batch()
    out = enc(feats, lengths)
    mask = torch.arange(7)[None] < lengths[:, None]
    torch.testing.assert_close(out.stats["halting_p"].sum(-1), mask.float())
    steps = out.stats["steps"]
    assert (steps[~mask] == 0).all() and (steps[mask] >= 1).all() and (steps[mask] <= 4).all()
    assert len(steps[mask].unique()) > 1  # frames halt independently
    # aux = tau * mean over batch of sum over frames of (N + R); R = last nonzero weight
    last = out.stats["halting_p"].gather(-1, (steps.long() - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1)
    rho = (steps + last) * mask
    assert out.aux_loss.item() == pytest.approx(enc.ponder_cost * rho.sum(1).mean().item(), rel=1e-5)


def test_act_early_exit_all_halt_at_step_one():
    enc = ACTEncoder(**SMALL, max_steps=4, halting_bias_init=10.0).eval()
    rows = count_rows(enc.step.net)
    feats, lengths = batch()
    out = enc(feats, lengths)
    assert rows == [int(lengths.sum())]
    mask = torch.arange(7)[None] < lengths[:, None]
    block = enc.component_macs()["step_block"]
    torch.testing.assert_close(out.frame_macs["step_block"], mask.double() * block)


@pytest.mark.parametrize("training", [True, False])
def test_act_flops_equal_steps_times_block(training: bool):
    enc = ACTEncoder(**SMALL, max_steps=4).train(training)
    diverse_halting(enc)
    rows = count_rows(enc.step.net)
    feats, lengths = batch()
    out = enc(feats, lengths)
    macs = enc.component_macs()
    width, hidden = 8, 16
    assert macs["step_block"] == (width * hidden + hidden) + (hidden * width + width) + (width + 1)
    assert macs["pre_net"] == module_macs(enc.pre_net) and macs["post_net"] == module_macs(enc.post_net)
    mask = torch.arange(7)[None] < lengths[:, None]
    torch.testing.assert_close(out.frame_macs["step_block"], out.stats["steps"].double() * macs["step_block"])
    assert out.frame_macs["step_block"].sum().item() == sum(rows) * macs["step_block"]  # as executed
    assert sum(rows) < 4 * int(lengths.sum())  # halted frames were skipped (training too)
    for name in ("pre_net", "post_net"):
        torch.testing.assert_close(out.frame_macs[name], mask.double() * macs[name])
    assert all((m[~mask] == 0).all() for m in out.frame_macs.values())


def test_act_shapes_and_gradients():
    enc = ACTEncoder(**SMALL, max_steps=3).train()
    feats, lengths = batch()
    out = enc(feats, lengths)
    assert out.log_probs.shape == (3, 7, 5) and torch.equal(out.lengths, lengths)
    torch.testing.assert_close(out.log_probs.exp().sum(-1), torch.ones(3, 7))
    (ctc(out) + out.aux_loss).backward()
    for p in (enc.halting.linear.weight, enc.halting.linear.bias, enc.step.net.net[0].weight,
              enc.pre_net.forward_gru.weight_ih_l0):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------------------
# PonderNet
# ---------------------------------------------------------------------------------------------
def test_halting_distribution_sums_to_one_last_lambda_forced():
    lam = torch.tensor([[0.5, 0.5, 0.3], [0.1, 0.2, 0.0], [1.0, 0.7, 0.2]])
    p = halting_distribution(lam)
    torch.testing.assert_close(p[0], torch.tensor([0.5, 0.25, 0.25]))
    torch.testing.assert_close(p[1], torch.tensor([0.1, 0.18, 0.72]))
    torch.testing.assert_close(p[2], torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(p.sum(1), torch.ones(3))


def test_truncated_geometric():
    g = truncated_geometric(0.5, 3)
    torch.testing.assert_close(g, torch.tensor([4 / 7, 2 / 7, 1 / 7]))


def test_kl_closed_form_and_direction():
    pl, gl = [0.05, 0.15, 0.8], [4 / 7, 2 / 7, 1 / 7]
    p, g = torch.tensor([pl]), truncated_geometric(0.5, 3)
    kl_pg = sum(pi * math.log(pi / gi) for pi, gi in zip(pl, gl))  # 1.1598
    kl_gp = sum(gi * math.log(gi / pi) for pi, gi in zip(pl, gl))  # 1.3301
    assert abs(kl_pg - kl_gp) > 0.1
    value = kl_to_prior(p, g).item()
    assert value == pytest.approx(kl_pg, rel=1e-5)
    assert value != pytest.approx(kl_gp, rel=1e-3)


def test_kl_finite_with_zero_probabilities():
    g = truncated_geometric(0.5, 3)
    assert kl_to_prior(torch.tensor([[1.0, 0.0, 0.0]]), g).item() == pytest.approx(math.log(7 / 4), rel=1e-5)
    logits = torch.tensor([[30.0, 0.0, 0.0], [0.0, 0.0, 0.0]], requires_grad=True)  # sigmoid(30) == 1.0
    p = halting_distribution(torch.sigmoid(logits))
    assert p[0, 1].item() == 0.0
    kl = kl_to_prior(p, g)
    assert torch.isfinite(kl).all()
    kl.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_pondernet_training_expected_representation_and_kl():
    enc = PonderNetEncoder(**SMALL, max_steps=4, beta=0.01, lambda_p=0.5).train()
    nn.init.normal_(enc.halting.linear.weight, std=1.0)
    rows = count_rows(enc.step.net)
    feats, lengths = batch()
    out = enc(feats, lengths)
    mask = torch.arange(7)[None] < lengths[:, None]
    p = out.stats["halting_p"]
    torch.testing.assert_close(p.sum(-1), mask.float())
    assert (out.stats["steps"] == 4 * mask).all()
    assert rows == [int(lengths.sum())] * 4  # training runs all N steps on all real frames
    kl = kl_to_prior(p[mask], enc.prior)
    per_utt = torch.zeros(3).index_add(0, mask.nonzero()[:, 0], kl)
    assert out.aux_loss.item() == pytest.approx(0.01 * per_utt.mean().item(), rel=1e-5)
    torch.testing.assert_close(out.frame_macs["step_block"],
                               mask.double() * 4 * enc.component_macs()["step_block"])
    (ctc(out) + out.aux_loss).backward()
    g = enc.halting.linear.weight.grad
    assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0


def test_pondernet_bias_init_matches_prior():
    enc = PonderNetEncoder(**SMALL, max_steps=4, lambda_p=0.2)
    assert torch.sigmoid(enc.halting.linear.bias).item() == pytest.approx(0.2)


def test_pondernet_threshold_early_exit():
    enc = PonderNetEncoder(**SMALL, max_steps=4, inference="threshold").eval()
    # cumulative p: frame 0 0.6 -> halt 1; frame 1 0.3, 0.51 -> halt 2; frame 2 0.1, 0.19, 0.271 -> 4
    counter = scripted(enc, [[0.6, 0.9, 0.9, 0.9], [0.3, 0.3, 0.3, 0.3], [0.1, 0.1, 0.1, 0.1]])
    out, steps, weights, aux = enc.ponder(initial_states(3))
    assert counter.rows == [3, 2, 1, 1]
    assert steps.tolist() == [1.0, 2.0, 4.0]
    torch.testing.assert_close(out[:, 1], torch.tensor([2.0, 3.0, 5.0]))  # state at the halting step
    torch.testing.assert_close(weights, torch.eye(4)[[0, 1, 3]])
    assert (aux == 0).all()


def test_pondernet_truncated_hand_computed():
    enc = PonderNetEncoder(**SMALL, max_steps=4, inference="truncated", tail_mass=0.05).eval()
    # unassigned mass: frame 0 0.4, 0.04 -> stops at 2; frame 1 0.7, 0.49, 0.343 -> runs all 4; frame 2 0.01 -> 1
    counter = scripted(enc, [[0.6, 0.9, 0.9, 0.9], [0.3, 0.3, 0.3, 0.3], [0.99, 0.5, 0.5, 0.5]])
    out, steps, weights, aux = enc.ponder(initial_states(3))
    assert counter.rows == [3, 2, 1, 1]
    assert steps.tolist() == [2.0, 4.0, 1.0]
    expected = torch.tensor([[0.6, 0.4, 0, 0], [0.3, 0.21, 0.147, 0.343], [1.0, 0, 0, 0]])
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out[:, 1], (expected * torch.tensor([2.0, 3.0, 4.0, 5.0])).sum(1))  # sum_n w_n s_n
    torch.testing.assert_close(aux, kl_to_prior(expected, enc.prior))


def test_pondernet_truncated_matches_training_state():
    """tail_mass 0 gives the training output; a positive one moves it by at most tail_mass x the
    largest distance between step states, and runs fewer steps."""
    enc = PonderNetEncoder(**SMALL, max_steps=6, lambda_p=0.4, inference="truncated").eval()
    diverse_halting(enc, bias=None)
    s0 = torch.randn(50, 8)
    with torch.no_grad():
        full, _, p_full, kl_full = enc._ponder_expected(s0)
        states, s = [], s0
        for _ in range(6):
            s, _ = enc._advance(s)
            states.append(s)
        states = torch.stack(states, 1)
        enc.tail_mass = 0.0
        out, steps, p, kl = enc.ponder(s0)
        assert (steps == 6).all()
        torch.testing.assert_close(out, full)
        torch.testing.assert_close(p, p_full)
        torch.testing.assert_close(kl, kl_full)
        enc.tail_mass = 0.2
        out, steps, p, _ = enc.ponder(s0)
    assert steps.min() < steps.max() < 7 and steps.float().mean() < 6
    spread = (states[:, :, None] - states[:, None]).norm(dim=-1).amax(dim=(1, 2))
    assert ((out - full).norm(dim=-1) <= 0.2 * spread + 1e-5).all()
    torch.testing.assert_close(p.sum(1), torch.ones(50))


def test_pondernet_sample_early_exit():
    enc = PonderNetEncoder(**SMALL, max_steps=4, inference="sample").eval()
    counter = scripted(enc, [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    out, steps, _, _ = enc.ponder(initial_states(3))
    assert counter.rows == [3, 2, 1, 1]
    assert steps.tolist() == [1.0, 2.0, 4.0]


def test_pondernet_sample_frequency():
    enc = PonderNetEncoder(**SMALL, max_steps=2, inference="sample").eval()
    scripted(enc, [[0.3, 0.3]])
    _, steps, _, _ = enc.ponder(torch.zeros(4000, 8))
    assert (steps == 1).float().mean().item() == pytest.approx(0.3, abs=0.03)


@pytest.mark.parametrize("inference", ["truncated", "sample", "threshold", "expected"])
def test_pondernet_eval_encoder_flops(inference: str):
    enc = PonderNetEncoder(**SMALL, max_steps=4, inference=inference, tail_mass=0.3).eval()
    diverse_halting(enc, bias=None)
    rows = count_rows(enc.step.net)
    feats, lengths = batch()
    out = enc(feats, lengths)
    mask = torch.arange(7)[None] < lengths[:, None]
    assert out.log_probs.shape == (3, 7, 5)
    block = enc.component_macs()["step_block"]
    torch.testing.assert_close(out.frame_macs["step_block"], out.stats["steps"].double() * block)
    assert out.frame_macs["step_block"].sum().item() == sum(rows) * block
    assert (out.stats["steps"][~mask] == 0).all() and (out.stats["steps"][mask] >= 1).all()
    torch.testing.assert_close(out.stats["halting_p"].sum(-1), mask.float())
    if inference == "expected":
        assert out.aux_loss.item() > 0 and sum(rows) == 4 * int(lengths.sum())
    elif inference == "truncated":  # the KL of the weights used
        assert out.aux_loss.item() > 0 and sum(rows) < 4 * int(lengths.sum())
    else:
        assert out.aux_loss.item() == 0 and sum(rows) < 4 * int(lengths.sum())


# ---------------------------------------------------------------------------------------------
# Misc
# ---------------------------------------------------------------------------------------------
def test_non_residual_step_block():
    block = StepBlock(8, 16, residual=False)
    s = torch.randn(5, 8)
    torch.testing.assert_close(block(s), block.norm(block.net(s)))
    block = StepBlock(8, 16, residual=True)
    torch.testing.assert_close(block(s), block.norm(s + block.net(s)))


def test_argument_validation():
    # each message names the hparams setting to change
    with pytest.raises(ValueError, match=r"ACT epsilon must be in \(0, 1\), got 0.0: set it as epsilon under "
                                         r"encoder_module: adaptive_options: act:"):
        ACTEncoder(**SMALL, epsilon=0.0)
    with pytest.raises(ValueError, match=r"lambda_p \(hparams key 'pondernet_lambda_p'\) must be in \(0, 1\), got 1.0"):
        PonderNetEncoder(**SMALL, lambda_p=1.0)
    with pytest.raises(ValueError, match=r"\(hparams key 'pondernet_inference'\) must be one of .*got 'median'"):
        PonderNetEncoder(**SMALL, inference="median")
    with pytest.raises(ValueError, match=r"max_steps \(hparams key 'act_max_steps'\) must be >= 1, got 0"):
        ACTEncoder(**SMALL, max_steps=0)
    with pytest.raises(ValueError, match=r"max_steps \(hparams key 'pondernet_max_steps'\) must be >= 1, got 0"):
        PonderNetEncoder(**SMALL, max_steps=0)
    with pytest.raises(ValueError, match=r"tail_mass \(hparams key 'pondernet_tail_mass'\) must be in \[0, 1\), got 1.0"):
        PonderNetEncoder(**SMALL, tail_mass=1.0)
    enc = PonderNetEncoder(**SMALL)  # an inference rule set after construction is checked the same way
    with pytest.raises(ValueError, match="pondernet_inference.*must be one of"):
        enc.inference = "median"
    with pytest.raises(ValueError, match="tail_mass .*must be in"):
        enc.tail_mass = -0.1
    enc.inference, enc.tail_mass = "expected", 0.0
    assert (enc.inference, enc.tail_mass) == ("expected", 0.0)
    assert set(enc.state_dict()) == set(PonderNetEncoder(**SMALL).state_dict())


def test_model_files_and_interface():
    for name, cls in (("act", ACTEncoder), ("pondernet", PonderNetEncoder)):
        assert type(build_encoder(name, input_size=20, num_outputs=5, hidden_size=8)) is cls
        enc = cls(**SMALL)
        assert not enc.needs_surprisal(True) and not enc.needs_surprisal(False)
        assert set(enc.component_macs()) == {"pre_net", "step_block", "post_net"}


def test_docstring_examples():
    assert doctest.testmod(adaptive).failed == 0


def test_step_block_keeps_the_state_scale():
    """Post-LayerNorm steps: the state norm stays at sqrt(width) however many steps run, where the
    plain residual sum grows with every step."""
    block = StepBlock(width=64, hidden=256)
    s = torch.randn(10, 64) * 5
    plain = s.clone()
    for _ in range(4):
        s = block(s)
        plain = plain + block.net(plain)
    torch.testing.assert_close(s.norm(dim=-1), torch.full((10,), 8.0), atol=1e-3, rtol=1e-3)
    assert plain.norm(dim=-1).mean() > 2 * s.norm(dim=-1).mean()
    assert module_macs(block) == (64 * 256 + 256) + (256 * 64 + 64) + 2 * 64  # LayerNorm: scale + shift


def test_evaluate_valid_settings_do_not_leak_into_the_next_row(monkeypatch):
    """recipes/MiniLibriSpeech/evaluate_valid.py: each --setting row starts from the trained run's
    inference rule; a value the encoder refuses is one error line."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "recipes" / "MiniLibriSpeech"))
    import evaluate_valid

    enc = PonderNetEncoder(**SMALL, inference="truncated", tail_mass=0.05)
    settings = [evaluate_valid.parse_setting("inference=threshold,tail_mass=0.2"),
                evaluate_valid.parse_setting("inference=truncated")]
    trained = evaluate_valid.trained_values(enc, settings)
    evaluate_valid.apply_setting(enc, trained, settings[0])
    assert (enc.inference, enc.tail_mass) == ("threshold", 0.2)
    evaluate_valid.apply_setting(enc, trained, settings[1])
    assert (enc.inference, enc.tail_mass) == ("truncated", 0.05)  # not the previous row's 0.2
    with pytest.raises(SystemExit, match="inference .*must be one of"):
        evaluate_valid.apply_setting(enc, trained, {"inference": "bogus"})
    for bad in ("abc", None):
        with pytest.raises(SystemExit, match="tail_mass .*must be a number"):
            evaluate_valid.apply_setting(enc, trained, {"tail_mass": bad})
    with pytest.raises(SystemExit, match="has no attribute 'tailmass'"):
        evaluate_valid.trained_values(enc, [{"tailmass": 0.1}])


@pytest.mark.parametrize("encoder_class", [ACTEncoder, PonderNetEncoder])
@pytest.mark.parametrize("training", [True, False])
def test_a_batch_without_utterances_has_a_zero_auxiliary_loss(encoder_class, training):
    """As the conditional encoder's: no utterance, nothing to average (not NaN)."""
    torch.manual_seed(0)
    out = encoder_class(**SMALL).train(training)(torch.zeros(0, 4, 6), torch.zeros(0, dtype=torch.long))
    assert out.log_probs.shape == (0, 4, 5) and float(out.aux_loss.detach()) == 0.0
