"""The datasets of a recipe run: a SpeechBrain ``DynamicItemDataset`` per split of its manifests with
its pipelines (CTC targets from the phones, SentencePiece units, optional-silence targets or
pronunciation graphs; the features from the feature cache, or the audio), and the training loader's
batching (fixed-size or length-bucketed, shuffled or sorted).
"""
from __future__ import annotations

import logging
from typing import Dict, Mapping, Optional

import speechbrain as sb
import torch
from speechbrain.dataio.dataset import DynamicItemDataset
from speechbrain.dataio.encoder import CTCTextEncoder

from surprisal_cc.training.augment import SpeedPerturbation
from surprisal_cc.training.cache import FeatureCache
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.training.frozen_features import cache_items, cached_features

logger = logging.getLogger(__name__)


def dataio_prep(hparams: Dict, manifests: Mapping[str, str], cache: Optional[FeatureCache]) -> Dict[str, DynamicItemDataset]:
    """DynamicItemDatasets of every split, with their pipelines.

    Arguments
    ---------
    hparams : dict
        Uses ``label_encoder``, ``target_unit``, ``sorting``, ``optional_silence`` or
        ``pronunciation_alternatives`` (and ``g2p``), ``speed_perturbation`` (training split only),
        ``feature_config`` (the sample rate audio is read at without a cache; absent: the defaults).
    manifests : dict
        Split name -> manifest CSV (columns ID, duration, wav, wrd, phn).
    cache : FeatureCache or None
        Features come from the cache (``fbank``, and ``features`` / ``surprisal`` with APC), or,
        without one, the audio is read (``sig``) at ``feature_config``'s sample rate, as the cache reads it.

    Returns
    -------
    dict
        Split name -> DynamicItemDataset giving ``id``, ``tokens`` (targets from ``phn``, or
        SentencePiece units of ``wrd``), ``wrd``, the features, and for an optional-silence
        training split ``optional`` (which targets may be skipped); with pronunciation
        alternatives, the training and validation splits give ``predecessors`` (``tokens`` then
        hold the graph's tokens; :func:`surprisal_cc.model.ctc.ctc_loss_graph`).
    """
    datasets = _load_splits(manifests, hparams.get("sorting", "random"))
    label_encoder: CTCTextEncoder = hparams["label_encoder"]
    optional_silence = hparams.get("optional_silence", False)
    alternatives = hparams.get("pronunciation_alternatives", False)
    if optional_silence and alternatives:
        raise ConfigurationError("optional_silence and pronunciation_alternatives are two kinds of training "
                                 "targets: set one of them")
    graph_splits = [split for split in ("train", "valid") if split in datasets] if alternatives else []
    special = graph_splits or (["train"] if optional_silence and "train" in datasets else [])
    plain = [d for split, d in datasets.items() if split not in special]
    for split in graph_splits:  # every pronunciation of every word: trained on, and validated against
        _add_graph_targets(hparams, datasets[split], split, label_encoder)
    if optional_silence and "train" in datasets:  # training targets: an optional sil at every word boundary
        _add_optional_silence_targets(hparams, datasets["train"], label_encoder)
    target_column = "phn" if hparams["target_unit"] == "phone" else "wrd"

    @sb.utils.data_pipeline.takes(target_column)
    @sb.utils.data_pipeline.provides("tokens")
    def targets(text: str):
        return torch.LongTensor(label_encoder.encode_sequence(text.split()))

    sb.dataio.dataset.add_dynamic_item(plain, targets)
    features = hparams.get("feature_config")
    sb.dataio.dataset.add_dynamic_item([d for split, d in datasets.items() if split != "train"],
                                       _features(cache, None, features))
    if "train" in datasets:
        sb.dataio.dataset.add_dynamic_item([datasets["train"]], _features(cache, hparams.get("speed_perturbation"),
                                                                          features))
    outputs = ["id", "tokens", "wrd"] + (cache_items(cache) if cache is not None else ["sig"])
    sb.dataio.dataset.set_output_keys(plain, outputs)
    sb.dataio.dataset.set_output_keys([datasets[split] for split in special],
                                      outputs + ["predecessors" if alternatives else "optional"])
    return datasets


def _load_splits(manifests: Mapping[str, str], sorting: str) -> Dict[str, DynamicItemDataset]:
    """A DynamicItemDataset per manifest; the training split sorted by duration unless ``sorting`` is random.
    A manifest without an utterance is a :class:`~surprisal_cc.data.errors.DataPreparationError` naming its
    split and file (:func:`~surprisal_cc.data.manifest.refuse_empty_split`; SpeechBrain's reader fails on it
    with an IndexError naming neither)."""
    from surprisal_cc.data.manifest import read_manifest, refuse_empty_split

    datasets = {}
    for split, manifest in manifests.items():
        refuse_empty_split(manifest, split, read_manifest(manifest, ("ID",), resolve_wav=False).rows,
                           why="prepare the data again (its audio may all have been left out as unusable), or give "
                               "a manifest with utterances")
        data = DynamicItemDataset.from_csv(csv_path=str(manifest))
        if split == "train" and sorting != "random":
            data = data.filtered_sorted(sort_key="duration", reverse=sorting == "descending")
        datasets[split] = data
    return datasets


def _features(cache: Optional[FeatureCache], perturbation: Optional[SpeedPerturbation], feature_config=None):
    """The dynamic item of the features: the cached ones, or without a cache the audio (``sig``) at
    ``feature_config``'s sample rate (:meth:`~surprisal_cc.model.feature_config.FeatureConfig.read_audio`; None: the
    defaults), at the speed ``perturbation`` draws."""
    if cache is not None:
        return cached_features(cache, perturbation)
    read_audio = (feature_config or FeatureConfig()).read_audio

    @sb.utils.data_pipeline.takes("wav")
    @sb.utils.data_pipeline.provides("sig")
    def audio(wav: str):
        signal = read_audio(wav)
        return perturbation(signal, perturbation.choose()) if perturbation else signal

    return audio


def _add_graph_targets(hparams: Dict, data: DynamicItemDataset, split: str, label_encoder: CTCTextEncoder) -> None:
    """``tokens`` and ``predecessors`` of ``data``: the graph of every pronunciation of every word
    (:func:`~surprisal_cc.model.ctc.pronunciation_targets`); a plain chain where an utterance has none."""
    from surprisal_cc.model.ctc import chain_predecessors, graph_tensor, pronunciation_targets

    graphs = _special_targets(hparams, data, split, "pronunciation_alternatives", pronunciation_targets,
                              "labels made of its words' CMUdict pronunciations (lexicon or realigned labels) "
                              "with a word of several", "every pronunciation of every word")
    width = max((len(p) for _, preds in graphs.values() for p in preds), default=1)  # one width per split

    @sb.utils.data_pipeline.takes("id", "phn")
    @sb.utils.data_pipeline.provides("tokens", "predecessors")
    def graph_targets(utt_id: str, text: str):
        phones = text.split()
        tokens, preds = graphs.get(utt_id, (phones, chain_predecessors(len(phones))))
        yield torch.LongTensor(label_encoder.encode_sequence(tokens))
        yield graph_tensor(preds, width)

    sb.dataio.dataset.add_dynamic_item([data], graph_targets)


def _add_optional_silence_targets(hparams: Dict, data: DynamicItemDataset, label_encoder: CTCTextEncoder) -> None:
    """``tokens`` and ``optional`` of the training split: an optional ``sil`` at every word boundary
    (:func:`~surprisal_cc.model.ctc.optional_silence_targets`)."""
    from surprisal_cc.model.ctc import optional_silence_targets

    table = _special_targets(hparams, data, "train", "optional_silence", optional_silence_targets,
                             "lexicon labels (labels: {train: lexicon}) to insert optional sil into",
                             "optional sil at word boundaries")

    @sb.utils.data_pipeline.takes("id", "phn")
    @sb.utils.data_pipeline.provides("tokens", "optional")
    def optional_targets(utt_id: str, text: str):
        phones, optional = table.get(utt_id, (text.split(), None))
        yield torch.LongTensor(label_encoder.encode_sequence(phones))
        yield torch.tensor(optional if optional is not None else [False] * len(phones), dtype=torch.bool)

    sb.dataio.dataset.add_dynamic_item([data], optional_targets)


def _special_targets(hparams: Dict, data: DynamicItemDataset, split: str, key: str, build, needs: str,
                     what: str) -> Dict:
    """A split's special targets, ``build(manifest rows, g2p)`` (hparams ``key``), checked and logged;
    the training split must have some."""
    if hparams["target_unit"] != "phone":
        raise ConfigurationError(f"{key} needs phone targets (target_unit: phone)")
    table = build(data.data, hparams.get("g2p", "spn"))
    if not table and split == "train":
        raise ConfigurationError(f"{key}: no training utterance has {needs}")
    logger.info("%s for %d of %d %s utterances (the others keep their labels)", what, len(table), len(data.data),
                "training" if split == "train" else split)
    return table


def training_loader_options(hparams: Dict, train_set: DynamicItemDataset) -> Dict:
    """Training DataLoader options: fixed-size batches, or length-bucketed ones (``dynamic_batching``).

    With ``sorting: ascending`` or ``descending`` the batches follow the sorted training split
    (:func:`dataio_prep`) instead of being shuffled; ``random`` shuffles them every epoch.
    With ``dynamic_batching: True`` SpeechBrain's ``DynamicBatchSampler`` groups utterances of
    similar duration into batches of at most ``max_batch_length`` seconds of padded audio, so the
    BiGRUs hardly run over padding; the batches come in a random order that changes every epoch
    (seeded), or ordered by duration as ``sorting`` says.

    Example
    -------
    >>> options = {"train_loader_options": {"batch_size": 8, "shuffle": True}}
    >>> training_loader_options({**options, "sorting": "ascending"}, None)["shuffle"]
    False
    >>> training_loader_options({**options, "sorting": "random"}, None)["shuffle"]
    True
    """
    options = dict(hparams["train_loader_options"])
    sorting = hparams.get("sorting", "random")
    if sorting not in ("random", "ascending", "descending"):
        raise ConfigurationError(f"sorting must be random, ascending or descending, got {sorting!r}")
    if not hparams.get("dynamic_batching", False):
        if sorting != "random":
            options["shuffle"] = False  # a shuffling sampler would undo the sorted order
        return options
    from speechbrain.dataio.sampler import DynamicBatchSampler

    sampler = DynamicBatchSampler(train_set, max_batch_length=hparams["max_batch_length"],
                                  num_buckets=hparams["num_buckets"], length_func=lambda x: float(x["duration"]),
                                  shuffle=True, batch_ordering=sorting, seed=hparams["seed"])
    return {"batch_sampler": sampler, "num_workers": options.get("num_workers", 0)}
