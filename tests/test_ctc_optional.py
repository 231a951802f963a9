"""CTC loss with optional tokens: against torch's CTC loss, against brute force over the variants,
and the optional-silence training targets, down to the recipe run with ``--optional_silence=True``."""
from __future__ import annotations

import itertools

import pytest
import torch

from data_fixtures import mini_corpus, run_fbank_big_only_epoch, write_label_manifest  # noqa: F401  (a fixture)
from surprisal_cc.model.ctc import ctc_loss_optional, optional_silence_labels, optional_silence_targets


def random_case(seed, B=3, T=20, V=6, S=6, repeats=True):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    targets = torch.randint(1, 3 if repeats else V, (B, S), generator=g)  # few symbols: many repeats
    target_lengths = torch.randint(0, S + 1, (B,), generator=g)
    target_lengths[0] = S
    input_lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    input_lengths[-1] = T
    return logits, targets, target_lengths, input_lengths


def torch_ctc(logits, targets, target_lengths, input_lengths, reduction="none"):
    return torch.nn.functional.ctc_loss(logits.log_softmax(-1).transpose(0, 1), targets, input_lengths,
                                        target_lengths, blank=0, reduction=reduction, zero_infinity=False)


def value_and_grad(fn, logits):
    x = logits.clone().requires_grad_(True)
    loss = fn(x)
    loss.sum().backward()
    return loss.detach(), x.grad


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_without_optional_tokens_equals_torch_ctc(seed, reduction):
    logits, targets, tl, il = random_case(seed, repeats=seed % 2 == 0)
    ours, g_ours = value_and_grad(lambda x: ctc_loss_optional(x.float().log_softmax(-1), targets, tl, il,
                                                              reduction=reduction), logits.float())
    ref, g_ref = value_and_grad(lambda x: torch_ctc(x, targets, tl, il, reduction), logits.float())
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-4, atol=1e-5)


def brute_force(logits, targets, target_lengths, input_lengths, optional):
    """-log sum over every subset of optional tokens deleted of exp(-torch CTC loss), per utterance."""
    losses = []
    for b in range(len(targets)):
        n = int(target_lengths[b])
        tok, opt = targets[b, :n].tolist(), optional[b, :n].tolist()
        where = [i for i in range(n) if opt[i]]
        terms = []
        for drop in itertools.product([False, True], repeat=len(where)):
            gone = {i for i, d in zip(where, drop) if d}
            variant = torch.tensor([[t for i, t in enumerate(tok) if i not in gone] or [0]])
            terms.append(-torch_ctc(logits[b:b + 1, :int(input_lengths[b])], variant,
                                    torch.tensor([len(tok) - len(gone)]), input_lengths[b:b + 1])[0])
        losses.append(-torch.logsumexp(torch.stack(terms), 0))
    return torch.stack(losses)


@pytest.mark.parametrize("seed", range(8))
def test_optional_tokens_equal_the_sum_over_all_variants(seed):
    """Random flags: adjacent optional tokens, optional first/last tokens, equal labels around them."""
    logits, targets, tl, il = random_case(100 + seed, B=4, T=14, V=4, S=6, repeats=seed % 2 == 0)
    g = torch.Generator().manual_seed(seed)
    optional = torch.rand(targets.shape, generator=g) < 0.4
    optional[0, -1] = optional[1, 0] = True
    ours, g_ours = value_and_grad(
        lambda x: ctc_loss_optional(x.log_softmax(-1), targets, tl, il, optional, reduction="none"), logits)
    ref, g_ref = value_and_grad(lambda x: brute_force(x, targets, tl, il, optional), logits)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours.double(), ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(g_ours.double(), g_ref, rtol=1e-4, atol=1e-5)


def test_optional_silence_between_equal_phones_needs_a_blank():
    """AH [sil] AH: with sil left out, the two AH need a blank between them (3 frames, not 2)."""
    lp = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    targets, optional = torch.tensor([[2, 1, 2]]), torch.tensor([[False, True, False]])
    assert torch.isinf(ctc_loss_optional(lp[:, :2], targets, torch.tensor([3]), torch.tensor([2]), optional))
    loss = ctc_loss_optional(lp, targets, torch.tensor([3]), torch.tensor([3]), optional)
    with_sil, with_blank = lp[0, [0, 1, 2], [2, 1, 2]].sum(), lp[0, [0, 1, 2], [2, 0, 2]].sum()  # the only paths
    torch.testing.assert_close(loss, -torch.logaddexp(with_sil, with_blank))


def test_impossible_utterance_is_inf_like_torch_and_leaves_the_others_gradients():
    logits, targets, tl, il = random_case(7, B=3, T=10, S=4)
    targets[1] = torch.tensor([1, 1, 1, 1])
    tl[1], il[1] = 4, 6  # needs 7 frames
    ours, g_ours = value_and_grad(lambda x: ctc_loss_optional(x.log_softmax(-1), targets, tl, il, reduction="none"),
                                  logits.float())
    ref = torch_ctc(logits.float(), targets, tl, il)
    assert torch.isinf(ours[1]) and torch.isinf(ref[1])
    torch.testing.assert_close(ours[[0, 2]], ref[[0, 2]])
    assert torch.isfinite(g_ours).all() and (g_ours[1] == 0).all()
    optional = torch.zeros_like(targets, dtype=torch.bool)
    optional[1, 1] = True  # 1 [1] 1 1: 1 1 1 fits in 5 frames, not in 4
    assert torch.isfinite(ctc_loss_optional(logits.log_softmax(-1), targets, tl, il, optional, reduction="none")[1])
    il[1] = 4
    assert torch.isinf(ctc_loss_optional(logits.log_softmax(-1), targets, tl, il, optional, reduction="none")[1])


def test_float32_under_bf16_autocast():
    logits, targets, tl, il = random_case(3, B=2, T=30, S=8)
    optional = torch.zeros_like(targets, dtype=torch.bool)
    optional[:, 2] = True
    lp = logits.float().log_softmax(-1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = ctc_loss_optional(lp.bfloat16(), targets, tl, il, optional)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ctc_loss_optional(lp.bfloat16().float(), targets, tl, il, optional))


def test_argument_errors():
    lp = torch.zeros(1, 3, 4)
    with pytest.raises(ValueError, match="reduction"):
        ctc_loss_optional(lp, torch.tensor([[1]]), torch.tensor([1]), torch.tensor([3]), reduction="avg")
    with pytest.raises(ValueError, match="input_lengths"):
        ctc_loss_optional(lp, torch.tensor([[1]]), torch.tensor([1]), torch.tensor([4]))
    with pytest.raises(ValueError, match="optional"):
        ctc_loss_optional(lp, torch.tensor([[1]]), torch.tensor([1]), torch.tensor([3]), torch.tensor([[True, False]]))


def test_doctests():
    import doctest

    import surprisal_cc.model.ctc as ctc

    assert doctest.testmod(ctc).failed == 0


PRONS = {"A": ["AH"], "CAT": ["K", "AE", "T"], "SAT": ["S", "AE", "T"]}


def test_optional_silence_labels():
    labels, flags = optional_silence_labels("sil AH K AE T S AE T sil".split(), ["A", "CAT", "SAT"], PRONS.get)
    assert labels == "sil AH sil K AE T sil S AE T sil".split()
    assert [i for i, f in enumerate(flags) if f] == [2, 6]  # interior boundaries only; edge sils obligatory
    assert optional_silence_labels("AH K AE T".split(), ["A", "CAT"], PRONS.get) == (
        "AH sil K AE T".split(), [False, True, False, False, False])
    assert optional_silence_labels("sil AH sil K AE T sil".split(), ["A", "CAT"], PRONS.get) is None  # MFA labels
    assert optional_silence_labels("sil AH K AE T sil".split(), ["A", "DOG"], PRONS.get) is None  # unknown word
    assert optional_silence_labels(["sil"], [], PRONS.get) == (["sil"], [False])


def test_optional_silence_targets_from_the_lexicon():
    rows = {"u1": {"wrd": "THE CAT", "phn": "sil DH AH K AE T sil"},
            "u2": {"wrd": "THE QWXZT", "phn": "sil DH AH spn sil"},  # OOV word -> spn (g2p=spn)
            "u3": {"wrd": "THE CAT", "phn": "sil DH AH sil K AE T sil"}}  # MFA labels: left as they are
    table = optional_silence_targets(rows, g2p="spn")
    assert sorted(table) == ["u1", "u2"]
    assert table["u1"] == ("sil DH AH sil K AE T sil".split(), [False, False, False, True, False, False, False, False])
    assert table["u2"][0] == "sil DH AH sil spn sil".split()


def test_dataio_prep_gives_training_targets_an_optional_mask(tmp_path):
    from surprisal_cc.training.datasets import dataio_prep
    from surprisal_cc.training.labels import label_encoder_for, phone_set

    manifest = write_label_manifest(tmp_path / "m.csv", {"u1": ("THE CAT", "sil DH AH K AE T sil")})
    encoder = label_encoder_for(phone_set("librispeech"))
    hparams = {"label_encoder": encoder, "target_unit": "phone", "optional_silence": True, "g2p": "spn"}
    datasets = dataio_prep(hparams, {"train": manifest, "valid": manifest}, cache=None)
    with datasets["train"].output_keys_as(["tokens", "optional"]):
        item = datasets["train"][0]
    assert encoder.decode_ndim(item["tokens"].tolist()) == "sil DH AH sil K AE T sil".split()
    assert item["optional"].tolist() == [False, False, False, True, False, False, False, False]
    with datasets["valid"].output_keys_as(["tokens"]):
        assert encoder.decode_ndim(datasets["valid"][0]["tokens"].tolist()) == "sil DH AH K AE T sil".split()
    assert "optional" not in datasets["valid"].pipeline.output_mapping


@pytest.mark.integration
def test_recipe_trains_with_optional_silence(mini_corpus):
    """The real recipe, one epoch: the optional-silence loss on the 2 training batches only."""
    out, res = run_fbank_big_only_epoch(mini_corpus, "exp_optsil", "ctc_loss_optional", optional_silence=True)
    assert "optional sil at word boundaries for 6 of 6 training utterances" in out
    assert "ctc_loss_optional calls: 2" in out  # 6 training utterances, batches of 4; not in valid/test
    assert res["error_rate_details"]["num_utterances"] == 6 and res["PER"] > 0
