"""Tests for surprisal_cc.model.encoders: routing, gather windows, BiGRU, MAC accounting, the contract of every encoder
(the model files and build_encoder: tests/test_architectures.py)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from surprisal_cc.model.architectures import build_encoder, encoder_names
from surprisal_cc.model.controllers import ConstantController, Controller, LearnedController, SurprisalController
from surprisal_cc.model.forward import CachedInputs, run_model
from surprisal_cc.model.encoders import (
    ConditionalEncoder,
    gather_frames,
    masked_mixture,
    route_frames,
)
from surprisal_cc.model.flops import module_macs
from surprisal_cc.model.nnet import BiGRU, Conv1dPreNet, FrameNet, PostNet, lengths_to_mask, reverse_padded

from numerics import ROUTING_FLIPS

D, H, V = 8, 4, 5  # input size, GRU hidden size (BiGRU output 2H = D), CTC outputs
LENGTHS = torch.tensor([10, 6, 3])
T = 10


def noisy_padding(x: torch.Tensor, lengths: torch.Tensor, value: float = 5.0) -> torch.Tensor:
    """x with large constant values on the padding, to catch leaks."""
    mask = lengths_to_mask(lengths, x.shape[1]).unsqueeze(-1)
    return torch.where(mask, x, torch.full_like(x, value))


class RowCounter:
    """Forward hook that records the number of rows each call processed."""

    def __init__(self, module: nn.Module):
        self.rows = []
        module.register_forward_hook(lambda m, inp, out: self.rows.append(inp[0].shape[0]))

    @property
    def total(self) -> int:
        return sum(self.rows)


def small_encoder(execution="routed", controller=None, **kwargs) -> ConditionalEncoder:
    return ConditionalEncoder(
        small_net=FrameNet([D, D]), big_net=FrameNet([D, 16, D]),
        controller=controller if controller is not None else SurprisalController(weight=1.0, bias=-2.0),
        pre_net=BiGRU(D, H, dropout=0.0), post_net=PostNet(D, V, H, dropout=0.0), execution=execution,
        **kwargs)


# ----------------------------------------------------------------------------------------------
# routing
# ----------------------------------------------------------------------------------------------
def test_route_frames_runs_each_net_only_on_its_frames():
    torch.manual_seed(0)
    small, big = FrameNet([D, D]), FrameNet([D, 16, D])
    small_rows, big_rows = RowCounter(small), RowCounter(big)
    x = noisy_padding(torch.randn(3, T, D), LENGTHS)
    use_big = torch.rand(3, T) < 0.5
    use_big[2, 5:] = True  # use_big set on padding: must still never run
    mask = lengths_to_mask(LENGTHS, T)
    out = route_frames(x, LENGTHS, use_big, small, big)
    assert len(big_rows.rows) == 1 and len(small_rows.rows) == 1  # one batched call per network
    assert big_rows.total == int((use_big & mask).sum())
    assert small_rows.total == int((~use_big & mask).sum())
    assert big_rows.total + small_rows.total == int(LENGTHS.sum())
    with torch.no_grad():
        expected = torch.where(use_big.unsqueeze(-1), big(x), small(x)) * mask.unsqueeze(-1)
    torch.testing.assert_close(out, expected)
    assert torch.all(out[~mask] == 0)


def test_route_frames_all_one_branch():
    torch.manual_seed(0)
    small, big = FrameNet([D, D]), FrameNet([D, 16, D])
    small_rows, big_rows = RowCounter(small), RowCounter(big)
    x = torch.randn(3, T, D)
    route_frames(x, LENGTHS, torch.ones(3, T, dtype=torch.bool), small, big)
    assert big_rows.total == int(LENGTHS.sum()) and small_rows.rows == []  # the idle network is not called


@pytest.mark.parametrize("branch", ["big", "small"])
@pytest.mark.parametrize("padded", [False, True])
def test_route_frames_one_branch_fast_path(branch, padded):
    """Every real frame to one network: only it runs, once, on the real frames; without padding on
    the flat batch itself (no gather: its input shares x's memory). Outputs, padding zeros and the
    gradients are exact (``masked_mixture`` as reference); the gate gets the routed estimator's gradient."""
    torch.manual_seed(0)
    small, big = FrameNet([D, D]), FrameNet([D, 16, D])
    inputs = {"big": [], "small": []}
    big.register_forward_hook(lambda m, inp, out: inputs["big"].append(inp[0]))
    small.register_forward_hook(lambda m, inp, out: inputs["small"].append(inp[0]))
    lengths = LENGTHS if padded else torch.full((3,), T)
    mask = lengths_to_mask(lengths, T)
    x = noisy_padding(torch.randn(3, T, D), lengths).requires_grad_(True)
    use_big = torch.full((3, T), branch == "big")
    p = torch.rand(3, T, requires_grad=True)
    gate = use_big.float() + p - p.detach()
    weights = torch.randn(3, T, D)
    out = route_frames(x, lengths, use_big, small, big, gate=gate)
    ran, idle = (branch, "small" if branch == "big" else "big")
    assert len(inputs[ran]) == 1 and inputs[idle] == []
    assert inputs[ran][0].shape[0] == int(lengths.sum())
    assert (inputs[ran][0].data_ptr() == x.data_ptr()) == (not padded)
    (out * weights).sum().backward()
    grad_x, grad_p = x.grad.clone(), p.grad.clone()
    x.grad = p.grad = None
    reference = masked_mixture(x, lengths, use_big, small, big, gate=gate)
    torch.testing.assert_close(out, reference)
    assert torch.all(out[~mask] == 0)
    (reference * weights).sum().backward()
    torch.testing.assert_close(grad_x, x.grad)
    with torch.no_grad():  # the routed estimator: +big(x) on big frames, -small(x) on small ones, 0 on padding
        expected = torch.where(use_big, (weights * big(x)).sum(-1), -(weights * small(x)).sum(-1)) * mask
    torch.testing.assert_close(grad_p, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("use_big", ["mixed", "all_big", "all_small"])
@pytest.mark.parametrize("padded", [False, True])
def test_route_frames_bf16_autocast_output_dtype(use_big, padded, grad):
    """Under bf16 autocast the output has the networks' dtype (bf16), on every path (inference under
    no_grad scatters twice in place, autograd once), zeros on padding."""
    torch.manual_seed(0)
    small, big = FrameNet([D, D]), FrameNet([D, 16, D])
    lengths = LENGTHS if padded else torch.full((3,), T)
    decision = {"mixed": torch.rand(3, T) < 0.5, "all_big": torch.ones(3, T, dtype=torch.bool),
                "all_small": torch.zeros(3, T, dtype=torch.bool)}[use_big]
    x = torch.randn(3, T, D)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(grad):
        out = route_frames(x, lengths, decision, small, big)
        reference = masked_mixture(x, lengths, decision, small, big)
    assert out.dtype == reference.dtype == torch.bfloat16
    assert out.shape == (3, T, D)
    torch.testing.assert_close(out, reference)
    assert torch.all(out[~lengths_to_mask(lengths, T)] == 0)


@pytest.mark.parametrize("contexts", [(1, 1), (3, 3), (1, 3)])
def test_route_frames_gradients_equal_masked(contexts):
    """Both branches used, autograd recording (one gather, one scatter): outputs and the gradients of
    the input and of both networks' weights equal the masked reference's (its unused branch counts 0)."""
    torch.manual_seed(0)
    small_context, big_context = contexts
    small, big = FrameNet([D, D], context=small_context), FrameNet([D, 16, D], context=big_context)
    x = noisy_padding(torch.randn(3, T, D), LENGTHS).requires_grad_(True)
    use_big = torch.rand(3, T) < 0.5
    weights = torch.randn(3, T, D)
    grads = []
    for mix in (route_frames, masked_mixture):
        x.grad = None
        small.zero_grad(set_to_none=True)
        big.zero_grad(set_to_none=True)
        out = mix(x, LENGTHS, use_big, small, big)
        (out * weights).sum().backward()
        weight_grads = [p.grad.clone() for p in (*small.parameters(), *big.parameters())]
        grads.append([out.detach(), x.grad.clone(), *weight_grads])
    for routed, masked in zip(*grads):
        torch.testing.assert_close(routed, masked, rtol=1e-5, atol=1e-6)


def test_route_frames_no_real_frames_and_non_contiguous_input():
    torch.manual_seed(0)
    small, big = FrameNet([D, D]), FrameNet([D, 16, D])
    out = route_frames(torch.randn(2, 4, D), torch.tensor([0, 0]), torch.ones(2, 4, dtype=torch.bool), small, big)
    assert out.shape == (2, 4, D) and torch.all(out == 0)
    x = torch.randn(T, 3, D).transpose(0, 1)  # (3, T, D), not contiguous
    use_big = torch.rand(3, T) < 0.5
    mask = lengths_to_mask(LENGTHS, T)
    with torch.no_grad():
        expected = torch.where(use_big.unsqueeze(-1), big(x), small(x)) * mask.unsqueeze(-1)
        torch.testing.assert_close(route_frames(x, LENGTHS, use_big, small, big), expected)


@pytest.mark.parametrize("controller", ["surprisal", "learned"])
def test_routed_equals_masked(controller):
    torch.manual_seed(0)
    ctrl = SurprisalController(1.0, -2.0) if controller == "surprisal" else LearnedController(D, 12)
    routed = small_encoder("routed", ctrl, test_stochastic=False).eval()
    masked = copy.deepcopy(routed)
    masked.execution = "masked"
    x = noisy_padding(torch.randn(3, T, D), LENGTHS)
    surprisal = torch.rand(3, T) * 4
    a = routed(x, LENGTHS, surprisal)
    b = masked(x, LENGTHS, surprisal)
    mask = lengths_to_mask(LENGTHS, T)
    assert torch.equal(a.stats["use_big"], b.stats["use_big"])
    assert 0 < int(a.stats["use_big"].sum()) < int(LENGTHS.sum())  # both branches used
    torch.testing.assert_close(a.log_probs[mask], b.log_probs[mask], rtol=1e-5, atol=1e-5)


def test_routed_equals_masked_model3_with_context():
    torch.manual_seed(0)
    routed = build_encoder("conditional", D, V, architecture="model3", dropout=0.0, model_options={"kernel_size": 5},
                           controller_options={"weight": 1.0, "bias": -2.0},
                           conditional_options={"test_stochastic": False}).eval()
    assert routed.small_net.context == 5 and routed.pre_net is None and routed.post_net is None
    masked = copy.deepcopy(routed)
    masked.execution = "masked"
    x = noisy_padding(torch.randn(3, T, D), LENGTHS)
    surprisal = torch.rand(3, T) * 4
    a, b = routed(x, LENGTHS, surprisal), masked(x, LENGTHS, surprisal)
    mask = lengths_to_mask(LENGTHS, T)
    assert 0 < int(a.stats["use_big"].sum()) < int(LENGTHS.sum())
    torch.testing.assert_close(a.log_probs[mask], b.log_probs[mask], rtol=1e-5, atol=1e-5)


def test_masked_mixture_reference():
    torch.manual_seed(0)
    small, big = FrameNet([D, D]), FrameNet([D, 16, D])
    x = torch.randn(3, T, D)
    use_big = torch.rand(3, T) < 0.5
    out = masked_mixture(x, LENGTHS, use_big, small, big)
    mask = lengths_to_mask(LENGTHS, T)
    with torch.no_grad():
        expected = torch.where(use_big.unsqueeze(-1), big(x), small(x)) * mask.unsqueeze(-1)
    torch.testing.assert_close(out, expected)


# ----------------------------------------------------------------------------------------------
# gather_frames with context == Conv1d
# ----------------------------------------------------------------------------------------------
def test_gather_frames_context_layout():
    x = torch.arange(2 * 4 * 2, dtype=torch.float32).view(2, 4, 2)  # x[b, t, d] = 8b + 2t + d
    lengths = torch.tensor([4, 2])
    w = gather_frames(x, lengths, torch.tensor([0, 1]), torch.tensor([0, 1]), context=3)
    # layout d * k + j: row = [d0 at t-1, t, t+1, d1 at t-1, t, t+1]; zeros outside the real frames
    assert w.tolist() == [[0, 0, 2, 0, 1, 3], [8, 10, 0, 9, 11, 0]]  # (1, 1): t + 1 = 2 is padding
    assert torch.equal(gather_frames(x, lengths, torch.tensor([1]), torch.tensor([1])), x[1, 1:2])


@pytest.mark.parametrize("context", [3, 11])
def test_gather_frames_matches_conv1d(context):
    torch.manual_seed(0)
    Din, out = 6, 4
    conv = nn.Conv1d(Din, out, context, padding=context // 2)
    net = FrameNet([Din, out], context=context, final_activation=False)
    with torch.no_grad():
        net.net[0].weight.copy_(conv.weight.reshape(out, Din * context))  # [o, d * k + j] = conv[o, d, j]
        net.net[0].bias.copy_(conv.bias)
    T2 = 14
    lengths = torch.tensor([14, 9, 4])
    mask = lengths_to_mask(lengths, T2)
    x = noisy_padding(torch.randn(3, T2, Din), lengths)
    with torch.no_grad():
        expected = conv((x * mask.unsqueeze(-1)).transpose(1, 2)).transpose(1, 2)
        b, t = mask.nonzero(as_tuple=True)
        got = net(gather_frames(x, lengths, b, t, context))
        torch.testing.assert_close(got, expected[b, t], rtol=1e-5, atol=1e-5)
        routed = route_frames(x, lengths, torch.rand(3, T2) < 0.5, net, copy.deepcopy(net))
        torch.testing.assert_close(routed[mask], expected[mask], rtol=1e-5, atol=1e-5)


def test_model3_frame_net_equals_conv1d_prenet():
    """Appendix A: model 3's branches are a Conv1D of length 11 evaluated at the routed frames."""
    torch.manual_seed(0)
    pre = Conv1dPreNet(D, 12, kernel_size=11, dropout=0.0, leaky_slope=0.125)
    net = FrameNet([D, 12], context=11)
    with torch.no_grad():
        net.net[0].weight.copy_(pre.conv.weight.reshape(12, D * 11))
        net.net[0].bias.copy_(pre.conv.bias)
    x = noisy_padding(torch.randn(3, T, D), LENGTHS)
    mask = lengths_to_mask(LENGTHS, T)
    with torch.no_grad():
        expected = pre(x, LENGTHS)
        b, t = mask.nonzero(as_tuple=True)
        torch.testing.assert_close(net(gather_frames(x, LENGTHS, b, t, 11)), expected[b, t], rtol=1e-5, atol=1e-5)
    assert torch.all(expected[~mask] == 0)


def test_conv1d_pre_net_kernel_size_must_be_odd():
    from surprisal_cc.model.nnet import Conv1dPreNet

    with pytest.raises(ValueError, match="kernel_size must be a positive odd number"):
        Conv1dPreNet(D, 6, kernel_size=4)


def test_frame_net_context_validation():
    with pytest.raises(ValueError):
        FrameNet([4, 4], context=4)
    with pytest.raises(ValueError):
        FrameNet([4, 4], context=0)
    assert module_macs(FrameNet([4, 6, 2], context=3)) == 12 * 6 + 6 + 6 * 2 + 2


# ----------------------------------------------------------------------------------------------
# reverse_padded, BiGRU
# ----------------------------------------------------------------------------------------------
def test_reverse_padded():
    torch.manual_seed(0)
    x = torch.randn(3, T, 2)
    r = reverse_padded(x, LENGTHS)
    for i, n in enumerate(LENGTHS.tolist()):
        assert torch.equal(r[i, :n], x[i, :n].flip(0))
        assert torch.equal(r[i, n:], x[i, n:])  # padding stays in place
    assert torch.equal(reverse_padded(r, LENGTHS), x)


def test_bigru_equals_packed_bidirectional_gru():
    torch.manual_seed(0)
    bi = BiGRU(D, H, dropout=0.0).eval()
    ref = nn.GRU(D, H, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(ref, name).copy_(getattr(bi.forward_gru, name))
            getattr(ref, name + "_reverse").copy_(getattr(bi.backward_gru, name))
    assert sum(p.numel() for p in bi.parameters()) == sum(p.numel() for p in ref.parameters())
    lengths = torch.tensor([7, 10, 1, 4])
    x = noisy_padding(torch.randn(4, T, D), lengths)
    out = bi(x, lengths)
    with torch.no_grad():
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        expected, _ = pad_packed_sequence(ref(packed)[0], batch_first=True, total_length=T)
    assert out.shape == (4, T, 2 * H)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    mask = lengths_to_mask(lengths, T)
    assert torch.all(out[~mask] == 0)


def test_bigru_dropout_and_padding_in_train_mode():
    torch.manual_seed(0)
    bi = BiGRU(D, H, dropout=0.5).train()
    x = noisy_padding(torch.randn(3, T, D), LENGTHS)
    a, b = bi(x, LENGTHS), bi(x, LENGTHS)
    assert not torch.allclose(a, b)
    assert torch.all(a[~lengths_to_mask(LENGTHS, T)] == 0)
    with pytest.raises(ValueError):
        BiGRU(D, H, num_layers=2)


# ----------------------------------------------------------------------------------------------
# ConditionalEncoder: MACs, controller options, outputs
# ----------------------------------------------------------------------------------------------
def _macs(enc):
    return {"pre_net": module_macs(enc.pre_net), "post_net": module_macs(enc.post_net),
            "small_net": module_macs(enc.small_net), "big_net": module_macs(enc.big_net)}


@pytest.mark.parametrize("stochastic", [False, True])
def test_frame_macs_routed(stochastic):
    torch.manual_seed(0)
    enc = small_encoder(test_stochastic=stochastic).eval()
    x, surprisal = torch.randn(3, T, D), torch.rand(3, T) * 4
    out = enc(x, LENGTHS, surprisal)
    mask = lengths_to_mask(LENGTHS, T)
    use_big = out.stats["use_big"]
    n_real, n_big = int(mask.sum()), int((use_big & mask).sum())
    m = _macs(enc)
    assert m["pre_net"] == 2 * 3 * (D * H + H * H + 2 * H) and m["small_net"] == D * D + D
    expected_total = (n_real * (m["pre_net"] + m["post_net"] + 2) + n_big * m["big_net"]
                      + (n_real - n_big) * m["small_net"])
    total = sum(float(v.sum()) for v in out.frame_macs.values())
    assert total == expected_total
    assert float(out.frame_macs["big_net"].sum()) == n_big * m["big_net"]
    assert float(out.frame_macs["small_net"].sum()) == (n_real - n_big) * m["small_net"]
    assert float(out.frame_macs["controller"].sum()) == 2 * n_real
    for v in out.frame_macs.values():
        assert v.shape == (3, T) and torch.all(v[~mask] == 0)
    # per frame: exactly one of the two networks
    per_frame = out.frame_macs["big_net"] + out.frame_macs["small_net"]
    assert torch.equal(per_frame[mask], torch.where(use_big, float(m["big_net"]), float(m["small_net"]))[mask])


def test_frame_macs_masked_charges_both_nets():
    torch.manual_seed(0)
    enc = small_encoder("masked", test_stochastic=False).eval()
    out = enc(torch.randn(3, T, D), LENGTHS, torch.rand(3, T) * 4)
    n_real = int(LENGTHS.sum())
    m = _macs(enc)
    assert float(out.frame_macs["big_net"].sum()) == n_real * m["big_net"]
    assert float(out.frame_macs["small_net"].sum()) == n_real * m["small_net"]


def test_component_macs():
    torch.manual_seed(0)
    enc = small_encoder()
    assert enc.component_macs() == {**_macs(enc), "controller": 2}


def test_controller_at_test_false_uses_random_controller():
    torch.manual_seed(0)
    enc = small_encoder(controller_at_test=False)
    assert enc.needs_surprisal(True) and not enc.needs_surprisal(False)
    enc.eval()
    assert isinstance(enc.active_controller(), ConstantController)
    out = enc(torch.randn(3, T, D), LENGTHS, None)  # no surprisal needed
    mask = lengths_to_mask(LENGTHS, T)
    assert torch.all(out.stats["p_big"][mask] == 0.5) and torch.all(out.stats["p_big"][~mask] == 0)
    assert float(out.frame_macs["controller"].sum()) == 0
    enc.train()
    assert enc.active_controller() is enc.controller
    with pytest.raises(ValueError, match="surprisal"):
        enc(torch.randn(3, T, D), LENGTHS, None)


def test_controller_at_train_false():
    torch.manual_seed(0)
    enc = small_encoder(controller_at_train=False)
    assert not enc.needs_surprisal(True) and enc.needs_surprisal(False)
    assert isinstance(enc.train().active_controller(), ConstantController)
    assert enc.eval().active_controller() is enc.controller


def test_run_model_follows_the_encoders_mode():
    """Whether surprisal is read is decided by the encoder's own mode, the mode its controller runs in."""
    torch.manual_seed(0)
    enc = small_encoder(controller_at_test=False)  # surprisal in training only
    fbank, lengths = torch.randn(3, T, D), LENGTHS
    for training in (True, False):
        step = run_model(enc.train(training), fbank, lengths, use_apc_features=False,
                         cached=CachedInputs(fbank, None, torch.rand(3, T)))
        assert step.output.stats["p_big"].shape == (3, T) and step.uses_apc == training


def test_learned_controller_never_needs_surprisal():
    enc = small_encoder(controller=LearnedController(D, 12))
    assert not enc.needs_surprisal(True) and not enc.needs_surprisal(False)


def test_test_bias_shift_only_in_eval():
    torch.manual_seed(0)
    enc = small_encoder(test_bias_shift=2.0)
    x, surprisal = torch.randn(3, T, D), torch.rand(3, T) * 4
    mask = lengths_to_mask(LENGTHS, T)
    p_eval = enc.eval()(x, LENGTHS, surprisal).stats["p_big"]
    p_train = enc.train()(x, LENGTHS, surprisal).stats["p_big"]
    torch.testing.assert_close(p_eval, torch.sigmoid(surprisal - 2.0 + 2.0) * mask)
    torch.testing.assert_close(p_train, torch.sigmoid(surprisal - 2.0) * mask)


def test_test_stochastic_flag():
    torch.manual_seed(0)
    enc = small_encoder(test_stochastic=False, train_stochastic=True)
    x, surprisal = torch.randn(3, T, D), torch.rand(3, T) * 4
    mask = lengths_to_mask(LENGTHS, T)
    enc.eval()
    a, b = enc(x, LENGTHS, surprisal), enc(x, LENGTHS, surprisal)
    assert torch.equal(a.stats["use_big"], (torch.sigmoid(surprisal - 2.0) > 0.5) & mask)
    torch.testing.assert_close(a.log_probs, b.log_probs, rtol=0, atol=0)
    enc.train()
    draws = [enc(x, LENGTHS, surprisal).stats["use_big"] for _ in range(5)]
    assert any(not torch.equal(d, draws[0]) for d in draws[1:])


def test_log_probs_normalised_and_shapes():
    torch.manual_seed(0)
    enc = small_encoder().eval()
    out = enc(torch.randn(3, T, D), LENGTHS, torch.rand(3, T) * 4)
    assert out.log_probs.shape == (3, T, V)
    torch.testing.assert_close(out.log_probs.logsumexp(-1), torch.zeros(3, T), rtol=0, atol=1e-5)
    assert torch.equal(out.lengths, LENGTHS)
    assert float(out.aux_loss) == 0.0
    assert torch.all(out.stats["use_big"][~lengths_to_mask(LENGTHS, T)] == 0)


def test_padding_invariance_of_encoder():
    torch.manual_seed(0)
    enc = small_encoder(test_stochastic=False).eval()
    x, surprisal = noisy_padding(torch.randn(3, T, D), LENGTHS), torch.rand(3, T) * 4
    out = enc(x, LENGTHS, surprisal)
    for i, n in enumerate(LENGTHS.tolist()):
        alone = enc(x[i:i + 1, :n], LENGTHS[i:i + 1], surprisal[i:i + 1, :n])
        torch.testing.assert_close(out.log_probs[i, :n], alone.log_probs[0], rtol=1e-5, atol=1e-5)


ENCODERS = encoder_names()


@pytest.mark.parametrize("name", ENCODERS)
def test_every_encoder_keeps_the_encoder_contract(name):
    """Every encoder of surprisal_cc/models (a new one too): normalised log-probabilities, one MACs
    tensor per component of component_macs, MACs and statistics zero on padding, and the same
    output for an utterance alone and padded in a batch (evaluation)."""
    torch.manual_seed(0)
    enc = build_encoder(name, input_size=D, num_outputs=5, hidden_size=8).eval()
    enc.set_test_sampling(False)  # sampled routing draws differently for other shapes
    x = noisy_padding(torch.randn(3, T, D), LENGTHS)
    surprisal = torch.rand(3, T) * 4
    with torch.no_grad():
        out = enc(x, LENGTHS, surprisal if enc.needs_surprisal(False) else None)
        padding = ~lengths_to_mask(LENGTHS, T)
        assert out.log_probs.shape == (3, T, 5)
        torch.testing.assert_close(out.log_probs.exp().sum(-1)[~padding], torch.ones(int(LENGTHS.sum())))
        assert set(out.frame_macs) <= set(enc.component_macs())
        for component, macs in out.frame_macs.items():
            assert macs.shape == (3, T) and torch.all(macs[padding] == 0), component
        for key, value in out.stats.items():
            assert torch.all(value[padding] == 0), key
        switched = 0  # frames whose path (network, steps) moved with float32 rounding near a threshold
        for i, n in enumerate(LENGTHS.tolist()):
            alone = enc(x[i:i + 1, :n], LENGTHS[i:i + 1], surprisal[i:i + 1, :n] if enc.needs_surprisal(False) else None)
            moved = sum(int((out.stats[k][i, :n] != alone.stats[k][0]).sum()) for k in ("use_big", "steps")
                        if k in out.stats)
            switched += moved
            if not moved:  # the same computation: the same output up to summation order
                torch.testing.assert_close(out.log_probs[i, :n], alone.log_probs[0], rtol=1e-4, atol=1e-4)
        assert switched <= ROUTING_FLIPS


@pytest.mark.parametrize("name", ENCODERS)
def test_every_encoder_keeps_the_routing_hooks(name):
    """The test-time routing hooks that inference, evaluation, realignment and the Brain call: a model
    that draws (routing_draws) switches between drawn and deterministic routing, changing what
    it computes only through them, and one that draws nothing refuses drawn routing."""
    enc = build_encoder(name, input_size=D, num_outputs=5, hidden_size=8).eval()
    assert isinstance(enc.routing_kind(), str) and enc.test_bias_shift == 0.0
    controller = enc.stage_controller(False)
    assert controller is None or isinstance(controller, Controller)
    enc.set_test_sampling(False)
    if name == "act":  # halts where its cumulative halting probability crosses 1 - eps: nothing to draw
        assert not enc.routing_draws()
    if enc.routing_draws():
        enc.set_test_sampling(True)
        enc.set_test_sampling(False)
    else:
        with pytest.raises(ValueError, match="draws nothing"):
            enc.set_test_sampling(True)


@pytest.mark.parametrize("controller, draws", [("surprisal", True), ("random", True), ("learned", False),
                                               ("big_only", False), ("small_only", False)])
def test_conditional_routing_hooks_follow_the_test_controller(controller, draws):
    enc = build_encoder("conditional", input_size=D, num_outputs=5, hidden_size=8, controller=controller).eval()
    assert enc.routing_draws() is draws and enc.stage_controller(False).name == controller
    assert controller in enc.routing_kind()
    if controller == "random":  # only a draw routes it: deterministic routing is refused
        with pytest.raises(ValueError, match="routes by chance"):
            enc.set_test_sampling(False)
    else:
        enc.set_test_sampling(False)
        assert enc.test_stochastic is False
    if draws:
        enc.set_test_sampling(True)
        assert enc.test_stochastic is True
    random_at_test = build_encoder("conditional", input_size=D, num_outputs=5, hidden_size=8, controller=controller,
                                   conditional_options={"controller_at_test": False})
    assert random_at_test.stage_controller(False).name == "random" and random_at_test.routing_draws()


@pytest.mark.parametrize("mode, draws, deterministic", [("sample", True, "threshold"), ("threshold", True, "threshold"),
                                                        ("truncated", False, "truncated"),
                                                        ("expected", False, "expected")])
def test_pondernet_routing_hooks_switch_drawn_halting_only(mode, draws, deterministic):
    enc = build_encoder("pondernet", input_size=D, num_outputs=5, hidden_size=8,
                        adaptive_options={"pondernet": {"inference": mode}}).eval()
    assert enc.routing_draws() is draws and enc.stage_controller(False) is None and mode in enc.routing_kind()
    enc.set_test_sampling(False)
    assert enc.inference == deterministic
    if draws:
        enc.set_test_sampling(True)
        assert enc.inference == "sample"


def test_learned_controller_aux_loss_reaches_encoder_output():
    torch.manual_seed(0)
    enc = small_encoder(controller=LearnedController(D, 12, penalty_weight=0.1)).train()
    out = enc(torch.randn(3, T, D), LENGTHS)
    # lambda * 32 * the mean over the batch's utterances of sum_t (s_t - 0.5)^2 = 0.25 per real frame
    assert float(out.aux_loss.detach()) == pytest.approx(0.1 * 32 * 0.25 * float(LENGTHS.sum()) / len(LENGTHS))
    (out.log_probs[:, :, 0].sum() + out.aux_loss).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in enc.controller.parameters())


def test_constructor_validation():
    with pytest.raises(ValueError, match="execution"):
        small_encoder(execution="dense")
    # routing by chance thresholded at 0.5 would run one network on every frame
    with pytest.raises(ValueError, match="test_stochastic False .* set test_stochastic True"):
        small_encoder(controller=ConstantController(0.5), test_stochastic=False)
    with pytest.raises(ValueError, match="train_stochastic False"):
        small_encoder(controller_at_train=False, train_stochastic=False)
    small_encoder(controller=ConstantController(1.0), test_stochastic=False)  # big-only: nothing drawn

    class CoinController(Controller):  # a new controller routed by chance, as docs/extending.md has it
        name, routes_by_chance = "coin", True

        def probability(self, features, surprisal, bias_shift=0.0, mask=None):
            return torch.full(features.shape[:2], 0.3)

    with pytest.raises(ValueError, match="with the 'coin' controller, which routes by chance"):
        small_encoder(controller=CoinController(), test_stochastic=False)
    with pytest.raises(ValueError, match="output size"):
        ConditionalEncoder(FrameNet([D, D]), FrameNet([D, 3]), SurprisalController())


def test_deterministic_routing_by_chance_is_refused_with_one_rule_in_both_places():
    """The constructor and ``set_test_sampling`` refuse deterministic routing of a controller that routes by
    chance with the same rule, each naming what asked for it."""
    chance = "routes by chance (the same p_big on every frame)"
    for key in ("train_stochastic", "test_stochastic"):
        with pytest.raises(ValueError) as refused:
            small_encoder(controller=ConstantController(0.5), **{key: False})
        assert str(refused.value) == (f"{key} False with the 'random' controller, which {chance}, would run one "
                                      f"network on every frame: set {key} True")
    enc = small_encoder(controller=ConstantController(0.5)).eval()
    with pytest.raises(ValueError) as refused:
        enc.set_test_sampling(False)
    assert str(refused.value) == (f"the 'random' controller {chance}: deterministic routing would run one network "
                                  "on every frame")
    assert enc.test_stochastic is True  # a refused call changes nothing
    at_test = small_encoder(controller_at_test=False)  # random only at test: training may be deterministic
    small_encoder(controller_at_test=False, train_stochastic=False)
    with pytest.raises(ValueError, match="'random' controller routes by chance"):
        at_test.set_test_sampling(False)


# ----------------------------------------------------------------------------------------------
# The paper's architecture (the model files and build_encoder: tests/test_architectures.py)
# ----------------------------------------------------------------------------------------------
def test_paper_architecture_construction():
    torch.manual_seed(0)
    enc = build_encoder("conditional", input_size=512, num_outputs=42)
    assert isinstance(enc.pre_net, BiGRU) and enc.pre_net.forward_gru.hidden_size == 256
    assert enc.pre_net.dropout.p == 0.5 and enc.post_net.rnn.dropout.p == 0.5
    assert [m.out_features for m in enc.big_net.net if isinstance(m, nn.Linear)] == [2048, 512]
    assert [m.negative_slope for m in enc.big_net.net if isinstance(m, nn.LeakyReLU)] == [0.125, 0.125]
    assert enc.post_net.output.out_features == 42
