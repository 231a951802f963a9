"""CUDA: every module computes on the GPU what it computes on the CPU, and trains there under bf16.

Skipped without a CUDA device (CI has none); on a GPU machine ``pytest tests/test_cuda.py`` runs
them. The recipe run on CUDA is ``tests/test_recipes.py::test_recipe_trains_on_cuda``, the
inference one ``tests/test_inference.py::test_cuda_matches_cpu``.
"""
from __future__ import annotations

import copy

import pytest
import torch

from benchmarks.common import full_fp32
from surprisal_cc.model.apc import APCModel
from surprisal_cc.model.architectures import build_encoder
from surprisal_cc.training.cache import FeatureCache
from surprisal_cc.model.encoders import ConditionalEncoder
from surprisal_cc.model.nnet import lengths_to_mask

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

D, V = 32, 6
LENGTHS = torch.tensor([17, 9, 4])


@pytest.fixture(autouse=True)
def full_fp32_on_the_gpu():
    """TF32 off, so fp32 on the GPU is compared with fp32 on the CPU (tolerances below are fp32's)."""
    with full_fp32():
        yield


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(LENGTHS), int(LENGTHS.max()), D, generator=g)
    surprisal = torch.rand(len(LENGTHS), int(LENGTHS.max()), generator=g) * 4
    return x, surprisal


def paper_encoder(controller: str) -> ConditionalEncoder:
    """The paper's architecture at small width, without dropout, routing by ``p_big > 0.5`` in eval."""
    torch.manual_seed(0)
    options = {"weight": 1.0, "bias": -2.0} if controller == "surprisal" else {}
    return build_encoder("conditional", D, V, controller=controller, controller_options=options, hidden_size=16,
                         dropout=0.0, conditional_options={"test_stochastic": False})


@pytest.mark.parametrize("controller", ["surprisal", "learned", "big_only", "small_only"])
def test_routed_encoder_on_cuda_equals_cpu(controller):
    """Deterministic routing (eval, p_big > 0.5): same frames to the big network, same log-probabilities."""
    cpu = paper_encoder(controller).eval()
    gpu = copy.deepcopy(cpu).cuda()
    x, surprisal = inputs()
    with torch.no_grad():
        a = cpu(x, LENGTHS, surprisal)
        b = gpu(x.cuda(), LENGTHS.cuda(), surprisal.cuda())
    mask = lengths_to_mask(LENGTHS, x.shape[1])
    assert b.log_probs.device.type == "cuda"
    # decisions compared exactly: only meaningful while no real frame's p_big is within rounding of 0.5
    assert float((a.stats["p_big"][mask] - 0.5).abs().min()) > 1e-5, "inputs put a frame at the threshold"
    assert torch.equal(a.stats["use_big"][mask], b.stats["use_big"].cpu()[mask])
    torch.testing.assert_close(b.log_probs.cpu()[mask], a.log_probs[mask], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["conditional", "act", "pondernet"])
def test_encoder_on_cuda_takes_lengths_on_the_cpu(name):
    """``Encoder.forward``'s lengths may be on any device: CPU lengths give what CUDA lengths give."""
    torch.manual_seed(0)
    routing = {"controller_options": {"weight": 1.0, "bias": -2.0},  # calibrated, and deterministic at test
               "conditional_options": {"test_stochastic": False}} if name == "conditional" else {}
    encoder = build_encoder(name, D, V, hidden_size=16, dropout=0.0, **routing).cuda().eval()
    x, surprisal = (t.cuda() for t in inputs())
    with torch.no_grad():
        a = encoder(x, LENGTHS.cuda(), surprisal)
        b = encoder(x, LENGTHS, surprisal)
    torch.testing.assert_close(b.log_probs, a.log_probs, rtol=1e-5, atol=1e-5)  # CUDA's index_add: any order


@pytest.mark.parametrize("controller", ["big_only", "small_only"])
def test_training_gradients_on_cuda_equal_cpu(controller):
    """Forward and backward in train mode (no dropout, deterministic controllers): same gradients."""
    cpu = paper_encoder(controller).train()
    gpu = copy.deepcopy(cpu).cuda()
    x, surprisal = inputs(1)
    for model, device in ((cpu, "cpu"), (gpu, "cuda")):
        out = model(x.to(device), LENGTHS.to(device), surprisal.to(device))
        (out.log_probs * lengths_to_mask(LENGTHS.to(device), x.shape[1]).unsqueeze(-1)).sum().backward()
    for (name, p_cpu), p_gpu in zip(cpu.named_parameters(), gpu.parameters()):
        if p_cpu.grad is None:
            assert p_gpu.grad is None, name
            continue
        torch.testing.assert_close(p_gpu.grad.cpu(), p_cpu.grad, rtol=1e-3, atol=1e-4, msg=name)


def test_apc_on_cuda_equals_cpu():
    torch.manual_seed(0)
    cpu = APCModel(input_size=D, hidden_size=24).eval()
    gpu = copy.deepcopy(cpu).cuda()
    x, _ = inputs(2)
    with torch.no_grad():
        a, b = cpu(x, LENGTHS), gpu(x.cuda(), LENGTHS.cuda())
    torch.testing.assert_close(b.features.cpu(), a.features, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(b.surprisal.cpu(), a.surprisal, rtol=1e-4, atol=1e-3)


def test_feature_cache_filled_on_cuda_equals_the_cpu_one(tmp_path):
    """A run's --device fills its feature cache: the APC's features and surprisal computed there."""
    torch.manual_seed(0)
    apc = APCModel(input_size=80, hidden_size=24).eval()
    wav = torch.randn(16000, generator=torch.Generator().manual_seed(3))
    entries = {}
    for device in ("cpu", "cuda"):
        cache = FeatureCache(tmp_path / device, copy.deepcopy(apc), device=device)
        cache.build([("utt", "utt.wav")], lambda path: wav, progress=False)
        entries[device] = cache.load("utt")
    torch.testing.assert_close(entries["cuda"]["fbank"], entries["cpu"]["fbank"])
    torch.testing.assert_close(entries["cuda"]["features"], entries["cpu"]["features"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(entries["cuda"]["surprisal"], entries["cpu"]["surprisal"], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name,controller", [("conditional", "surprisal"), ("conditional", "random"),
                                             ("conditional", "learned"), ("conditional", "big_only"),
                                             ("act", "surprisal"), ("pondernet", "surprisal")])
def test_training_step_on_cuda_under_bf16_autocast(name, controller):
    """One optimiser step of each encoder under ``torch.autocast("cuda", bfloat16)``: finite loss and gradients."""
    torch.manual_seed(0)
    enc = build_encoder(name, input_size=D, num_outputs=V, controller=controller, hidden_size=16).cuda().train()
    optimizer = torch.optim.Adam(enc.parameters(), lr=1e-3)
    x, surprisal = (t.cuda() for t in inputs(3))
    lengths = LENGTHS.cuda()
    targets = torch.randint(1, V, (3, 3), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = enc(x, lengths, surprisal)
        loss = torch.nn.functional.ctc_loss(out.log_probs.float().transpose(0, 1), targets, lengths,
                                            torch.full((3,), 3, device="cuda"), zero_infinity=True) + out.aux_loss
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and out.log_probs.device.type == "cuda"
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in enc.parameters())
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in enc.parameters())  # it reached them
