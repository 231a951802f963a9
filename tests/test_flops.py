"""Tests for surprisal_cc.model.flops: MAC formulas, the paper's Table 1 / Appendix A numbers, and a
cross-check against torch.utils.flop_counter on the real modules.

Conventions compared: ``FlopCounterMode`` counts 2 FLOPs per multiply-accumulate of matrix
products and convolutions (mm, addmm, bmm, convolution; GRU cells decompose into these) and
nothing else: bias adds, elementwise products (the surprisal controller's ``w * s``), LayerNorm and
activations count 0. Our convention counts 1 MAC = 1 FLOP and includes bias adds and LayerNorm's
scale and shift, so MACs per frame = parameters used per frame. Hence, per frame,
``counted / 2 == weight_only_macs(module)`` (the weight matrices only), and
``module_macs - weight_only_macs`` is the bias / elementwise parameters, checked by formula.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from surprisal_cc.model.adaptive import ACTEncoder, HaltingUnit, PonderNetEncoder, StepBlock
from surprisal_cc.model.apc import APCModel
from surprisal_cc.model.controllers import LearnedController, SurprisalController
from surprisal_cc.model.architectures import build_encoder
from surprisal_cc.model.nnet import BiGRU, Conv1dPreNet, FrameNet, PostNet
from surprisal_cc.model.flops import MacMeter, format_flop_table, module_macs, uniform_frame_macs, weight_only_macs


def linear(i, o):
    return i * o + o


def gru(i, h):  # one direction, bias_ih + bias_hh
    return 3 * (i * h + h * h + 2 * h)


# ----------------------------------------------------------------------------------------------
# module_macs
# ----------------------------------------------------------------------------------------------
def test_module_macs_linear_conv_gru():
    torch.manual_seed(0)
    assert module_macs(nn.Linear(512, 2048)) == linear(512, 2048) == 1_050_624
    assert module_macs(nn.Linear(7, 3, bias=False)) == 21
    assert module_macs(nn.Conv1d(512, 512, 11)) == 512 * 512 * 11 + 512
    assert module_macs(nn.Conv1d(6, 4, 3, bias=False)) == 72
    assert module_macs(nn.GRU(20, 8)) == gru(20, 8)
    assert module_macs(nn.GRU(512, 256, bidirectional=True)) == 2 * gru(512, 256) == 1_182_720
    assert module_macs(nn.GRU(10, 6, num_layers=2, bidirectional=True)) == 2 * gru(10, 6) + 2 * gru(12, 6)
    assert module_macs(nn.GRU(10, 6, bias=False)) == 3 * (10 * 6 + 36)
    assert module_macs(None) == 0


def test_module_macs_sequential_and_nested():
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Dropout(0.1), nn.Linear(16, 32), nn.LeakyReLU(0.1), nn.Linear(32, 8), nn.ReLU())
    assert module_macs(seq) == linear(16, 32) + linear(32, 8)
    nested = nn.Sequential(seq, nn.ModuleList([nn.GRU(8, 4), nn.Conv1d(8, 2, 5)]))
    assert module_macs(nested) == linear(16, 32) + linear(32, 8) + gru(8, 4) + 8 * 2 * 5 + 2
    assert module_macs(nn.Sequential(nn.ReLU(), nn.Dropout())) == 0


def test_module_macs_uses_macs_per_frame():
    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.big = nn.Linear(100, 100)

        def macs_per_frame(self):
            return 7

    assert module_macs(Custom()) == 7
    assert module_macs(nn.Sequential(Custom(), nn.Linear(2, 2))) == 7 + 6


def test_weight_only_macs():
    torch.manual_seed(0)
    assert weight_only_macs(nn.Linear(16, 8)) == 128
    assert weight_only_macs(nn.GRU(10, 6, bidirectional=True)) == 2 * 3 * (10 * 6 + 6 * 6)
    assert weight_only_macs(nn.Sequential(nn.Linear(4, 3), nn.Conv1d(3, 2, 5))) == 12 + 30


# ----------------------------------------------------------------------------------------------
# The paper's numbers (Table 1 and Appendix A), exact
# ----------------------------------------------------------------------------------------------
def _paper_rows(architecture: str, num_outputs: int = 40):
    enc = build_encoder("conditional", 512, num_outputs, architecture=architecture)
    rows = enc.component_macs()
    apc = module_macs(APCModel())
    shared = apc + rows["pre_net"] + rows["post_net"]
    return rows, apc, shared + rows["big_net"], shared + rows["small_net"]


def test_apc_table1():
    torch.manual_seed(0)
    apc = APCModel()
    assert module_macs(apc) == 3_054_672
    assert sum(p.numel() for p in apc.parameters()) == 3_054_674  # + input scale weight and bias
    assert module_macs(APCModel(input_scale=False)) == 3_054_672


def test_paper_table1():
    torch.manual_seed(0)
    rows, apc, big_only, small_only = _paper_rows("paper", 40)
    assert rows == {"pre_net": 1_182_720, "small_net": 262_656, "big_net": 2_099_712, "post_net": 1_203_240,
                    "controller": 2}
    assert big_only == 7_540_344
    assert small_only == 5_703_288
    assert f"{big_only / 1e6:.2f}M" == "7.54M" and f"{small_only / 1e6:.2f}M" == "5.70M"
    rows42, *_ = _paper_rows("paper", 42)
    assert rows42["post_net"] == 1_204_266


@pytest.mark.parametrize("architecture, big_only, small_only", [
    ("model1", 7_071_352, 5_959_288),
    ("model2", 7_071_352, 5_959_288),
    ("model3", 5_959_288, 3_279_992),
])
def test_appendix_a(architecture, big_only, small_only):
    torch.manual_seed(0)
    rows, apc, big, small = _paper_rows(architecture, 40)
    assert (big, small) == (big_only, small_only)
    paper = {"model1": ("7.07M", "5.96M"), "model2": ("7.07M", "5.96M"), "model3": ("5.96M", "3.28M")}
    assert (f"{big / 1e6:.2f}M", f"{small / 1e6:.2f}M") == paper[architecture]
    assert rows["post_net"] == 0
    if architecture == "model3":
        assert rows["pre_net"] == 0
        assert rows["small_net"] == linear(512 * 11, 40)
        assert rows["big_net"] == linear(512 * 11, 512) + linear(512, 40)
    else:
        assert rows["pre_net"] == 512 * 512 * 11 + 512
        assert rows["small_net"] == linear(512, 40)
        assert rows["big_net"] == linear(512, 2048) + linear(2048, 40)


# ----------------------------------------------------------------------------------------------
# Cross-check against torch.utils.flop_counter (counts matmuls, 2 FLOPs per MAC, no bias adds)
# ----------------------------------------------------------------------------------------------
T = 3


def _counted_flops(fn) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def test_flop_counter_counts_gru_in_this_build():
    torch.manual_seed(0)
    g = nn.GRU(16, 8, batch_first=True)
    assert _counted_flops(lambda: g(torch.randn(1, 5, 16))) == 2 * 5 * 3 * (16 * 8 + 8 * 8)


def test_flop_counter_pre_net():
    torch.manual_seed(0)
    pre = BiGRU(512, 256).eval()
    flops = _counted_flops(lambda: pre(torch.randn(1, T, 512), torch.tensor([T])))
    assert flops / 2 / T == weight_only_macs(pre) == 2 * 3 * (512 * 256 + 256 * 256)


@pytest.mark.parametrize("sizes", [[512, 512], [512, 2048, 512]], ids=["small", "big"])
def test_flop_counter_frame_nets(sizes):
    torch.manual_seed(0)
    net = FrameNet(sizes).eval()
    flops = _counted_flops(lambda: net(torch.randn(T, 512)))
    assert flops / 2 / T == weight_only_macs(net)
    assert module_macs(net) - weight_only_macs(net) == sum(sizes[1:])  # bias adds


def test_flop_counter_post_net():
    torch.manual_seed(0)
    post = PostNet(512, 40).eval()
    flops = _counted_flops(lambda: post(torch.randn(1, T, 512), torch.tensor([T])))
    assert flops / 2 / T == weight_only_macs(post) == 2 * 3 * (512 * 256 + 256 * 256) + 512 * 40


def test_flop_counter_model3_context_net():
    torch.manual_seed(0)
    net = FrameNet([512, 512, 40], context=11, final_activation=False).eval()
    flops = _counted_flops(lambda: net(torch.randn(T, 512 * 11)))
    assert flops / 2 / T == weight_only_macs(net) == 512 * 11 * 512 + 512 * 40


def test_flop_counter_conv1d_pre_net():
    """Appendix A models 1/2: Conv1D (k = 11, 'same' length) pre-net, one output frame per input frame."""
    torch.manual_seed(0)
    pre = Conv1dPreNet(512, 512, kernel_size=11).eval()
    flops = _counted_flops(lambda: pre(torch.randn(1, T, 512), torch.tensor([T])))
    assert flops / 2 / T == weight_only_macs(pre) == 512 * 512 * 11
    assert module_macs(pre) - weight_only_macs(pre) == 512  # bias adds


def test_flop_counter_step_block():
    """ACT / PonderNet step: LayerNorm(s + FrameNet([512, 2048, 512])(s)); LayerNorm and the
    residual add are elementwise and not counted by FlopCounterMode."""
    torch.manual_seed(0)
    step = StepBlock(512, 2048).eval()
    flops = _counted_flops(lambda: step(torch.randn(T, 512)))
    assert flops / 2 / T == weight_only_macs(step) == 512 * 2048 + 2048 * 512
    assert module_macs(step) - weight_only_macs(step) == (2048 + 512) + 2 * 512  # biases + LayerNorm scale/shift


def test_flop_counter_halting_unit():
    torch.manual_seed(0)
    halting = HaltingUnit(512).eval()
    flops = _counted_flops(lambda: halting(torch.randn(T, 512)))
    assert flops / 2 / T == weight_only_macs(halting) == 512
    assert module_macs(halting) == 513


def test_flop_counter_surprisal_controller():
    """sigmoid(w * s + b): one multiply and one bias add per frame (2 MACs); the multiply is an
    elementwise product, which FlopCounterMode does not count."""
    ctrl = SurprisalController(1.0, -2.0)
    mask = torch.ones(1, T, dtype=torch.bool)
    flops = _counted_flops(lambda: ctrl(torch.zeros(1, T, 512), torch.rand(1, T), mask, stochastic=False))
    assert flops == 0 == weight_only_macs(ctrl)
    assert module_macs(ctrl) == ctrl.macs_per_frame() == 2


def test_flop_counter_learned_controller():
    torch.manual_seed(0)
    ctrl = LearnedController(512, 80).eval()
    mask = torch.ones(1, T, dtype=torch.bool)
    flops = _counted_flops(lambda: ctrl(torch.randn(1, T, 512), None, mask))
    assert flops / 2 / T == weight_only_macs(ctrl) == 512 * 80 + 80
    assert module_macs(ctrl) - weight_only_macs(ctrl) == 80 + 1


# Whole encoders: what FlopCounterMode counts in one forward pass equals, component by component,
# (frames that frame_macs charges) x (weight-only MACs of that component). No padding, because the
# BiGRUs and the learned controller compute on padded frames that frame_macs rightly does not charge.
B, TT = 2, 6


def _check_encoder(enc, components, surprisal=None, uncharged=0):
    """``uncharged``: MACs FlopCounterMode sees that our convention does not charge (no parameters)."""
    x, lengths = torch.randn(B, TT, 512), torch.full((B,), TT)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = enc(x, lengths, surprisal)
    static = enc.component_macs()
    expected = 0.0
    for name, modules in components.items():
        runs = float(out.frame_macs[name].sum()) / static[name]
        assert runs == round(runs) and 0 < runs, name
        expected += runs * sum(weight_only_macs(m) for m in modules)
    assert counter.get_total_flops() / 2 == expected + uncharged
    return out


@pytest.mark.parametrize("architecture", ["paper", "model1", "model3"])
@pytest.mark.parametrize("controller", ["surprisal", "learned"])
def test_flop_counter_conditional_encoder_routed(architecture, controller):
    torch.manual_seed(0)
    enc = build_encoder("conditional", 512, 42, controller=controller, architecture=architecture,
                        conditional_options={"test_stochastic": False}).eval()
    if controller == "surprisal":
        enc.controller.set_parameters(1.0, -2.0)
    else:
        with torch.no_grad():  # about half of the frames big
            enc.controller.net[2].bias.sub_(enc.controller.logit(torch.randn(64, 512)).median())
    parts = {"pre_net": enc.pre_net, "small_net": enc.small_net, "big_net": enc.big_net,
             "post_net": enc.post_net, "controller": enc.controller}
    components = {name: [m] for name, m in parts.items() if m is not None}
    out = _check_encoder(enc, components, torch.rand(B, TT) * 4)
    n_big = int(out.stats["use_big"].sum())
    assert 0 < n_big < B * TT  # both networks ran, each on its own frames


def test_flop_counter_learned_controller_training_runs_both_networks():
    torch.manual_seed(0)
    enc = build_encoder("conditional", 512, 42, controller="learned").train()
    out = _check_encoder(enc, {"pre_net": [enc.pre_net], "small_net": [enc.small_net], "big_net": [enc.big_net],
                               "post_net": [enc.post_net], "controller": [enc.controller]})
    assert float(out.frame_macs["big_net"].sum()) == B * TT * module_macs(enc.big_net)
    assert float(out.frame_macs["small_net"].sum()) == B * TT * module_macs(enc.small_net)


@pytest.mark.parametrize("encoder", ["act", "pondernet_threshold", "pondernet_train"])
def test_flop_counter_adaptive_encoders(encoder):
    """Step block and halting unit charged per executed step, frame by frame (early exit)."""
    torch.manual_seed(0)
    if encoder == "act":
        enc = ACTEncoder(512, 42, max_steps=4).eval()
    else:
        enc = PonderNetEncoder(512, 42, max_steps=4, inference="threshold")
        enc.train(encoder == "pondernet_train")
    nn.init.normal_(enc.halting.linear.weight, std=0.2)  # frames halt after different numbers of steps
    # PonderNet's training output sum_n p_n s_n is an einsum (a bmm), N * D MACs per frame that
    # FlopCounterMode counts; like ACT's elementwise sum, it has no parameters and is not charged.
    mixing = B * TT * 4 * 512 if encoder == "pondernet_train" else 0
    out = _check_encoder(enc, {"pre_net": [enc.pre_net], "step_block": [enc.step, enc.halting],
                               "post_net": [enc.post_net]}, uncharged=mixing)
    steps = out.stats["steps"]
    if encoder == "pondernet_train":
        assert torch.all(steps == 4)
    else:
        assert steps.min() < steps.max()  # early exit happened


def _apc_counted_macs_per_frame(apc: APCModel) -> float:
    """APC encoder + head run on T frames (the forward pass itself adds the causal zero frame)."""
    x = torch.randn(1, T, 80)
    return _counted_flops(lambda: apc.head(apc.encode(x))) / 2 / T


def test_flop_counter_apc_without_input_scale():
    torch.manual_seed(0)
    apc = APCModel(input_scale=False).eval()
    assert _apc_counted_macs_per_frame(apc) == weight_only_macs(apc)
    n_bias = 2 * 3 * 512 * 2 + 2 * 512 + 80  # GRU biases, projection biases, head bias
    assert weight_only_macs(apc) + n_bias == module_macs(apc) == 3_054_672


def test_flop_counter_apc_default():
    torch.manual_seed(0)
    apc = APCModel().eval()
    assert _apc_counted_macs_per_frame(apc) == weight_only_macs(apc)


def test_flop_counter_whole_forward_apc_counts_zero_frame():
    """APCModel.forward runs the GRUs/projections on T + 1 steps and the head on T."""
    torch.manual_seed(0)
    apc = APCModel(input_scale=False).eval()
    flops = _counted_flops(lambda: apc(torch.randn(1, T, 80), torch.tensor([T])))
    head = 512 * 80
    assert flops / 2 == (T + 1) * (weight_only_macs(apc) - head) + T * head


# ----------------------------------------------------------------------------------------------
# MacMeter and helpers
# ----------------------------------------------------------------------------------------------
def test_uniform_frame_macs():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    out = uniform_frame_macs(5, mask)
    assert out.dtype == torch.float64
    assert out.tolist() == [[5.0, 5.0, 0.0], [5.0, 0.0, 0.0]]


def test_mac_meter_per_frame():
    meter = MacMeter()
    meter.update({"big_net": torch.tensor([[10.0, 0.0], [10.0, 0.0]]), "small_net": torch.tensor([[0.0, 3.0]])},
                 num_frames=3, uniform={"pre_net": 100})
    meter.update({"big_net": torch.tensor([[10.0]])}, num_frames=2, uniform={"pre_net": 100, "apc": 7})
    table = meter.per_frame()
    assert meter.frames == 5
    assert table["big_net"] == pytest.approx(30 / 5)
    assert table["small_net"] == pytest.approx(3 / 5)
    assert table["pre_net"] == pytest.approx(100.0)
    assert table["apc"] == pytest.approx(7 * 2 / 5)
    assert table["total"] == pytest.approx(6 + 0.6 + 100 + 2.8)


def test_mac_meter_empty():
    assert MacMeter().per_frame() == {"total": 0}


def test_format_flop_table():
    text = format_flop_table({"big-only": 7_540_344, "controller": 2})
    assert "| big-only | 7.54M |" in text
    assert "| controller | 2 |" in text
