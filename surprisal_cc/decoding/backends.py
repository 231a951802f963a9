"""The third-party CTC beam searches that :class:`~surprisal_cc.decoding.search.CTCBeamSearch` can run instead
of its native one (``backend="torchaudio"``: flashlight's lexicon-free decoder; ``"speechbrain"`` and
``"speechbrain_prefix"``: SpeechBrain's searchers), for comparisons (``benchmarks/bench_decoding.py``,
``tests/test_decoding.py``) and for a model folder whose ``beam_backend`` names one. They need torch and the
library; :mod:`surprisal_cc.decoding.search` imports this module only when one is asked for, so that the
native search runs without torch.

Example
-------
>>> len(set(label_chars(42))), label_chars(1)
(42, ['一'])
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

_NEG_INF = -math.inf


def torchaudio_available() -> bool:
    """Whether torchaudio's flashlight ``ctc_decoder`` imports and builds."""
    try:
        from torchaudio.models.decoder import ctc_decoder  # noqa: F401

        ctc_decoder(lexicon=None, tokens=["a", "b"], blank_token="a", sil_token="b")
    except Exception:  # ImportError, missing flashlight-text, ...
        return False
    return True


def speechbrain_available() -> bool:
    """Whether SpeechBrain's CTC beam searchers import."""
    try:
        from speechbrain.decoders.ctc import CTCBeamSearcher  # noqa: F401
    except Exception:
        return False
    return True


def label_chars(n: int) -> list[str]:
    """``n`` distinct single non-whitespace characters (CJK block), one per label."""
    return [chr(0x4E00 + i) for i in range(n)]


class TorchaudioDecoder:
    """flashlight lexicon-free CTC decoder via ``torchaudio.models.decoder``.

    Token list: one name per label plus an extra, never-emitted silence token
    at index ``V``. Flashlight starts every hypothesis on the silence token, so
    a *real* label used as ``sil_token`` would make a first-frame emission of
    that label look like a repeat (and would receive ``sil_score``). The extra
    token sits outside the emission matrix (flashlight only iterates over the
    ``V`` emitted columns), so it only appears as the start/end marker, which
    is filtered out when reading back token ids. ``log_add=True`` makes merged
    hypotheses sum probabilities (prefix-beam semantics) rather than take the
    max; ``beam_threshold`` is effectively disabled. Note that flashlight's beam
    holds (prefix, ends-in-blank) states, not prefixes; the two endings of a
    prefix are summed only at the end.
    """

    def __init__(self, V: int, blank: int, beam_size: int) -> None:
        from torchaudio.models.decoder import ctc_decoder

        self.V, self.blank = V, blank
        tokens = [f"<{i}>" for i in range(V)] + ["<sil-unused>"]
        self.sil = V
        self.decoder = ctc_decoder(
            lexicon=None,
            tokens=tokens,
            lm=None,
            nbest=1,
            beam_size=beam_size,
            beam_size_token=V,
            beam_threshold=1e30,
            log_add=True,
            blank_token=tokens[blank],
            sil_token=tokens[V],
            sil_score=0.0,
        )

    def __call__(self, lp: Tensor, lens: list[int]) -> list[list[int]]:
        """Label ids per utterance of CPU log posteriors ``[B, T, V]``."""
        emissions = lp.to(torch.float32).contiguous()
        hyps = self.decoder(emissions, torch.tensor(lens, dtype=torch.int32))
        out: list[list[int]] = []
        for h, L in zip(hyps, lens):
            if L == 0 or not h:
                out.append([])
                continue
            toks = [int(x) for x in h[0].tokens.tolist()]
            out.append([x for x in toks if x != self.sil and x != self.blank])
        return out


class SpeechBrainDecoder:
    """``speechbrain.decoders.ctc.CTCBeamSearcher`` (or the prefix variant).

    SpeechBrain joins token strings into text, so each label is mapped to a
    distinct single character with no space token and no SentencePiece marker;
    the whole hypothesis is then one "word" whose characters map back to label
    ids exactly. By default its pruning heuristics (``beam_prune_logp``,
    ``token_prune_min_logp``) are disabled so that it is a plain beam search;
    ``speechbrain_defaults=True`` keeps SpeechBrain's defaults (faster, not
    exact). Utterances are decoded one by one with exact integer lengths.
    """

    def __init__(
        self,
        V: int,
        blank: int,
        beam_size: int,
        prefix: bool = False,
        speechbrain_defaults: bool = False,
    ) -> None:
        import logging

        from speechbrain.decoders.ctc import CTCBeamSearcher, CTCPrefixBeamSearcher

        self.chars = label_chars(V)
        self.char_to_id = {c: i for i, c in enumerate(self.chars)}
        kwargs: dict[str, object] = dict(
            blank_index=blank,
            vocab_list=self.chars,
            space_token=" ",
            beam_size=beam_size,
            topk=1,
        )
        if not speechbrain_defaults:
            kwargs.update(
                beam_prune_logp=_NEG_INF,
                token_prune_min_logp=_NEG_INF,
                blank_skip_threshold=1.0,
                prune_history=False,
            )
        cls = CTCPrefixBeamSearcher if prefix else CTCBeamSearcher
        sb_logger = logging.getLogger("speechbrain.decoders.ctc")
        level = sb_logger.level
        sb_logger.setLevel(logging.ERROR)  # "space_token not found" is expected
        try:
            self.searcher = cls(**kwargs)
        finally:
            sb_logger.setLevel(level)

    def __call__(self, lp: Tensor, lens: list[int]) -> list[list[int]]:
        """Label ids per utterance of CPU log posteriors ``[B, T, V]``, one utterance at a time."""
        arr = lp.to(torch.float32).numpy()
        out: list[list[int]] = []
        for b, L in enumerate(lens):
            if L == 0:
                out.append([])
                continue
            hyps = self.searcher.decode_log_probs(arr[b, :L], L)
            text = hyps[0].text if hyps else ""
            out.append([self.char_to_id[c] for c in text if c in self.char_to_id])
        return out
