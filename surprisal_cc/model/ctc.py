"""CTC loss over label sequences with optional tokens, and optional-silence training targets.

Lexicon labels put ``sil`` only at the two ends of an utterance, while forced-aligner labels
(MFA) also mark the pauses between words. A model trained with plain CTC on lexicon labels learns
never to emit ``sil`` inside an utterance. :func:`ctc_loss_optional` sums instead over every
label sequence obtained by leaving out any subset of tokens flagged optional, as Kaldi's optional
silence in the lexicon does, so a ``sil`` at a pause between words is not penalised.
:func:`optional_silence_labels` builds such targets: an optional ``sil`` at every interior word
boundary, the two edge ``sil`` of the labels kept obligatory (MFA marks silence at both ends of
99 % of the dev-clean-2 utterances, and that silence teaches the model what ``sil`` sounds like).

Forced aligners also choose each word's pronunciation among their dictionary's, where lexicon
labels always take the first. :func:`ctc_loss_graph` sums over every label sequence of a graph of
tokens, and :func:`pronunciation_graph` builds the graph in which each word of an utterance may
take any of its pronunciations, so the model is never told which one a word was spoken with.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

NEG = -1e30  # log-probability of an impossible path: finite, so autograd never meets inf - inf
IMPOSSIBLE = NEG / 2  # a log-likelihood below this means no path fits
# Log-weights of a candidate below the best one are floored at FLOOR (e^-80 ~ 1.8e-35, invisible in
# float32 sums; the floored ones get no gradient): exp of large negative arguments is several
# times slower on the CPU.
FLOOR = -80.0

__all__ = ["utterance_mean_ctc_loss", "ctc_loss_graph", "ctc_loss_optional", "optional_silence_labels", "optional_silence_targets",
           "pronunciation_graph", "pronunciation_targets", "spoken_pronunciation_graph"]


def utterance_mean_ctc_loss(log_probs: Tensor, input_lengths: Tensor, tokens: Tensor, target_lengths: Tensor, *,
                            blank: int, predecessors: Optional[Tensor] = None,
                            optional: Optional[Tensor] = None) -> Tensor:
    """The recipes' training objective: the CTC loss of a batch summed over its utterances and divided
    by their number. Over every label sequence of a graph (``predecessors``: :func:`ctc_loss_graph`),
    over the sequences that leave out optional tokens (``optional``: :func:`ctc_loss_optional`), or
    torch's CTC of the one sequence ``tokens``.

    Example
    -------
    >>> log_probs = torch.randn(2, 6, 4).log_softmax(-1)
    >>> tokens, target_lengths = torch.tensor([[1, 2], [3, 0]]), torch.tensor([2, 1])
    >>> plain = utterance_mean_ctc_loss(log_probs, torch.tensor([6, 4]), tokens, target_lengths, blank=0)
    >>> none_optional = utterance_mean_ctc_loss(log_probs, torch.tensor([6, 4]), tokens, target_lengths, blank=0,
    ...                                         optional=torch.zeros(2, 2, dtype=torch.bool))
    >>> bool(torch.allclose(plain, none_optional, atol=1e-4))
    True
    """
    if predecessors is not None:
        total = ctc_loss_graph(log_probs, tokens, target_lengths, predecessors, input_lengths, blank=blank,
                               reduction="sum")
    elif optional is not None:
        total = ctc_loss_optional(log_probs, tokens, target_lengths, input_lengths, optional, blank=blank,
                                  reduction="sum")
    else:
        total = F.ctc_loss(log_probs.transpose(0, 1), tokens, input_lengths, target_lengths, blank=blank,
                           reduction="sum", zero_infinity=False)
    return total / tokens.shape[0]


def _transitions(targets: Tensor, target_lengths: Tensor, optional: Tensor, blank: int):
    """Masks of the forward recursion, computed once per batch.

    The states are the blank before token ``k`` (``k = 0 .. S``, the last one after the last token)
    and the label of token ``k``. Label ``k`` is entered from itself, from the blank before it, from
    label ``k - 1`` when the labels differ, and, when tokens ``k - j .. k - 1`` are all optional
    and left out, from the blank before token ``k - j`` and from label ``k - j - 1`` when the labels
    differ. A blank is entered from itself and from the label before it. A left-out token's own
    states are never visited, so each path through the states is one (variant, alignment) pair.

    Returns
    -------
    tok : Tensor (B, S)
        Targets with padding replaced by blank.
    mask : Tensor (2R+3, B, S)
        0 where label ``k`` may follow the candidate state, NEG elsewhere. Candidates, in order:
        label k, blank k, label k - 1, then blank k - j and label k - j - 1 for j = 1 .. R, the
        longest run of optional tokens.
    start, final_label, final_blank : Tensor bool
        First and last states: (B, S), (B, S), (B, S + 1).
    """
    B, S = targets.shape
    dev = targets.device
    pos = torch.arange(S + 1, device=dev)
    valid = pos[None, :S] < target_lengths[:, None]
    opt = torch.cat([optional & valid, torch.zeros(B, 1, dtype=torch.bool, device=dev)], dim=1)
    # run[b, k]: optional tokens right before position k (k = S_b: the optional tokens at the end)
    fixed_at = torch.where(opt, torch.full_like(pos[None], -1), pos[None]).cummax(dim=1).values
    run = pos[None] - 1 - F.pad(fixed_at[:, :-1], (1, 0), value=-1)
    R = int(run[:, :S].max()) if S else 0
    tok = torch.where(valid, targets, torch.full_like(targets, blank))

    allowed = torch.ones(2 * R + 3, B, S, dtype=torch.bool, device=dev)
    for j in range(R + 1):  # j optional tokens left out
        skippable = run[:, :S] >= j
        if j:
            allowed[2 * j + 1] = skippable  # blank before token k - j -> label k
        before = F.pad(tok, (j + 1, 0), value=-1)[:, :S]  # token k - j - 1 (-1 before the start)
        allowed[2 * j + 2] = skippable & (before != tok) & (before >= 0)
    mask = torch.where(allowed, 0.0, NEG).float()

    start = (run[:, :S] == pos[None, :S]) & valid  # every token before it optional
    n = target_lengths[:, None]
    first_final = n - run.gather(1, n)  # tokens after it all optional
    final_label = (pos[None, :S] >= first_final - 1) & valid
    final_blank = (pos[None] >= first_final) & (pos[None] <= n)
    return tok, mask, start, final_label, final_blank


def _checked_inputs(log_probs: Tensor, targets: Tensor, target_lengths, input_lengths, reduction: str):
    """Targets and lengths as long tensors on the device of ``log_probs`` (B, T, V), checked."""
    if reduction not in ("sum", "mean", "none"):
        raise ValueError(f"reduction must be sum, mean or none, got {reduction!r}")
    B, T, _ = log_probs.shape
    dev = log_probs.device
    targets = targets.to(dev).long()
    target_lengths = torch.as_tensor(target_lengths, device=dev).long()
    input_lengths = torch.as_tensor(input_lengths, device=dev).long()
    if targets.shape[0] != B or target_lengths.shape != (B,) or input_lengths.shape != (B,):
        raise ValueError("targets, target_lengths and input_lengths must have the batch size of log_probs")
    if B and (input_lengths.min() < 1 or input_lengths.max() > T or target_lengths.min() < 0
              or target_lengths.max() > targets.shape[1]):
        raise ValueError("input_lengths must be in [1, T] and target_lengths in [0, S]")
    return targets, target_lengths, input_lengths


def _reduce(loss: Tensor, target_lengths: Tensor, reduction: str) -> Tensor:
    """Per-utterance losses -> ``none``, ``mean`` (each over its target length, then the batch) or ``sum``."""
    if reduction == "none":
        return loss
    if reduction == "mean":
        return (loss / target_lengths.clamp(min=1)).mean()
    return loss.sum()


def ctc_loss_optional(log_probs: Tensor, targets: Tensor, target_lengths: Tensor, input_lengths: Tensor,
                      optional: Optional[Tensor] = None, blank: int = 0, reduction: str = "sum") -> Tensor:
    """CTC loss summed over every target variant without some of the optional tokens.

    ``-log sum_v P(v | x)`` over the ``2^k`` sequences ``v`` obtained by deleting any subset of the
    ``k`` tokens flagged in ``optional`` (one term per subset, even where two subsets give the same
    labels). Standard CTC rules hold in every variant: a blank is needed between equal neighbours,
    also when they meet because an optional token between them was left out. Without optional
    tokens this is ``torch.nn.functional.ctc_loss(..., zero_infinity=False)``. Forward algorithm in
    log space in float32 (also under autocast), vectorised over the batch and the states, with a
    Python loop over time; gradients by autograd.

    Arguments
    ---------
    log_probs : torch.Tensor
        (B, T, V) log-probabilities (batch first).
    targets : torch.Tensor
        (B, S) padded label ids (no blank).
    target_lengths : torch.Tensor
        (B,) tokens of each utterance (note the order: targets before frames).
    input_lengths : torch.Tensor
        (B,) frames of each utterance, at least 1.
    optional : torch.Tensor, optional
        (B, S) bool, tokens that may be left out; None: none.
    blank : int
        Blank id.
    reduction : str
        ``"sum"``, ``"mean"`` or ``"none"``. ``mean``: each loss divided by its target length
        (optional tokens included, at least 1), then averaged over the batch, as in torch.

    Returns
    -------
    torch.Tensor
        The loss; ``inf`` for an utterance that no variant fits in its frames (as
        ``zero_infinity=False``), whose gradient is then zero.

    Example
    -------
    >>> import torch
    >>> lp = torch.randn(2, 12, 5, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    >>> tgt, lens, frames = torch.tensor([[1, 2, 2, 3], [1, 2, 3, 0]]), torch.tensor([4, 3]), torch.tensor([12, 10])
    >>> plain = torch.nn.functional.ctc_loss(lp.transpose(0, 1), tgt, frames, lens, reduction="sum")
    >>> torch.allclose(ctc_loss_optional(lp, tgt, lens, frames), plain)
    True
    >>> opt = torch.tensor([[False, True, False, False], [False, False, False, False]])
    >>> bool(ctc_loss_optional(lp, tgt, lens, frames, opt) < plain)  # also sums over [1, 2, 3]
    True
    """
    B, T, V = log_probs.shape
    dev = log_probs.device
    targets, target_lengths, input_lengths = _checked_inputs(log_probs, targets, target_lengths, input_lengths,
                                                             reduction)
    optional = (torch.zeros_like(targets, dtype=torch.bool) if optional is None
                else optional.to(dev).bool())
    if optional.shape != targets.shape:
        raise ValueError(f"optional has shape {tuple(optional.shape)}, targets {tuple(targets.shape)}")
    if B == 0:
        return log_probs.new_zeros((0,) if reduction == "none" else (), dtype=torch.float32)

    with torch.autocast(device_type=dev.type, enabled=False):
        tok, mask, start, final_label, final_blank = _transitions(targets, target_lengths, optional, blank)
        S, R = tok.shape[1], (mask.shape[0] - 3) // 2
        steps = int(input_lengths.max())
        lp = log_probs[:, :steps].float().transpose(0, 1).clamp(min=NEG)  # (T, B, V)
        emit_label = lp.gather(2, tok[None].expand(steps, B, S)).unbind(0)
        emit_blank = lp[:, :, blank:blank + 1].unbind(0)
        label = torch.where(start, emit_label[0], NEG)
        blanks = torch.where(torch.arange(S + 1, device=dev) == 0, emit_blank[0], NEG)
        labels_seen, blanks_seen = [label], [blanks]
        for t in range(1, steps):
            lab = F.pad(label, (R + 1, 0), value=NEG)  # lab[:, R + 1 - i + k]: label k - i
            blk = F.pad(blanks[:, :S], (R, 0), value=NEG)  # blk[:, R - j + k]: blank before token k - j
            cand = [label, blanks[:, :S], lab[:, R:R + S]]
            for j in range(1, R + 1):
                cand += [blk[:, R - j:R - j + S], lab[:, R - j:R - j + S]]
            cand = torch.stack(cand) + mask
            top = cand.detach().amax(dim=0)  # log-sum-exp with the max taken out
            label = (cand - top).clamp(min=FLOOR).exp().sum(dim=0).log() + top + emit_label[t]
            blanks = torch.logaddexp(blanks, lab[:, R:R + S + 1]) + emit_blank[t]
            labels_seen.append(label)
            blanks_seen.append(blanks)
        last, rows = input_lengths - 1, torch.arange(B, device=dev)
        ends = torch.cat([torch.where(final_label, torch.stack(labels_seen)[last, rows], NEG),
                          torch.where(final_blank, torch.stack(blanks_seen)[last, rows], NEG)], dim=1)
        log_z = torch.logsumexp(ends, dim=1)
        loss = torch.where(log_z < IMPOSSIBLE, torch.full_like(log_z, float("inf")), -log_z)
    return _reduce(loss, target_lengths, reduction)


def optional_silence_labels(phones: Sequence[str], words: Sequence[str], pronounce: Callable[[str], Sequence[str]],
                            sil: str = "sil") -> Optional[Tuple[List[str], List[bool]]]:
    """Lexicon labels with an optional ``sil`` at every interior word boundary.

    Arguments
    ---------
    phones : sequence of str
        The words' pronunciations, one after the other, with or without a ``sil`` at each end
        (kept, obligatory).
    words : sequence of str
        The words of the utterance.
    pronounce : callable
        Word -> its phones (an empty sequence or None when unknown).
    sil : str
        The silence label.

    Returns
    -------
    tuple of (list of str, list of bool) or None
        Labels and their optional flags, or None when ``phones`` are not the words'
        pronunciations (MFA labels, for instance, which already mark their pauses).

    Example
    -------
    >>> prons = {"A": ["AH"], "CAT": ["K", "AE", "T"]}
    >>> optional_silence_labels("sil AH K AE T sil".split(), ["A", "CAT"], prons.get)
    (['sil', 'AH', 'sil', 'K', 'AE', 'T', 'sil'], [False, False, True, False, False, False, False])
    >>> optional_silence_labels("sil AH sil K AE T sil".split(), ["A", "CAT"], prons.get) is None
    True
    """
    phones = list(phones)
    head = phones[:1] if phones[:1] == [sil] else []
    body = phones[len(head):]
    tail = body[-1:] if body[-1:] == [sil] and words else []
    body = body[:len(body) - len(tail)]
    prons = [list(pronounce(w) or []) for w in words]
    if not all(prons) or [p for pron in prons for p in pron] != body:
        return None
    labels, flags = list(head), [False] * len(head)
    for i, pron in enumerate(prons):
        if i:
            labels.append(sil)
            flags.append(True)
        labels += pron
        flags += [False] * len(pron)
    return labels + tail, flags + [False] * len(tail)


def optional_silence_targets(rows: Mapping[str, Mapping[str, str]], g2p: str,
                             sil: str = "sil") -> Dict[str, Tuple[List[str], List[bool]]]:
    """:func:`optional_silence_labels` for the manifest rows (``wrd``, ``phn``) whose labels are lexicon labels.

    Rows with other labels (MFA) are left out: they keep their labels and get no optional token.

    Arguments
    ---------
    rows : mapping of str to mapping
        Utterance id -> manifest row with space-separated ``wrd`` and ``phn``.
    g2p : str
        The OOV policy the labels were built with (see
        :class:`~surprisal_cc.data.lexicon.Lexicon`).
    sil : str
        The silence label.

    Returns
    -------
    dict
        Utterance id -> (labels, optional flags), for the rows with lexicon labels only.
    """
    from surprisal_cc.data.errors import DataPreparationError
    from surprisal_cc.data.lexicon import Lexicon

    lexicon = Lexicon(g2p=g2p)
    lexicon.prefetch(w for row in rows.values() for w in row["wrd"].split())
    prons: Dict[str, List[str]] = {}

    def pronounce(word: str) -> List[str]:
        if word not in prons:
            try:
                prons[word] = lexicon.words_to_phones([word], add_boundary_silence=False)
            except DataPreparationError:  # g2p="error" and an OOV word: not lexicon labels
                prons[word] = []
        return prons[word]

    table = {}
    for utt_id, row in rows.items():
        got = optional_silence_labels(row["phn"].split(), row["wrd"].split(), pronounce, sil)
        if got is not None:
            table[utt_id] = got
    return table


GRAPH_PAD = 0  # predecessor codes (see ctc_loss_graph): 0 none (padding), 1 the start, k + 2 token k
GRAPH_START = 1


def ctc_loss_graph(log_probs: Tensor, tokens: Tensor, target_lengths: Tensor, predecessors: Tensor,
                   input_lengths: Tensor, blank: int = 0, reduction: str = "sum") -> Tensor:
    """CTC loss summed over every label sequence of a graph of tokens.

    ``-log sum_v P(v | x)`` over the paths ``v`` through the graph: token ``k`` may follow any of
    its predecessors, which come earlier in ``tokens`` (topological order). Standard CTC rules
    along every edge: a blank is needed between equal labels. A chain (each token after the one
    before) is ``torch.nn.functional.ctc_loss(..., zero_infinity=False)``. Forward algorithm in log
    space in float32 (also under autocast), vectorised over the batch and the CTC states, with a
    Python loop over time; gradients by autograd.

    Arguments
    ---------
    log_probs : torch.Tensor
        (B, T, V) log-probabilities (batch first).
    tokens : torch.Tensor
        (B, N) label ids of the graph's tokens (no blank), padded.
    target_lengths : torch.Tensor
        (B,) tokens of each graph.
    predecessors : torch.Tensor
        (B, N + 1, K) integer codes: row ``k < n`` lists the predecessors of token ``k``, row ``n``
        (the graph's own token count) the tokens a path may end with. Code 0 is padding, 1 the
        start of the utterance (in row ``n``: the empty sequence), ``j + 2`` token ``j``.
    input_lengths : torch.Tensor
        (B,) frames of each utterance, at least 1.
    blank : int
        Blank id.
    reduction : str
        ``"sum"``, ``"mean"`` (each loss divided by its graph's token count, then averaged) or ``"none"``.

    Returns
    -------
    torch.Tensor
        The loss; ``inf`` for an utterance that no path fits in its frames, whose gradient is then zero.

    Example
    -------
    One word said as [1, 2] or [3]: the loss sums the two sequences' likelihoods.

    >>> import torch
    >>> lp = torch.randn(1, 6, 4, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    >>> tokens, n, frames = torch.tensor([[1, 2, 3]]), torch.tensor([3]), torch.tensor([6])
    >>> preds = torch.tensor([[[1, 0], [2, 0], [1, 0], [3, 4]]])  # start -> 1 -> 2, start -> 3; ends: 2 or 3
    >>> both = ctc_loss_graph(lp, tokens, n, preds, frames)
    >>> ctc = lambda y: torch.nn.functional.ctc_loss(lp.transpose(0, 1), torch.tensor([y]), frames,
    ...                                              torch.tensor([len(y)]), reduction="sum")
    >>> torch.allclose(both, -torch.logaddexp(-ctc([1, 2]), -ctc([3])))
    True
    """
    B, T, V = log_probs.shape
    dev = log_probs.device
    tokens, target_lengths, input_lengths = _checked_inputs(log_probs, tokens, target_lengths, input_lengths,
                                                            reduction)
    predecessors = predecessors.to(dev).long()
    N = tokens.shape[1]
    if predecessors.dim() != 3 or predecessors.shape[:2] != (B, N + 1):
        raise ValueError(f"predecessors must have shape (B, N + 1, K) = ({B}, {N + 1}, K), "
                         f"got {tuple(predecessors.shape)}")
    if B == 0:
        return log_probs.new_zeros((0,) if reduction == "none" else (), dtype=torch.float32)

    with torch.autocast(device_type=dev.type, enabled=False):
        S = 2 * N + 1  # state 0: the blank before every token; 2k + 1: token k; 2k + 2: the blank after it
        rows, k = torch.arange(B, device=dev), torch.arange(N, device=dev)
        tok = torch.where(k[None] < target_lengths[:, None], tokens, torch.full_like(tokens, blank))
        pred = predecessors - 2  # -2 none, -1 start, j token j
        node_pred = pred[:, :N]
        K = node_pred.shape[2]
        from_blank = torch.where(node_pred >= -1, 2 * node_pred + 2, S)
        pred_tok = tok.gather(1, node_pred.clamp(min=0).reshape(B, -1)).reshape(B, N, K)
        from_label = torch.where((node_pred >= 0) & (pred_tok != tok[:, :, None]), 2 * node_pred + 1, S)
        stay = (2 * k + 1).expand(B, N)[:, :, None]
        label_in = torch.cat([stay, from_blank, from_label], dim=2)  # (B, N, 1 + 2K)
        blank_in = torch.full_like(label_in, S)
        blank_in[:, :, 0], blank_in[:, :, 1] = 2 * k + 2, 2 * k + 1
        start_in = torch.full_like(label_in[:, :1], S)
        start_in[:, :, 0] = 0
        incoming = torch.cat([start_in, torch.stack([label_in, blank_in], dim=2).reshape(B, 2 * N, -1)], dim=1)
        flat = incoming.reshape(B, -1)

        ends = pred[rows, target_lengths]  # (B, K)
        final = torch.zeros(B, S + 1, dtype=torch.bool, device=dev)
        valid_end = ends >= -1
        final.scatter_(1, torch.where(valid_end, 2 * ends + 2, S), True)
        final.scatter_(1, torch.where(ends >= 0, 2 * ends + 1, S), True)
        final = final[:, :S]

        ext = torch.full((B, S), blank, dtype=torch.long, device=dev)
        ext[:, 1::2] = tok
        steps = int(input_lengths.max())
        lp = log_probs[:, :steps].float().clamp(min=NEG)
        emit = lp.gather(2, ext[:, None].expand(B, steps, S)).unbind(1)
        alpha = torch.full((B, S + 1), NEG, device=dev)
        alpha[:, 0] = 0.0  # before the first frame: in the start state
        sentinel = alpha[:, S:]
        seen = []
        for t in range(steps):
            cand = alpha.gather(1, flat).reshape(B, S, -1)
            top = cand.detach().amax(dim=2, keepdim=True)
            state = (cand - top).clamp(min=FLOOR).exp().sum(dim=2).log() + top[:, :, 0] + emit[t]
            seen.append(state)
            alpha = torch.cat([state, sentinel], dim=1)
        last = torch.stack(seen)[input_lengths - 1, rows]  # (B, S)
        log_z = torch.logsumexp(torch.where(final, last, NEG), dim=1)
        loss = torch.where(log_z < IMPOSSIBLE, torch.full_like(log_z, float("inf")), -log_z)
    return _reduce(loss, target_lengths, reduction)


def pronunciation_graph(phones: Sequence[str], words: Sequence[str],
                        pronunciations: Callable[[str], Sequence[Sequence[str]]],
                        sil: str = "sil") -> Optional[Tuple[List[str], List[List[int]]]]:
    """The graph of an utterance's labels in which every word may take any of its pronunciations.

    ``phones`` must be the words' pronunciations in order (one of each word's), with ``sil``
    anywhere between or around them (realigned labels, for instance); each ``sil`` is kept where it
    is. The tokens are, in order, each ``sil`` and every pronunciation of every word.

    Arguments
    ---------
    phones : sequence of str
        Labels of the utterance.
    words : sequence of str
        Its words.
    pronunciations : callable
        Word -> its pronunciations (e.g. ``Lexicon.pronunciations``).
    sil : str
        The silence label.

    Returns
    -------
    tuple of (list of str, list of list of int) or None
        Tokens and predecessor lists with one more entry for the ends, coded as for
        :func:`ctc_loss_graph` (1: the start, ``j + 2``: token ``j``); None when the labels are
        not the words' pronunciations.

    Example
    -------
    >>> prons = {"A": [["AH"], ["EY"]], "CAT": [["K", "AE", "T"]]}.get
    >>> tokens, preds = pronunciation_graph("sil EY K AE T".split(), ["A", "CAT"], prons)
    >>> tokens
    ['sil', 'AH', 'EY', 'K', 'AE', 'T']
    >>> preds  # AH and EY follow sil; K follows either; the path ends at T
    [[1], [2], [2], [3, 4], [5], [6], [7]]
    >>> pronunciation_graph("sil AE K AE T".split(), ["A", "CAT"], prons) is None
    True
    """
    phones = list(phones)
    prons = [[list(p) for p in (pronunciations(w) or [])] for w in words]

    def parse(i: int, w: int) -> Optional[List[Tuple[int, int]]]:
        """The ``[start, end)`` span of each word in ``phones[i:]`` from word ``w`` on (sil between), or None."""
        while i < len(phones) and phones[i] == sil:
            i += 1
        if w == len(words):
            return [] if i == len(phones) else None
        for pron in prons[w]:
            if phones[i:i + len(pron)] == pron:
                rest = parse(i + len(pron), w + 1)
                if rest is not None:
                    return [(i, i + len(pron))] + rest
        return None

    spans = parse(0, 0)
    return None if spans is None else _word_graph(phones, spans, prons, sil)


def spoken_pronunciation_graph(phones: Sequence[str], spoken: Sequence[Tuple[str, Sequence[str]]],
                               pronunciations: Callable[[str], Sequence[Sequence[str]]],
                               sil: str = "sil") -> Optional[Tuple[List[str], List[List[int]]]]:
    """:func:`pronunciation_graph` for labels whose words were pronounced by someone else (MFA):
    each word may take the phones it was labelled with or any of its pronunciations.

    Arguments
    ---------
    phones : sequence of str
        Labels of the utterance: each word's labelled phones in order, ``sil`` between or around them.
    spoken : sequence of (str, sequence of str)
        Each word with its labelled phones (e.g. :func:`surprisal_cc.data.mfa.read_word_phones`).
    pronunciations : callable
        Word -> its pronunciations (e.g. ``Lexicon.pronunciations``).
    sil : str
        The silence label.

    Returns
    -------
    tuple of (list of str, list of list of int) or None
        As for :func:`pronunciation_graph`; None when ``phones`` are not the words' phones.

    Example
    -------
    >>> prons = {"A": [["AH"], ["EY"]], "CAT": [["K", "AE", "T"]]}.get
    >>> tokens, preds = spoken_pronunciation_graph("sil IH K AE T".split(), [("A", ["IH"]), ("CAT", ["K", "AE", "T"])], prons)
    >>> tokens  # "A" as labelled (IH) or as the lexicon has it
    ['sil', 'IH', 'AH', 'EY', 'K', 'AE', 'T']
    """
    phones = list(phones)
    spans, prons, i = [], [], 0
    for word, labelled in spoken:
        labelled = list(labelled)
        while i < len(phones) and phones[i] == sil:
            i += 1
        if not labelled or phones[i:i + len(labelled)] != labelled:
            return None
        spans.append((i, i + len(labelled)))
        prons.append([labelled] + [list(p) for p in pronunciations(word) or [] if list(p) != labelled])
        i += len(labelled)
    if any(p != sil for p in phones[i:]):
        return None
    return _word_graph(phones, spans, prons, sil)


def _word_graph(phones: List[str], spans: Sequence[Tuple[int, int]], prons: Sequence[Sequence[Sequence[str]]],
                sil: str) -> Tuple[List[str], List[List[int]]]:
    """The token graph of labels whose word ``w`` spans ``phones[start:end]`` (``spans[w]``) and may
    take any of ``prons[w]``; each ``sil`` stays where it is."""
    tokens: List[str] = []
    preds: List[List[int]] = []
    ends = [GRAPH_START]
    position = 0
    for w, (start, end) in enumerate(list(spans) + [(len(phones), len(phones))]):
        for _ in range(start - position):  # the sil before word w (after the last word at the end)
            preds.append(ends)
            tokens.append(sil)
            ends = [len(tokens) - 1 + 2]
        if w == len(spans):
            break
        word_ends = []
        for pron in prons[w]:
            for j, phone in enumerate(pron):
                preds.append(list(ends) if j == 0 else [len(tokens) - 1 + 2])
                tokens.append(phone)
            word_ends.append(len(tokens) - 1 + 2)
        ends = word_ends
        position = end
    return tokens, preds + [ends]


def pronunciation_targets(rows: Mapping[str, Mapping[str, str]], g2p: str,
                          sil: str = "sil") -> Dict[str, Tuple[List[str], List[List[int]]]]:
    """:func:`pronunciation_graph` for the manifest rows (``wrd``, ``phn``) whose labels are their
    words' CMUdict pronunciations (lexicon labels, realigned labels); only the rows with a word of
    several pronunciations, as the others are plain sequences.

    Arguments
    ---------
    rows : mapping of str to mapping
        Utterance id -> manifest row with space-separated ``wrd`` and ``phn``.
    g2p : str
        The OOV policy the labels were built with (see :class:`~surprisal_cc.data.lexicon.Lexicon`).
    sil : str
        The silence label.

    Returns
    -------
    dict
        Utterance id -> (tokens, predecessor lists).
    """
    pronounce = lexicon_pronunciations(g2p, (w for row in rows.values() for w in row["wrd"].split()))
    table = {}
    for utt_id, row in rows.items():
        words = row["wrd"].split()
        if all(len(pronounce(w)) < 2 for w in words):
            continue
        got = pronunciation_graph(row["phn"].split(), words, pronounce, sil)
        if got is not None:
            table[utt_id] = got
    return table


def lexicon_pronunciations(g2p: str, words: Iterable[str] = ()) -> Callable[[str], List[List[str]]]:
    """Word -> its CMUdict pronunciations (``Lexicon.pronunciations``, remembered), with the OOV
    policy ``g2p``; none for an OOV word under ``g2p="error"``. ``words`` are looked up at once."""
    from surprisal_cc.data.errors import DataPreparationError
    from surprisal_cc.data.lexicon import Lexicon

    lexicon = Lexicon(g2p=g2p)
    lexicon.prefetch(words)
    prons: Dict[str, List[List[str]]] = {}

    def pronounce(word: str) -> List[List[str]]:
        if word not in prons:
            try:
                prons[word] = lexicon.pronunciations(word)
            except DataPreparationError:  # g2p="error" and an OOV word
                prons[word] = []
        return prons[word]

    return pronounce


def chain_predecessors(n: int) -> List[List[int]]:
    """Predecessor lists (codes of :func:`ctc_loss_graph`) of a plain sequence of ``n`` tokens.

    Example
    -------
    >>> chain_predecessors(3), chain_predecessors(0)
    ([[1], [2], [3], [4]], [[1]])
    """
    if n == 0:
        return [[GRAPH_START]]  # only the ends: the empty sequence
    return [[GRAPH_START]] + [[k + 1] for k in range(1, n)] + [[n + 1]]


def graph_tensor(predecessors: Sequence[Sequence[int]], width: Optional[int] = None) -> Tensor:
    """(N + 1, K) int tensor of predecessor lists (codes of :func:`ctc_loss_graph`), padded with 0
    to ``width`` columns (default: the longest list; a batch's tensors need one width).

    Example
    -------
    >>> graph_tensor([[1], [2], [1], [3, 4]]).tolist()
    [[1, 0], [2, 0], [1, 0], [3, 4]]
    >>> graph_tensor([[1], [2]], width=3).tolist()
    [[1, 0, 0], [2, 0, 0]]
    """
    width = width or max(len(p) for p in predecessors)
    return torch.tensor([list(p) + [GRAPH_PAD] * (width - len(p)) for p in predecessors], dtype=torch.long)
