"""CTC loss over a graph of tokens (pronunciation alternatives): against torch's CTC loss on chains,
against brute force over every choice of pronunciations, and the graphs built from labels."""
from __future__ import annotations

import itertools

import pytest
import torch

from data_fixtures import mini_corpus, run_fbank_big_only_epoch, write_label_manifest  # noqa: F401  (a fixture)
from test_ctc_optional import value_and_grad
from surprisal_cc.model.ctc import chain_predecessors, ctc_loss_graph, graph_tensor, pronunciation_graph, pronunciation_targets

SIL = "sil"


def batch(graphs, pad_width=None):
    """Padded (tokens, lengths, predecessor tensor) of a list of (tokens, predecessor lists)."""
    n_max = max(len(t) for t, _ in graphs)
    k_max = pad_width or max(len(p) for _, preds in graphs for p in preds)
    tokens = torch.zeros(len(graphs), n_max, dtype=torch.long)
    preds = torch.zeros(len(graphs), n_max + 1, k_max, dtype=torch.long)
    for b, (tok, pr) in enumerate(graphs):
        tokens[b, :len(tok)] = torch.tensor(tok, dtype=torch.long)
        table = graph_tensor(pr)
        preds[b, :len(tok), :table.shape[1]] = table[:-1]
        preds[b, len(tok), :table.shape[1]] = table[-1]  # the ends row sits right after the tokens
    return tokens, torch.tensor([len(t) for t, _ in graphs]), preds


def logits_for(seed, B, T, V):
    return torch.randn(B, T, V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).float()


@pytest.mark.parametrize("seed", range(4))
def test_a_chain_is_torch_ctc(seed):
    g = torch.Generator().manual_seed(seed)
    B, T, V = 3, 18, 5
    logits = logits_for(seed, B, T, V)
    lengths = [5, 0, 3]
    seqs = [torch.randint(1, 3, (n,), generator=g).tolist() for n in lengths]  # many repeated labels
    tokens, n, preds = batch([(s, chain_predecessors(len(s))) for s in seqs])
    frames = torch.tensor([T, 11, 7])
    ours, g_ours = value_and_grad(lambda x: ctc_loss_graph(x.log_softmax(-1), tokens, n, preds, frames,
                                                           reduction="none"), logits)
    ref, g_ref = value_and_grad(lambda x: torch.nn.functional.ctc_loss(
        x.log_softmax(-1).transpose(0, 1), tokens, frames, n, reduction="none", zero_infinity=False), logits)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-4, atol=1e-5)


def words_graph(words):
    """(token ids, predecessor lists) of integer words with alternatives, and every choice's sequence."""
    names = {i: str(i) for i in range(1, 10)}
    prons = {f"w{w}": [[names[p] for p in alt] for alt in alts] for w, alts in enumerate(words)}
    chosen = [prons[f"w{w}"][0] for w in range(len(words))]
    phones = [SIL] + [p for c in chosen for p in c] + [SIL]
    tokens, preds = pronunciation_graph(phones, list(prons), prons.get)
    choices = [[0] + [p for alt in choice for p in alt] + [0] for choice in itertools.product(*words)]
    return [0 if t == SIL else int(t) for t in tokens], preds, choices


@pytest.mark.parametrize("seed", range(5))
def test_the_loss_sums_over_every_choice_of_pronunciations(seed):
    """-log sum over the pronunciation choices of exp(-torch CTC loss), with the same gradient (sil as id 0's
    stand-in is remapped to a label id below)."""
    g = torch.Generator().manual_seed(100 + seed)
    V, T = 6, 16
    graphs, choice_sets = [], []
    for _ in range(3):
        words = [[torch.randint(2, V, (int(torch.randint(1, 3, (1,), generator=g)),), generator=g).tolist()
                  for _ in range(int(torch.randint(1, 4, (1,), generator=g)))]
                 for _ in range(int(torch.randint(1, 3, (1,), generator=g)))]
        words = [[list(a) for a in dict.fromkeys(tuple(a) for a in alts)] for alts in words]  # distinct alternatives
        tokens, preds, choices = words_graph(words)
        tokens = [1 if t == 0 else t for t in tokens]  # sil -> label 1 (0 is the blank)
        graphs.append((tokens, preds))
        choice_sets.append([[1 if t == 0 else t for t in c] for c in choices])
    tokens, n, preds = batch(graphs)
    frames = torch.tensor([T, T - 3, 12])
    logits = logits_for(seed, len(graphs), T, V)

    def brute(x):
        lp = x.log_softmax(-1)
        out = []
        for b, choices in enumerate(choice_sets):
            nll = torch.stack([torch.nn.functional.ctc_loss(lp[b:b + 1].transpose(0, 1), torch.tensor([c]),
                                                            frames[b:b + 1], torch.tensor([len(c)]),
                                                            reduction="sum", zero_infinity=False) for c in choices])
            out.append(-torch.logsumexp(-nll, dim=0))
        return torch.stack(out)

    ours, g_ours = value_and_grad(lambda x: ctc_loss_graph(x.log_softmax(-1), tokens, n, preds, frames,
                                                           reduction="none"), logits)
    ref, g_ref = value_and_grad(brute, logits)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-4, atol=1e-5)
    # each utterance alone gives the same loss as in the batch (padding of tokens, rows and width)
    for b, graph in enumerate(graphs):
        alone = ctc_loss_graph(logits[b:b + 1].log_softmax(-1), *batch([graph], pad_width=5)[:2],
                               batch([graph], pad_width=5)[2], frames[b:b + 1])
        torch.testing.assert_close(alone, ours[b], rtol=1e-5, atol=1e-4)


def test_an_utterance_too_short_for_every_path_is_inf_without_gradient():
    """Its loss is inf, and back-propagating the batch's summed loss (inf included, as training sums
    it) gives it no gradient and leaves the other utterance's gradient as it is alone."""
    tokens, n, preds = batch([([2, 3, 4], chain_predecessors(3))])
    logits = logits_for(0, 1, 2, 5)
    assert torch.isinf(ctc_loss_graph(logits.log_softmax(-1), tokens, n, preds, torch.tensor([2])))
    graphs = [([2], chain_predecessors(1)), ([2, 3, 4], chain_predecessors(3))]  # the second needs 3+ frames
    tokens, n, preds = batch(graphs)
    frames = torch.tensor([2, 2])
    loss, grad = value_and_grad(lambda x: ctc_loss_graph(x.log_softmax(-1), tokens, n, preds, frames,
                                                         reduction="none"), logits_for(1, 2, 2, 5))
    assert torch.isfinite(loss[0]) and torch.isinf(loss[1])
    assert torch.isfinite(grad).all() and (grad[1] == 0).all() and (grad[0] != 0).any()
    one = batch(graphs[:1])
    _, alone = value_and_grad(lambda x: ctc_loss_graph(x.log_softmax(-1), *one, frames[:1], reduction="none"),
                              logits_for(1, 2, 2, 5)[:1])
    torch.testing.assert_close(grad[0], alone[0])


def test_reductions_and_bad_shapes():
    graphs = [([2, 3], chain_predecessors(2)), ([4], chain_predecessors(1))]
    tokens, n, preds = batch(graphs)
    lp = logits_for(1, 2, 8, 5).log_softmax(-1)
    frames = torch.tensor([8, 6])
    each = ctc_loss_graph(lp, tokens, n, preds, frames, reduction="none")
    torch.testing.assert_close(ctc_loss_graph(lp, tokens, n, preds, frames), each.sum())
    torch.testing.assert_close(ctc_loss_graph(lp, tokens, n, preds, frames, reduction="mean"),
                               (each / n).mean())
    with pytest.raises(ValueError, match="predecessors must have shape"):
        ctc_loss_graph(lp, tokens, n, preds[:, :-1], frames)
    with pytest.raises(ValueError, match="reduction"):
        ctc_loss_graph(lp, tokens, n, preds, frames, reduction="max")


def test_graphs_from_labels():
    prons = {"THE": [["DH", "AH"], ["DH", "IY"]], "TO": [["T", "UW"], ["T"]], "TOE": [["T", "OW"]]}.get
    # sil kept where the labels have it, each word with all of its pronunciations
    tokens, preds = pronunciation_graph("sil DH IY sil T OW sil".split(), ["THE", "TOE"], prons)
    assert tokens == ["sil", "DH", "AH", "DH", "IY", "sil", "T", "OW", "sil"]
    assert preds == [[1], [2], [3], [2], [5], [4, 6], [7], [8], [9], [10]]
    # a prefix pronunciation that does not lead to a parse is backtracked over
    tokens, preds = pronunciation_graph("T UW T OW".split(), ["TO", "TOE"], prons)
    assert tokens == ["T", "UW", "T", "T", "OW"] and preds[-1] == [6]
    assert pronunciation_graph("T AH".split(), ["TO"], prons) is None  # not the words' pronunciations
    assert pronunciation_graph("T UW".split(), ["TO", "TOE"], prons) is None


def test_pronunciation_targets_skip_rows_with_one_pronunciation_per_word():
    rows = {"a": {"wrd": "AND THE CAT", "phn": "sil AE N D DH AH sil K AE T sil"},
            "b": {"wrd": "CAT", "phn": "sil K AE T sil"},
            "c": {"wrd": "AND", "phn": "sil EH N sil"}}  # another dictionary's pronunciation: no graph
    table = pronunciation_targets(rows, g2p="spn")
    assert set(table) == {"a"}
    tokens, preds = table["a"]
    assert tokens[:7] == ["sil", "AH", "N", "D", "AE", "N", "D"] and len(preds) == len(tokens) + 1


def test_dataio_prep_gives_training_targets_a_graph(tmp_path):
    from surprisal_cc.training.datasets import dataio_prep
    from surprisal_cc.errors import ConfigurationError
    from surprisal_cc.training.labels import label_encoder_for, phone_set

    manifest = write_label_manifest(tmp_path / "m.csv", {"u1": ("A CAT", "sil EY K AE T sil"),
                                                          "u2": ("CAT", "sil K AE T sil")})
    encoder = label_encoder_for(phone_set("librispeech"))
    hparams = {"label_encoder": encoder, "target_unit": "phone", "pronunciation_alternatives": True, "g2p": "spn"}
    datasets = dataio_prep(hparams, {"train": manifest, "valid": manifest}, cache=None)
    with datasets["train"].output_keys_as(["id", "tokens", "predecessors"]):
        items = {item["id"]: item for item in datasets["train"]}
    assert encoder.decode_ndim(items["u1"]["tokens"].tolist()) == "sil AH EY K AE T sil".split()
    assert items["u1"]["predecessors"].tolist() == [[1, 0], [2, 0], [2, 0], [3, 4], [5, 0], [6, 0], [7, 0], [8, 0]]
    # one pronunciation per word: the labels as a chain, as wide as the others
    assert items["u2"]["predecessors"].tolist() == [[1, 0], [2, 0], [3, 0], [4, 0], [5, 0], [6, 0]]
    with datasets["valid"].output_keys_as(["id", "tokens", "predecessors"]):  # validated against the same graphs
        assert {item["id"]: item["predecessors"].tolist() for item in datasets["valid"]} == {
            k: v["predecessors"].tolist() for k, v in items.items()}
    datasets = dataio_prep(hparams, {"train": manifest, "test": manifest}, cache=None)
    with datasets["test"].output_keys_as(["tokens"]):  # tested against the labels as they are
        assert encoder.decode_ndim(datasets["test"][0]["tokens"].tolist()) == "sil EY K AE T sil".split()
        assert "predecessors" not in datasets["test"][0]
    with pytest.raises(ConfigurationError, match="set one of them"):
        dataio_prep({**hparams, "optional_silence": True}, {"train": manifest}, cache=None)


@pytest.mark.integration
def test_recipe_trains_with_pronunciation_alternatives(mini_corpus):
    """The real recipe, one epoch: the graph loss on the training and validation batches, not in the test."""
    out, res = run_fbank_big_only_epoch(mini_corpus, "exp_prons", "ctc_loss_graph", pronunciation_alternatives=True)
    assert "of 6 training utterances (the others keep their labels)" in out
    assert "ctc_loss_graph calls: 4" in out  # 6 training and 6 validation utterances, batches of 4
    assert res["error_rate_details"]["num_utterances"] == 6 and res["PER"] > 0
