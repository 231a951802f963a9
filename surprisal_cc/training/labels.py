"""The labels a recipe run's CTC model outputs: a corpus's phone set (its inventory is in
:mod:`surprisal_cc.data.phones`) and the CTC label encoder over it, blank at index 0 (the hparams files
apply both), or SentencePiece units trained on the training words (``target_unit: sentencepiece``).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import List, Sequence

from speechbrain.dataio.encoder import CTCTextEncoder

from surprisal_cc.errors import ConfigurationError


def phone_set(name: str) -> List[str]:
    """The label set of a corpus: ``librispeech`` (41: 39 ARPAbet + sil + spn) or ``timit`` (39 folded).

    Example
    -------
    >>> len(phone_set("librispeech")), len(phone_set("timit")), phone_set("timit")[:3]
    (41, 39, ['aa', 'ae', 'ah'])
    """
    from surprisal_cc.data import phones

    sets = {"librispeech": phones.LIBRISPEECH_PHONES, "timit": phones.TIMIT_PHONES_39}
    if name not in sets:
        raise ConfigurationError(f"unknown phone set {name!r}; choose one of {sorted(sets)}")
    return list(sets[name])


def label_encoder_for(labels: Sequence[str], blank: str = "<blank>") -> CTCTextEncoder:
    """CTC label encoder with the blank at index 0 and the given labels in order (fixed, not data-derived).

    ``labels`` is the hparams key ``phone_set``: a list of labels, or the name of a
    :func:`phone_set` (``--phone_set=timit``).

    Example
    -------
    >>> encoder = label_encoder_for(["sil", "AH", "B"])
    >>> encoder.encode_sequence(["AH", "B", "sil"]), encoder.ind2lab[0]
    ([2, 3, 1], '<blank>')
    >>> len(label_encoder_for("librispeech").ind2lab)
    42
    >>> label_encoder_for(["AH", "B", "AH"])
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: phone_set lists a label more than once: ['AH']
    """
    if isinstance(labels, str):  # a name, not a string of one-character labels
        labels = phone_set(labels)
    repeated = sorted(label for label, count in Counter(labels).items() if count > 1)
    if repeated:
        raise ConfigurationError(f"phone_set lists a label more than once: {repeated}")
    encoder = CTCTextEncoder()
    encoder.insert_blank(blank_label=blank, index=0)
    encoder.update_from_iterable(labels, sequence_input=False)
    return encoder


class SentencePieceLabels:
    """SentencePiece units as CTC targets (blank = 0, unit ids shifted by one).

    Trained with SpeechBrain's tokenizer on the ``wrd`` column of the training manifest; offers the
    ``encode_sequence`` / ``decode_ndim`` interface of the phone label encoder plus ``decode_words``.
    """

    def __init__(self, model_dir: str, vocab_size: int, train_manifest: str):
        from speechbrain.tokenizers.SentencePiece import SentencePiece

        tokenizer = SentencePiece(model_dir=str(model_dir), vocab_size=vocab_size, annotation_train=str(train_manifest),
                                  annotation_read="wrd", model_type="unigram", character_coverage=1.0)
        self.sp = tokenizer.sp
        self.ind2lab = ["<blank>", *[self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]]

    def encode_sequence(self, words: Sequence[str]) -> List[int]:
        return [i + 1 for i in self.sp.encode_as_ids(" ".join(words))]

    def decode_ndim(self, ids: Sequence[int]) -> List[str]:
        return [self.ind2lab[int(i)] for i in ids]

    def decode_words(self, ids: Sequence[int]) -> List[str]:
        return self.sp.decode_ids([int(i) - 1 for i in ids]).split()


def train_units(sp_dir: Path, vocab_size: int, train_manifest: str) -> Path:
    """SentencePiece units in ``sp_dir``, trained there unless already present.

    They are trained in a private folder beside it that is then renamed into place in one step, so
    two runs preparing the same units at the same moment cannot mix each other's files: the first
    rename wins and the other run's folder is discarded.

    Example
    -------
    >>> import tempfile
    >>> tmp = Path(tempfile.mkdtemp())
    >>> manifest = tmp / "train.csv"
    >>> words = ["THE CAT SAT ON THE MAT", "A DOG RAN IN THE PARK", "SHE READ HER BOOK BY THE WINDOW"]
    >>> _ = manifest.write_text("ID,wrd\\n" + "".join(f"u{i},{words[i % 3]}\\n" for i in range(60)))
    >>> (train_units(tmp / "units", 20, str(manifest)) / "20_unigram.model").is_file()
    True
    >>> sorted(p.name for p in tmp.iterdir())
    ['train.csv', 'units']
    """
    sp_dir = Path(sp_dir)
    if (sp_dir / f"{vocab_size}_unigram.model").is_file():
        return sp_dir
    sp_dir.parent.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=f".{sp_dir.name}.", dir=sp_dir.parent))
    try:
        SentencePieceLabels(private, vocab_size, train_manifest)
        try:
            os.rename(private, sp_dir)  # atomic; fails if another run's units are already there
        except OSError:
            if not (sp_dir / f"{vocab_size}_unigram.model").is_file():
                raise ConfigurationError(f"{sp_dir} exists without '{vocab_size}_unigram.model' (an interrupted "
                                         f"run of an older version?): delete that folder and run again") from None
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return sp_dir
