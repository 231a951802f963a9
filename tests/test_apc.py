"""Tests for surprisal_cc.model.apc: size, causality, padding invariance, surprisal, frozen wrapper, export."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from surprisal_cc.model.apc import AffineScale, APCModel, FrozenAPC, load_apc, save_apc
from numerics import assert_close_up_to_summation_order

SMALL = dict(input_size=6, hidden_size=16)


def small_apc(**kwargs) -> APCModel:
    return APCModel(**{**SMALL, **kwargs})


def test_default_parameter_count_and_structure():
    torch.manual_seed(0)
    apc = APCModel()
    assert sum(p.numel() for p in apc.parameters()) == 3_054_674
    assert [type(m) for m in apc.grus] == [nn.GRU, nn.GRU]
    assert apc.grus[0].input_size == 80 and apc.grus[1].input_size == 512
    assert all(g.hidden_size == 512 and not g.bidirectional for g in apc.grus)
    for proj in apc.projections:
        assert proj[0].p == 0.5 and proj[2].negative_slope == 0.125
    assert (apc.head.in_features, apc.head.out_features) == (512, 80)
    assert float(apc.input_scale.weight.detach()) == pytest.approx(0.1) and float(apc.input_scale.bias.detach()) == 0.0
    assert sum(p.numel() for p in APCModel(input_scale=False).parameters()) == 3_054_672


def test_shapes():
    torch.manual_seed(0)
    apc = small_apc().eval()
    out = apc(torch.randn(3, 9, 6), torch.tensor([9, 5, 1]))
    assert out.features.shape == (3, 9, 16)
    assert out.prediction.shape == (3, 9, 6)
    assert out.surprisal.shape == (3, 9)


def test_reference_forward():
    """Independent re-implementation of the forward pass with the same weights."""
    torch.manual_seed(0)
    apc = small_apc(num_layers=2).eval()
    x = torch.randn(2, 7, 6)
    out = apc(x, torch.tensor([7, 7]))
    h = torch.cat([torch.zeros(2, 1, 6), x], dim=1)
    h = apc.input_scale.weight * h + apc.input_scale.bias
    for gru, proj in zip(apc.grus, apc.projections):
        h = nn.functional.leaky_relu(proj[1](gru(h)[0]), 0.125)
    torch.testing.assert_close(out.prediction, apc.head(h[:, :-1]))
    torch.testing.assert_close(out.features, h[:, 1:])


def test_causality():
    torch.manual_seed(0)
    apc = small_apc().eval()
    T = 12
    x = torch.randn(2, T, 6)
    lengths = torch.tensor([T, T])
    base = apc(x, lengths)
    for k in (0, 1, 5, T - 1):
        x2 = x.clone()
        x2[:, k:] += torch.randn(2, T - k, 6)
        out = apc(x2, lengths)
        # prediction at t has seen x_1..x_{t-1}: predictions up to index k are unchanged
        torch.testing.assert_close(out.prediction[:, : k + 1], base.prediction[:, : k + 1], rtol=0, atol=0)
        # feature at t has seen x_1..x_t: features before index k are unchanged
        torch.testing.assert_close(out.features[:, :k], base.features[:, :k], rtol=0, atol=0)
        # ... and the perturbation is visible right after (the test can fail)
        assert not torch.allclose(out.features[:, k], base.features[:, k])
        if k + 1 < T:
            assert not torch.allclose(out.prediction[:, k + 1], base.prediction[:, k + 1])


def test_padding_invariance():
    torch.manual_seed(0)
    apc = small_apc().eval()
    short, long = torch.randn(5, 6), torch.randn(11, 6)
    batch = torch.full((2, 11, 6), 3.0)  # non-zero padding
    batch[0, :5], batch[1] = short, long
    out = apc(batch, torch.tensor([5, 11]))
    alone = apc(short.unsqueeze(0), torch.tensor([5]))
    assert_close_up_to_summation_order(out.features[0, :5], alone.features[0])
    assert_close_up_to_summation_order(out.surprisal[0, :5], alone.surprisal[0])
    assert_close_up_to_summation_order(out.prediction[0, :5], alone.prediction[0])
    assert torch.all(out.surprisal[0, 5:] == 0)
    assert torch.all(out.features[0, 5:] == 0)
    alone_long = apc(long.unsqueeze(0), torch.tensor([11]))
    assert_close_up_to_summation_order(out.surprisal[1], alone_long.surprisal[0])


def test_surprisal_definition():
    torch.manual_seed(0)
    apc = small_apc().eval()
    x = torch.randn(3, 8, 6)
    lengths = torch.tensor([8, 3, 6])
    out = apc(x, lengths)
    for i, n in enumerate(lengths.tolist()):
        expected = 0.5 * ((x[i, :n] - out.prediction[i, :n]) ** 2).sum(-1)
        torch.testing.assert_close(out.surprisal[i, :n], expected)
        assert torch.all(out.surprisal[i, n:] == 0)
    assert torch.all(out.surprisal[lengths_mask(lengths, 8)] > 0)


def lengths_mask(lengths, T):
    return torch.arange(T)[None, :] < lengths[:, None]


def test_loss_is_mean_surprisal_over_real_frames():
    torch.manual_seed(0)
    apc = small_apc().eval()
    x = torch.randn(3, 8, 6)
    lengths = torch.tensor([8, 2, 5])
    out = apc(x, lengths)
    expected = torch.cat([out.surprisal[i, :n] for i, n in enumerate(lengths.tolist())]).mean()
    torch.testing.assert_close(apc.loss(x, lengths), expected)


def test_loss_backpropagates():
    torch.manual_seed(0)
    apc = small_apc()
    apc.loss(torch.randn(2, 5, 6), torch.tensor([5, 3])).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in apc.parameters())


def test_eval_deterministic_train_dropout():
    torch.manual_seed(0)
    apc = small_apc()
    x, lengths = torch.randn(2, 6, 6), torch.tensor([6, 4])
    apc.eval()
    a, b = apc(x, lengths), apc(x, lengths)
    assert torch.equal(a.features, b.features) and torch.equal(a.surprisal, b.surprisal)
    apc.train()
    c, d = apc(x, lengths), apc(x, lengths)
    assert not torch.allclose(c.features, d.features)
    assert not torch.allclose(c.surprisal, d.surprisal)


def test_frozen_apc():
    torch.manual_seed(0)
    apc = small_apc().train()
    frozen = FrozenAPC(apc)
    assert not frozen.apc.training
    frozen.train()
    assert frozen.training and not frozen.apc.training
    assert all(not m.training for m in frozen.apc.modules())
    assert not any(p.requires_grad for p in frozen.parameters())
    assert [p for p in frozen.parameters() if p.requires_grad] == []
    x, lengths = torch.randn(2, 6, 6), torch.tensor([6, 4])
    a, b = frozen(x, lengths), frozen(x, lengths)
    assert torch.equal(a.features, b.features)  # no dropout
    assert not a.features.requires_grad
    torch.testing.assert_close(a.surprisal, apc.eval()(x, lengths).surprisal)


def test_affine_scale():
    s = AffineScale(weight=2.0, bias=-1.0)
    assert torch.equal(s(torch.tensor([0.0, 1.5])), torch.tensor([-1.0, 2.0]))
    assert sum(p.numel() for p in s.parameters()) == 2


def test_save_load_roundtrip(tmp_path):
    torch.manual_seed(0)
    apc = APCModel(input_size=6, hidden_size=12, num_layers=3, dropout=0.2, leaky_slope=0.3, input_scale=False)
    path = tmp_path / "apc.pt"
    save_apc(apc, path)
    blob = torch.load(path, weights_only=True)  # loadable without executing code
    assert blob["config"] == dict(input_size=6, hidden_size=12, num_layers=3, dropout=0.2, leaky_slope=0.3,
                                  input_scale=False, residual=False)
    loaded = load_apc(path)
    assert isinstance(loaded, APCModel) and len(loaded.grus) == 3
    assert isinstance(loaded.input_scale, nn.Identity)
    assert loaded.projections[0][0].p == 0.2 and loaded.projections[0][2].negative_slope == 0.3
    for (k1, v1), (k2, v2) in zip(apc.state_dict().items(), loaded.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2)
    x, lengths = torch.randn(2, 5, 6), torch.tensor([5, 2])
    torch.testing.assert_close(loaded.eval()(x, lengths).surprisal, apc.eval()(x, lengths).surprisal, rtol=0,
                               atol=0)


def test_save_load_roundtrip_with_input_scale(tmp_path):
    torch.manual_seed(0)
    apc = small_apc()
    with torch.no_grad():
        apc.input_scale.weight.fill_(0.37)
    save_apc(apc, tmp_path / "a.pt")
    loaded = load_apc(tmp_path / "a.pt")
    assert float(loaded.input_scale.weight.detach()) == pytest.approx(0.37)


def test_load_wrong_shapes_raises_value_error(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "apc.pt"
    save_apc(small_apc(), path)
    with pytest.raises(ValueError) as info:
        load_apc(path, hidden_size=8)  # configuration does not match the weights
    assert str(path) in str(info.value)
    # a file whose config disagrees with its own state_dict
    bad = tmp_path / "bad.pt"
    torch.save({"config": dict(input_size=6, hidden_size=32), "state_dict": small_apc().state_dict()}, bad)
    with pytest.raises(ValueError, match="bad.pt"):
        load_apc(bad)


def test_load_not_an_apc_file(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match="other.pt"):
        load_apc(path)


def test_residual_head_starts_as_the_copy_previous_frame_predictor():
    torch.manual_seed(0)
    apc = APCModel(input_size=6, hidden_size=12, residual=True).eval()
    apc.init_output_bias(torch.randn(10, 6))
    with torch.no_grad():
        apc.head.weight.zero_()
    x = torch.randn(2, 5, 6)
    out = apc(x, torch.tensor([5, 3]))
    previous = torch.cat([torch.zeros(2, 1, 6), x[:, :-1]], dim=1)
    torch.testing.assert_close(out.prediction, previous)
    assert apc.macs_per_frame() == APCModel(input_size=6, hidden_size=12).macs_per_frame() + 6


def test_residual_flag_survives_export(tmp_path):
    apc = APCModel(input_size=6, hidden_size=12, residual=True)
    save_apc(apc, tmp_path / "apc.pt")
    assert load_apc(tmp_path / "apc.pt").residual is True


def test_an_export_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """``save_apc`` writes beside the file and renames it into place: a process killed mid-write leaves
    the previous export (or none), never a truncated one that a later run would take as finished."""
    path = tmp_path / "apc.pt"
    save_apc(APCModel(input_size=4, hidden_size=8), path)
    before = path.read_bytes()

    def killed(blob, target):
        open(target, "wb").write(b"trunc")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        save_apc(APCModel(input_size=4, hidden_size=16), path)
    assert path.read_bytes() == before and load_apc(path).hidden_size == 8
