"""CTC decoding: greedy and prefix beam search (no language model).

Everything here takes ``log_probs`` of shape ``[B, T, V]`` (log-softmax outputs
of a CTC model: a numpy array, or a torch tensor on any device) and integer frame
counts ``lengths`` of shape ``[B]`` (an array, a tensor or a sequence of int; where
optional, None means all ``T`` frames); frames at or beyond an utterance's length
are never read. The greedy and the native beam search run on numpy alone: this
module imports no torch (the ONNX runtime decodes with it); the third-party
backends (:mod:`surprisal_cc.decoding.backends`) import it when called. Decoders
return one label-id sequence per utterance (a list of lists of int), blanks
removed and repeats collapsed by the CTC rules.

Example
-------
>>> import torch
>>> lp = torch.log(torch.tensor([[[0.1, 0.8, 0.1], [0.8, 0.1, 0.1],
...                               [0.1, 0.8, 0.1], [0.9, 0.05, 0.05]]]))
>>> ctc_greedy_decode(lp, torch.tensor([4]))
[[1, 1]]
>>> CTCBeamSearch(blank=0, beam_size=4, backend="native")(lp, torch.tensor([4]))
[[1, 1]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

Array = Union["Tensor", np.ndarray]

__all__ = [
    "ctc_greedy_decode",
    "CTCBeamSearch",
    "available_backends",
    "missing_backend",
    "BACKEND_NAMES",
    "prefix_beam_search_native",
]

_NEG_INF = -math.inf
BACKENDS = ("native", "torchaudio", "speechbrain")
# what CTCBeamSearch's backend may be (auto: native)
BACKEND_NAMES = ("auto", *BACKENDS, "speechbrain_prefix")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def as_array(values: Any) -> np.ndarray:
    """A numpy array of a numpy array, a sequence, or a torch tensor on any device (bf16/fp16 as float32).

    Example
    -------
    >>> as_array([[1, 2]]).shape
    (1, 2)
    """
    if hasattr(values, "detach"):  # a torch tensor, without importing torch
        values = values.detach().cpu()
        if values.is_floating_point() and values.dtype.itemsize < 4:
            values = values.float()
        values = values.numpy()
    return np.asarray(values)


def _as_lengths(log_probs: Array, lengths: Array | Sequence[int] | None) -> list[int]:
    """Checked integer frame counts, one per utterance (all ``T`` when ``lengths`` is None)."""
    B, T = int(log_probs.shape[0]), int(log_probs.shape[1])
    if lengths is None:
        return [T] * B
    lens = as_array(lengths).reshape(-1)
    if np.issubdtype(lens.dtype, np.floating):
        # SpeechBrain's relative lengths of equal-length utterances are all 1.0: not one frame each
        if np.any(lens != np.round(lens)) or (T > 1 and len(lens) and bool(np.all(lens <= 1.0))):
            raise ValueError(
                "lengths must be integer frame counts (got fractional values, or floats all <= 1 that read "
                "as SpeechBrain relative lengths; convert those with (rel * T).round())"
            )
        lens = np.round(lens)
    out = [int(x) for x in lens.astype(np.int64).tolist()]
    if len(out) != B:
        raise ValueError(f"lengths has {len(out)} entries for a batch of {B}")
    if any(x < 0 or x > T for x in out):
        raise ValueError(f"lengths must lie in [0, {T}], got {out}")
    return out


def _collapse(path: Sequence[int], blank: int) -> list[int]:
    """Label sequence of a frame path: repeats collapsed, blanks removed."""
    out: list[int] = []
    prev = None
    for p in path:
        if p != prev and p != blank:
            out.append(int(p))
        prev = p
    return out


def ctc_greedy_decode(
    log_probs: Array, lengths: Array | Sequence[int] | None = None, blank: int = 0
) -> list[list[int]]:
    """Best-path decoding: per-frame argmax, collapse repeats, drop blanks.

    ``log_probs``, ``lengths`` and the returned label ids: see the module docstring.

    Arguments
    ---------
    blank : int
        Blank label id.

    Example
    -------
    >>> import torch
    >>> lp = torch.log_softmax(torch.tensor([[[0., 5, 0], [0, 5, 0], [5, 0, 0],
    ...                                       [0, 5, 0], [0, 0, 5]]]), -1)
    >>> ctc_greedy_decode(lp, torch.tensor([5])), ctc_greedy_decode(lp, torch.tensor([4]))
    ([[1, 1, 2]], [[1, 1]])
    """
    lens = _as_lengths(log_probs, lengths)
    best = as_array(log_probs).argmax(axis=-1).tolist()
    return [_collapse(best[b][: lens[b]], blank) for b in range(len(lens))]


# --------------------------------------------------------------------------
# native prefix beam search (numpy, vectorised over batch x beam x labels)
# --------------------------------------------------------------------------
# Beam slots hold trie ids. A slot that holds no prefix (while the beam is not
# yet full) has id _NO_ID; the parent of the root and of an empty slot is
# _NO_PARENT. Both are negative and differ from each other, so they never match
# a trie id (>= 0) or each other when extensions are merged.
_NO_ID, _NO_PARENT = -1, -3


class _PrefixTrie:
    """Prefixes (collapsed label sequences) as trie nodes, shared by a batch.

    Node 0 is the root, the empty prefix; every other node is its parent's
    prefix plus one label. A prefix gets its id once, so equal prefixes have
    equal ids, in any utterance and at any frame.

    Attributes
    ----------
    parent : list of int
        Parent id per node (-1 for the root).
    label : list of int
        Last label per node (-1 for the root).
    """

    def __init__(self) -> None:
        self.parent: list[int] = [-1]
        self.label: list[int] = [-1]
        self._ids: dict[tuple[int, int], int] = {}  # (parent id, label) -> id

    def children(self, parents: list[int], labels: list[int]) -> list[int]:
        """Id of each prefix ``parent`` extended by ``label`` (a new node the first time), for the
        ``(parent, label)`` pairs of one frame."""
        ids, out = self._ids, []
        for key in zip(parents, labels):
            nid = ids.get(key)
            if nid is None:
                nid = len(self.parent)
                ids[key] = nid
                self.parent.append(key[0])
                self.label.append(key[1])
            out.append(nid)
        return out

    def labels(self, node: int) -> list[int]:
        """Label sequence of prefix ``node`` (empty for the root or a negative id)."""
        seq: list[int] = []
        while node > 0:
            seq.append(self.label[node])
            node = self.parent[node]
        return seq[::-1]


@dataclass
class _Beams:
    """The beams of a batch: ``[n, K]`` arrays, a row per utterance, a column per slot.

    Attributes
    ----------
    pb, pnb : numpy.ndarray
        Log scores of the paths that give the prefix and end in blank / in its last label.
    last : numpy.ndarray
        Last label of the prefix, -1 if empty.
    ids : numpy.ndarray
        Trie id of the prefix (``_NO_ID``: no prefix).
    parent : numpy.ndarray
        Trie id of the prefix without its last label (``_NO_PARENT``: root or no prefix).
    """

    pb: np.ndarray
    pnb: np.ndarray
    last: np.ndarray
    ids: np.ndarray
    parent: np.ndarray

    @classmethod
    def start(cls, B: int, K: int) -> _Beams:
        """Beams before the first frame: the empty prefix in slot 0 (log score 0, in ``pb``)."""
        pb = np.full((B, K), _NEG_INF)
        pb[:, 0] = 0.0
        ids = np.full((B, K), _NO_ID, dtype=np.int64)
        ids[:, 0] = 0  # root (empty prefix)
        return cls(
            pb=pb,
            pnb=np.full((B, K), _NEG_INF),
            last=np.full((B, K), -1, dtype=np.int64),
            ids=ids,
            parent=np.full((B, K), _NO_PARENT, dtype=np.int64),
        )

    def split(self, n: int) -> tuple[_Beams, _Beams]:
        """The first ``n`` rows and the others (views)."""
        fields = (self.pb, self.pnb, self.last, self.ids, self.parent)
        return _Beams(*(a[:n] for a in fields)), _Beams(*(a[n:] for a in fields))

    @classmethod
    def concat(cls, parts: list[_Beams]) -> _Beams:
        """The rows of all ``parts``, in order."""
        names = ("pb", "pnb", "last", "ids", "parent")
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in names))


def _continuation_scores(
    beams: _Beams, x: np.ndarray, blank: int, rows: np.ndarray, slot_offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log scores of one frame's continuations of every beam prefix.

    ``x`` is the frame's ``[n, V]`` log posteriors, ``rows`` is ``arange(n)[:, None]``
    and ``slot_offsets[i, k]`` the flat offset ``(i * K + k) * V`` of ``ext[i, k]``.

    Returns
    -------
    stay_b, stay_nb : numpy.ndarray
        ``[n, K]``: prefix kept by a blank / by a repeat of its last label.
    ext : numpy.ndarray
        ``[n, K, V]``: prefix extended by label ``c`` (``-inf`` for ``c = blank``).
    """
    tot = np.logaddexp(beams.pb, beams.pnb)  # [n, K]
    has_last = beams.last >= 0
    # the empty prefix has no last label: point it at the blank column, overwritten below
    last_c = np.where(has_last, beams.last, blank)
    x_last = x[rows, last_c]  # [n, K]

    # extensions by one label; repeating the last label is only possible from pb
    ext = tot[:, :, None] + x[:, None, :]  # [n, K, V]
    ext.reshape(-1)[slot_offsets + last_c] = beams.pb + x_last
    ext[:, :, blank] = _NEG_INF
    # prefixes kept unchanged
    stay_b = tot + x[:, blank, None]
    stay_nb = np.where(has_last, beams.pnb + x_last, _NEG_INF)
    return stay_b, stay_nb, ext


def _merge_recreated(beams: _Beams, stay_nb: np.ndarray, ext: np.ndarray) -> None:
    """Merge extensions that recreate a prefix already in the beam (in place).

    Slot ``k`` extended by label ``c`` gives the prefix of slot ``j`` when
    ``ids[k] == parent[j]`` and ``c == last[j]``. That extension is log-sum-exp
    added to ``stay_nb[j]`` and set to ``-inf`` in ``ext``, so that every
    prefix is a single candidate.
    """
    valid_id = beams.ids >= 0
    match = (beams.ids[:, :, None] == beams.parent[:, None, :]) & valid_id[:, :, None]
    mb, mk, mj = np.nonzero(match)
    if mb.size:
        mc = beams.last[mb, mj]
        stay_nb[mb, mj] = np.logaddexp(stay_nb[mb, mj], ext[mb, mk, mc])
        ext[mb, mk, mc] = _NEG_INF


def _select_best(
    beams: _Beams, stay_b: np.ndarray, stay_nb: np.ndarray, ext: np.ndarray, rows: np.ndarray
) -> tuple[_Beams, np.ndarray, np.ndarray]:
    """The ``K`` best candidates per row by total log score (in no particular order).

    The candidates of a row are its ``K`` kept prefixes (column ``k``) followed by
    its ``K * V`` extensions (column ``K + k * V + c``).

    Returns
    -------
    new : _Beams
        The selected prefixes; ids are ``_NO_ID`` for extensions (see ``_assign_new_ids``).
    is_stay : numpy.ndarray
        ``[n, K]`` bool: the slot holds a kept prefix.
    top_score : numpy.ndarray
        ``[n, K]`` total log score of the slot (``-inf``: no live candidate).
    """
    n, K, V = ext.shape
    n_cand = K + K * V
    stay_tot = np.logaddexp(stay_b, stay_nb)
    cand = np.concatenate([stay_tot, ext.reshape(n, K * V)], axis=1)
    top = np.argpartition(cand, n_cand - K, axis=1)[:, n_cand - K:]  # [n, K] best
    top_score = cand[rows, top]
    is_stay = top < K
    ext_k, ext_c = np.divmod(np.maximum(top - K, 0), V)  # extension: slot k, label c
    src = np.where(is_stay, top, ext_k)  # slot of the prefix the candidate comes from
    src_ids = beams.ids[rows, src]
    new = _Beams(
        pb=np.where(is_stay, stay_b[rows, src], _NEG_INF),
        pnb=np.where(is_stay, stay_nb[rows, src], top_score),
        last=np.where(is_stay, beams.last[rows, src], ext_c),
        ids=np.where(is_stay, src_ids, _NO_ID),
        parent=np.where(is_stay, beams.parent[rows, src], src_ids),
    )
    return new, is_stay, top_score


def _assign_new_ids(new: _Beams, is_new: np.ndarray, trie: _PrefixTrie) -> None:
    """Give the slots in ``is_new`` the canonical trie id of their prefix (in place)."""
    eb, ek = np.nonzero(is_new)
    if eb.size:
        new.ids[eb, ek] = trie.children(new.parent[eb, ek].tolist(), new.last[eb, ek].tolist())


def _beam_step(
    beams: _Beams,
    x: np.ndarray,
    blank: int,
    trie: _PrefixTrie,
    rows: np.ndarray,
    slot_offsets: np.ndarray,
) -> _Beams:
    """The beams after one more frame ``x`` (``[n, V]`` log posteriors, a row per utterance).

    ``rows`` and ``slot_offsets``: see ``_continuation_scores``.
    """
    stay_b, stay_nb, ext = _continuation_scores(beams, x, blank, rows, slot_offsets)
    _merge_recreated(beams, stay_nb, ext)
    new, is_stay, top_score = _select_best(beams, stay_b, stay_nb, ext, rows)
    alive = top_score > _NEG_INF
    _assign_new_ids(new, ~is_stay & alive, trie)
    if not alive.all():  # fewer than K live candidates (the first frames)
        dead = ~alive
        new.ids[dead] = _NO_ID
        new.parent[dead] = _NO_PARENT
        new.pb[dead] = _NEG_INF
        new.pnb[dead] = _NEG_INF
    return new


def _best_prefixes(beams: _Beams, trie: _PrefixTrie, order: np.ndarray) -> list[list[int]]:
    """Label sequence of each row's best prefix, put back in the input order.

    Row ``i`` of ``beams`` is utterance ``order[i]`` of the input.
    """
    final = np.logaddexp(beams.pb, beams.pnb)
    best = np.argmax(final, axis=1)
    results: list[list[int]] = [[] for _ in range(len(best))]
    for i, b in enumerate(order.tolist()):
        results[b] = trie.labels(int(beams.ids[i, best[i]]))
    return results


def prefix_beam_search_native(
    log_probs: np.ndarray, lengths: Sequence[int], blank: int = 0, beam_size: int = 10
) -> list[list[int]]:
    """CTC prefix beam search (Graves 2012 / Hannun et al. 2014), no LM.

    The beam holds ``beam_size`` distinct *prefixes* (collapsed label
    sequences). Each prefix keeps two log scores: paths ending in blank
    (``pb``) and ending in its last label (``pnb``). Per frame, every beam
    prefix is either kept (blank, or a repeat of its last label) or extended by
    one label ``c`` (a repeat of the last label only from ``pb``); extensions
    that reproduce a prefix already in the beam are log-sum-exp merged into it;
    then the best ``beam_size`` prefixes by ``logaddexp(pb, pnb)`` are kept.
    The result is the best prefix at the end. All work per frame is a handful
    of numpy operations on ``[B, K, V]`` arrays.

    Arguments
    ---------
    log_probs : numpy.ndarray
        ``[B, T, V]`` log posteriors (converted to float64).
    lengths : sequence of int
        Frame count per utterance.
    blank : int
        Blank label id.
    beam_size : int
        Number of prefixes kept per frame (``K``).

    Returns
    -------
    list of list of int
        The best label sequence per utterance.

    Example
    -------
    >>> import numpy as np
    >>> import torch
    >>> lp = np.log(np.array([[[0.6, 0.4], [0.6, 0.4], [0.6, 0.4]]]))
    >>> prefix_beam_search_native(lp, [3], beam_size=4)  # P([1]) = 0.688 > P([]) = 0.216
    [[1]]
    >>> ctc_greedy_decode(torch.from_numpy(lp))  # the best path is all blanks
    [[]]
    """
    lp_all = np.asarray(log_probs, dtype=np.float64)
    B, T, V = lp_all.shape
    K = int(beam_size)
    if K < 1:
        raise ValueError("beam_size must be >= 1")
    if not 0 <= blank < V:
        raise ValueError(f"blank={blank} outside [0, {V})")
    lens = np.asarray(lengths, dtype=np.int64)
    # Sort by decreasing length so the utterances still running at frame t
    # are always the first n_active rows.
    order = np.argsort(-lens, kind="stable")
    lp_all = lp_all[order]
    lens_sorted = lens[order]
    n_active = np.searchsorted(-lens_sorted, -np.arange(int(lens_sorted.max(initial=0))), side="left")  # lens > t

    trie = _PrefixTrie()
    beams = _Beams.start(B, K)  # one row per utterance still running
    ended: list[_Beams] = []  # final beams of the utterances that ended, shortest first
    rows = np.arange(B)[:, None]
    # flat offset of (row, beam k) in a [n, K, V] array: (row * K + k) * V
    slot_offsets = (np.arange(B * K) * V).reshape(B, K)
    with np.errstate(invalid="ignore"):
        for t, n in enumerate(n_active.tolist()):
            if n < len(rows):  # the utterances of length t end: set their rows aside
                beams, done = beams.split(n)
                ended.append(done)
                rows, slot_offsets = rows[:n], slot_offsets[:n]
            beams = _beam_step(beams, lp_all[:n, t, :], blank, trie, rows, slot_offsets)
    return _best_prefixes(_Beams.concat([beams] + ended[::-1]), trie, order)


# --------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------
def missing_backend(backend: str) -> str | None:
    """What ``backend`` (one of :data:`BACKEND_NAMES`) needs and this environment lacks, in words; None
    where it runs here.

    Example
    -------
    >>> missing_backend("native") is None
    True
    """
    if backend == "torchaudio" and not _runs("torchaudio_available"):
        return "torchaudio ctc_decoder (flashlight-text) is not available"
    if backend.startswith("speechbrain") and not _runs("speechbrain_available"):
        return "speechbrain is not available"
    return None


def _runs(check: str) -> bool:
    """``surprisal_cc.decoding.backends.<check>()``; False where torch itself is missing."""
    try:
        from surprisal_cc.decoding import backends
    except ImportError:
        return False
    return getattr(backends, check)()


def available_backends() -> list[str]:
    """Backends usable in this environment (``native`` always is).

    Returns
    -------
    list of str
        A subset of ``["native", "torchaudio", "speechbrain"]``, in that order.

    Example
    -------
    >>> available_backends()[0]
    'native'
    """
    out = ["native"]
    if _runs("torchaudio_available"):
        out.append("torchaudio")
    if _runs("speechbrain_available"):
        out.append("speechbrain")
    return out



# --------------------------------------------------------------------------
# public class
# --------------------------------------------------------------------------
class CTCBeamSearch:
    """CTC prefix beam search without LM, returning label ids per utterance.

    Inputs may live on any device; decoding runs on CPU. With a beam at least
    as large as the number of reachable prefixes every backend returns the
    exact most probable label sequence; with small beams the backends may
    differ on flat posteriors because they count beam entries differently.

    Arguments
    ---------
    blank : int
        Blank label id.
    beam_size : int
        Hypotheses kept per frame.
    blank_penalty : float
        Subtracted from the blank's log-probability in every frame before decoding (0: plain
        CTC decoding); positive values trade deletions for insertions.
    backend : str
        ``"native"`` (numpy prefix beam search in this module; the
        beam holds distinct prefixes), ``"torchaudio"`` (flashlight C++
        lexicon-free decoder; the beam holds prefix/ending states),
        ``"speechbrain"`` (SpeechBrain ``CTCBeamSearcher`` with pruning
        heuristics off, pure Python), ``"speechbrain_prefix"``
        (``CTCPrefixBeamSearcher``, same results as native) or
        ``"auto"`` = native, which measured fastest (T=300, V=42, beam 10:
        ~18 ms/utt alone, ~5 ms/utt in batches of 8, vs ~40-60 ms/utt for
        flashlight and ~400 ms/utt for SpeechBrain; see
        ``benchmarks/bench_decoding.py``) and is exact prefix beam search.

    Example
    -------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> lp = torch.randn(2, 20, 5).mul(5).log_softmax(-1)
    >>> dec = CTCBeamSearch(blank=0, beam_size=10, backend="native")
    >>> out = dec(lp, torch.tensor([20, 12]))
    >>> len(out), all(0 not in seq for seq in out)
    (2, True)
    """

    def __init__(self, blank: int = 0, beam_size: int = 10, backend: str = "auto", blank_penalty: float = 0.0) -> None:
        if beam_size < 1:
            raise ValueError("beam_size must be >= 1")
        if backend not in BACKEND_NAMES:
            raise ValueError(f"backend must be one of {BACKEND_NAMES}, got {backend!r}")
        missing = missing_backend(backend)
        if missing:
            raise RuntimeError(missing)
        if backend == "auto":
            backend = "native"
        self.blank = int(blank)
        self.beam_size = int(beam_size)
        self.backend = backend
        self.blank_penalty = float(blank_penalty)
        self._impl: dict[tuple[int, str, int, int], Callable[[np.ndarray, list[int]], list[list[int]]]] = {}

    def _get_impl(self, V: int) -> Callable[[np.ndarray, list[int]], list[list[int]]]:
        """The decoder of the backend for ``V`` labels, built once per ``V`` and per backend, blank and beam
        size (all set on the instance, and changed by assignment)."""
        key = (V, self.backend, self.blank, self.beam_size)
        impl = self._impl.get(key)
        if impl is None:
            if self.backend == "native":
                blank, K = self.blank, self.beam_size

                def impl(lp: np.ndarray, lens: list[int]) -> list[list[int]]:
                    return prefix_beam_search_native(lp, lens, blank, K)
            else:
                impl = self._third_party(V)
            self._impl[key] = impl
        return impl

    def _third_party(self, V: int) -> Callable[[np.ndarray, list[int]], list[list[int]]]:
        """The decoder of a third-party backend (:mod:`surprisal_cc.decoding.backends`, which imports torch)."""
        import torch

        from surprisal_cc.decoding.backends import SpeechBrainDecoder, TorchaudioDecoder

        if self.backend == "torchaudio":
            decoder = TorchaudioDecoder(V, self.blank, self.beam_size)
        else:
            decoder = SpeechBrainDecoder(V, self.blank, self.beam_size, prefix=self.backend == "speechbrain_prefix")
        return lambda lp, lens: decoder(torch.from_numpy(lp), lens)

    def __call__(
        self, log_probs: Array, lengths: Array | Sequence[int] | None = None
    ) -> list[list[int]]:
        """Decode a batch.

        ``log_probs``, ``lengths`` and the label ids returned: see the module docstring.
        """
        if log_probs.ndim != 3:
            raise ValueError(f"log_probs must be [B, T, V], got {tuple(log_probs.shape)}")
        lens = _as_lengths(log_probs, lengths)
        lp = as_array(log_probs)
        if lp.dtype not in (np.float32, np.float64):
            lp = lp.astype(np.float32)
        if self.blank_penalty:
            lp = lp.copy()
            lp[..., self.blank] -= self.blank_penalty
        return self._get_impl(int(lp.shape[-1]))(np.ascontiguousarray(lp), lens)

    def __repr__(self) -> str:
        return (
            f"CTCBeamSearch(blank={self.blank}, beam_size={self.beam_size}, "
            f"backend={self.backend!r}, blank_penalty={self.blank_penalty!r})"
        )
