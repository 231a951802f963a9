"""Recipe orchestration shared by the corpus recipes (the scripts under recipes/ stay thin).

Steps: parse arguments and hparams -> prepare manifests (main process) -> load or pretrain APC ->
build the feature cache (main process) -> datasets -> calibrate the controller -> train with
checkpoint selection on the validation split -> decode the test set (CTC beam search) -> results.
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import speechbrain as sb
import torch
from hyperpyyaml import load_hyperpyyaml
from speechbrain.dataio.dataset import DynamicItemDataset
from speechbrain.dataio.encoder import CTCTextEncoder
from speechbrain.utils.distributed import run_on_main

from .apc import APCModel, FrozenAPC, load_apc
from .brain import ConditionalCTCBrain, RNGState
from .cache import FeatureCache
from .features import FeatureConfig

logger = logging.getLogger(__name__)


class ConfigurationError(ValueError):
    """A problem with the hparams file or command-line overrides."""


def load_hparams(hparams_file: str, overrides: str = "") -> Dict:
    """Load a hyperpyyaml file with overrides; unknown keys and bad values get a clear error.

    Note: hparams files are code (``!new:``/``!apply:`` run Python); only load files you trust.
    """
    path = Path(hparams_file)
    if not path.is_file():
        raise ConfigurationError(f"hparams file {hparams_file} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            return load_hyperpyyaml(f, overrides)
    except KeyError as err:
        raise ConfigurationError(f"{hparams_file}: {err.args[0].split(' not found')[0]} is not a key of this file "
                                 "(check the spelling; every --key=value override must name an existing key)") from None
    except (ValueError, TypeError, ImportError, AttributeError) as err:
        raise ConfigurationError(f"{hparams_file}: {type(err).__name__}: {err}") from None


def phone_set(name: str) -> List[str]:
    """The label set of a corpus: ``librispeech`` (41: 39 ARPAbet + sil + spn) or ``timit`` (39 folded)."""
    from .data import phones

    sets = {"librispeech": phones.LIBRISPEECH_PHONES, "timit": phones.TIMIT_PHONES_39}
    if name not in sets:
        raise ConfigurationError(f"unknown phone set {name!r}; choose one of {sorted(sets)}")
    return list(sets[name])


def input_size_for(input_features: str, apc_hidden_size: int = 512, n_mels: int = 80) -> int:
    """Encoder input width: APC features (``apc``) or raw filterbanks (``fbank``)."""
    if input_features not in ("apc", "fbank"):
        raise ConfigurationError(f"input_features must be 'apc' or 'fbank', got {input_features!r}")
    return apc_hidden_size if input_features == "apc" else n_mels


def label_encoder_for(labels: Sequence[str], blank: str = "<blank>") -> CTCTextEncoder:
    """CTC label encoder with the blank at index 0 and the given labels in order (fixed, not data-derived)."""
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


def build_datasets(hparams: Dict, manifests: Mapping[str, str], cache: Optional[FeatureCache]) -> Dict[str, DynamicItemDataset]:
    """DynamicItemDatasets with pipelines: targets from ``phn``, features from the cache or audio from ``wav``."""
    from .data.audio import read_audio

    datasets = {}
    for split, manifest in manifests.items():
        data = DynamicItemDataset.from_csv(csv_path=str(manifest))
        if split == "train" and hparams.get("sorting", "random") != "random":
            data = data.filtered_sorted(sort_key="duration", reverse=hparams["sorting"] == "descending")
        datasets[split] = data
    label_encoder: CTCTextEncoder = hparams["label_encoder"]

    target_column = "phn" if hparams["target_unit"] == "phone" else "wrd"

    @sb.utils.data_pipeline.takes(target_column)
    @sb.utils.data_pipeline.provides("tokens")
    def targets(text: str):
        return torch.LongTensor(label_encoder.encode_sequence(text.split()))

    outputs = ["id", "tokens", "wrd"]
    if cache is not None:
        pipeline, outputs = cached_features(cache), outputs + cache_items(cache)
    else:
        @sb.utils.data_pipeline.takes("wav")
        @sb.utils.data_pipeline.provides("sig")
        def audio(wav: str):
            return read_audio(wav)

        pipeline, outputs = audio, outputs + ["sig"]
    plain = [d for split, d in datasets.items() if split != "train" or not hparams.get("optional_silence", False)]
    if len(plain) < len(datasets):  # training targets: an optional sil at every word boundary
        from .ctc import optional_silence_targets

        if hparams["target_unit"] != "phone":
            raise ConfigurationError("optional_silence needs phone targets (target_unit: phone)")
        table = optional_silence_targets(datasets["train"].data, hparams.get("g2p", "spn"))
        if not table:
            raise ConfigurationError("optional_silence: no training utterance has lexicon labels (labels: "
                                     "{train: lexicon}) to insert optional sil into")
        logger.info("optional sil at word boundaries for %d of %d training utterances (the others keep their "
                    "labels)", len(table), len(datasets["train"].data))

        @sb.utils.data_pipeline.takes("id", "phn")
        @sb.utils.data_pipeline.provides("tokens", "optional")
        def optional_targets(utt_id: str, text: str):
            phones, optional = table.get(utt_id, (text.split(), None))
            yield torch.LongTensor(label_encoder.encode_sequence(phones))
            yield torch.tensor(optional if optional is not None else [False] * len(phones), dtype=torch.bool)

        sb.dataio.dataset.add_dynamic_item([datasets["train"]], optional_targets)
    sb.dataio.dataset.add_dynamic_item(plain, targets)
    sb.dataio.dataset.add_dynamic_item(list(datasets.values()), pipeline)
    sb.dataio.dataset.set_output_keys(plain, outputs)
    if len(plain) < len(datasets):
        sb.dataio.dataset.set_output_keys([datasets["train"]], outputs + ["optional"])
    return datasets


def cache_items(cache: FeatureCache) -> List[str]:
    return ["fbank", "features", "surprisal"] if cache.apc is not None else ["fbank"]


def cached_features(cache: FeatureCache):
    """Dynamic item: utterance id -> the cached tensors named by :func:`cache_items`."""
    names = cache_items(cache)

    @sb.utils.data_pipeline.takes("id")
    @sb.utils.data_pipeline.provides(*names)
    def cached(utt_id: str):
        entry = cache.load(utt_id)
        for name in names:
            yield entry[name]

    return cached


def fill_cache(cache: FeatureCache, manifests: Mapping[str, str], batch_size: int) -> None:
    """Compute missing cache entries for every utterance of the manifests, longest first."""
    import csv

    from .data.audio import read_audio

    rows = []
    for manifest in manifests.values():
        with open(manifest, newline="", encoding="utf-8") as f:
            rows.extend(csv.DictReader(f))
    rows.sort(key=lambda r: -float(r["duration"]))
    cache.build([(r["ID"], r["wav"]) for r in rows], read_audio, batch_size=batch_size)


def obtain_apc(hparams: Dict, manifests: Mapping[str, str], run_opts: Dict) -> Optional[APCModel]:
    """The frozen APC model: loaded from ``apc_path``, or pretrained on the training split when it is null."""
    encoder = hparams["encoder_module"]
    needed = hparams["input_features"] == "apc" or encoder.needs_surprisal(True) or encoder.needs_surprisal(False)
    if not needed:
        logger.info("APC not needed: raw filterbank inputs and no surprisal-driven controller")
        return None
    if hparams.get("apc_path"):
        path = Path(hparams["apc_path"])
        if not path.is_file():
            raise ConfigurationError(f"apc_path {path} does not exist: pretrain one with "
                                     "recipes/LibriSpeech/pretrain_apc.py or set apc_path: null to pretrain here")
        return load_apc(path)
    return load_apc(pretrain_apc_on(hparams, {k: manifests[k] for k in ("train", "valid")}, run_opts))


def pretrain_apc_on(hparams: Dict, manifests: Mapping[str, str], run_opts: Dict) -> Path:
    """Pretrain APC on the ``train`` manifest (validation loss on ``valid``); returns the exported file."""
    from .apc_training import pretrain_apc

    fbank_cache = FeatureCache(hparams["cache_folder"], None, hparams["feature_config"])
    run_on_main(fill_cache, args=[fbank_cache, manifests, hparams["cache_batch_size"]])
    datasets = {split: DynamicItemDataset.from_csv(csv_path=str(manifest)) for split, manifest in manifests.items()}
    sb.dataio.dataset.add_dynamic_item(list(datasets.values()), cached_features(fbank_cache))
    sb.dataio.dataset.set_output_keys(list(datasets.values()), ["id", "fbank"])
    return pretrain_apc(datasets, hparams, run_opts)


def run_apc_recipe(argv: Sequence[str]) -> Path:
    """APC pretraining recipe: prepare audio-only manifests of LibriSpeech subsets, train, export."""
    from .data import prepare_librispeech

    hparams_file, run_opts, overrides = sb.parse_arguments(list(argv))
    sb.utils.distributed.ddp_init_group(run_opts)
    hparams = load_hparams(hparams_file, overrides)
    hparams["precision"] = resolve_precision(hparams.get("precision", "fp32"), run_opts)
    sb.create_experiment_directory(experiment_directory=hparams["apc_output_folder"],
                                   hyperparams_to_save=hparams_file, overrides=overrides)
    run_on_main(prepare_librispeech, kwargs=hparams["prepare_options"])
    manifests = prepare_librispeech(**hparams["prepare_options"])
    return pretrain_apc_on(hparams, {"train": manifests["train"], "valid": manifests["valid"]}, run_opts)


def run_asr_recipe(argv: Sequence[str], prepare: Callable[..., Mapping[str, str]]) -> Dict[str, object]:
    """The whole recipe; ``prepare(**hparams['prepare_options'])`` returns split -> manifest path."""
    hparams_file, run_opts, overrides = sb.parse_arguments(list(argv))
    sb.utils.distributed.ddp_init_group(run_opts)
    hparams = load_hparams(hparams_file, overrides)
    hparams["precision"] = resolve_precision(hparams.get("precision", "fp32"), run_opts)
    sb.create_experiment_directory(experiment_directory=hparams["output_folder"],
                                   hyperparams_to_save=hparams_file, overrides=overrides)
    if hparams["target_unit"] not in ("phone", "sentencepiece"):
        raise ConfigurationError(f"target_unit must be 'phone' or 'sentencepiece', got {hparams['target_unit']!r}")
    if hparams["target_unit"] == "phone":
        check_consistency(hparams)

    run_on_main(prepare, kwargs=hparams["prepare_options"])
    manifests = prepare(**hparams["prepare_options"])  # idempotent: returns at once on every process
    if hparams["target_unit"] == "sentencepiece":
        sp_dir = Path(hparams["prepared_folder"]) / f"sentencepiece_{hparams['sp_vocab_size']}"
        run_on_main(SentencePieceLabels, args=[sp_dir, hparams["sp_vocab_size"], manifests["train"]])
        hparams["label_encoder"] = SentencePieceLabels(sp_dir, hparams["sp_vocab_size"], manifests["train"])
        check_consistency(hparams)

    apc = obtain_apc(hparams, manifests, run_opts)
    hparams["apc_model"] = apc
    cache = None
    if hparams["use_feature_cache"]:
        cache = FeatureCache(hparams["cache_folder"], apc, hparams["feature_config"])
        run_on_main(fill_cache, args=[cache, manifests, hparams["cache_batch_size"]])
    datasets = build_datasets(hparams, manifests, cache)
    hparams["train_set"] = datasets["train"]
    hparams["manifests"] = manifests

    modules = {"encoder": hparams["encoder_module"]}
    if apc is not None:
        modules["apc"] = FrozenAPC(apc)
    hparams["rng_state"] = RNGState()
    hparams["checkpointer"].add_recoverable("rng", hparams["rng_state"])
    brain = ConditionalCTCBrain(modules=modules, opt_class=hparams["opt_class"], hparams=hparams,
                                run_opts=run_opts, checkpointer=hparams["checkpointer"])
    train_loader_kwargs = training_loader_options(hparams, datasets["train"])
    brain.train_batch_sampler = train_loader_kwargs.get("batch_sampler")
    try:
        brain.fit(hparams["epoch_counter"], datasets["train"], datasets["valid"],  # returns at once with --test_only
                  train_loader_kwargs=train_loader_kwargs,
                  valid_loader_kwargs=hparams["test_loader_options"])
    except RuntimeError as err:
        if "size mismatch" in str(err) or "Missing key" in str(err) or "Unexpected key" in str(err):
            raise ConfigurationError(
                f"the checkpoint in {hparams['save_folder']} was written by a model of another shape "
                f"({str(err).splitlines()[0]}): use another --output_folder, or delete that folder") from None
        raise
    encoder = brain.modules.encoder
    for shift in hparams["test_bias_shifts"]:
        getattr(encoder, "module", encoder).test_bias_shift = float(shift)
        brain.evaluate(datasets["test"], min_key=hparams["selection_metric"],
                       test_loader_kwargs=hparams["test_loader_options"])
    return {"output_folder": hparams["output_folder"]}


def training_loader_options(hparams: Dict, train_set: DynamicItemDataset) -> Dict:
    """Training DataLoader options: fixed-size batches, or length-bucketed ones (``dynamic_batching``).

    With ``dynamic_batching: True`` SpeechBrain's ``DynamicBatchSampler`` groups utterances of
    similar duration into batches of at most ``max_batch_length`` seconds of padded audio, in a
    random order that changes every epoch (seeded), so the BiGRUs hardly run over padding.
    """
    options = dict(hparams["train_loader_options"])
    if not hparams.get("dynamic_batching", False):
        return options
    from speechbrain.dataio.sampler import DynamicBatchSampler

    sampler = DynamicBatchSampler(train_set, max_batch_length=hparams["max_batch_length"],
                                  num_buckets=hparams["num_buckets"], length_func=lambda x: float(x["duration"]),
                                  shuffle=True, batch_ordering="random", seed=hparams["seed"])
    return {"batch_sampler": sampler, "num_workers": options.get("num_workers", 0)}


PRECISIONS = ("fp32", "bf16", "fp16", "auto")


def resolve_precision(precision: str, run_opts) -> str:
    """The training precision: ``auto`` becomes ``bf16`` where the device computes bf16 natively.

    On the CPU that means AVX-512-BF16 or AMX (oneDNN reports bf16 support); without them bf16
    is emulated and slower than fp32, so ``auto`` gives ``fp32``. On CUDA it means a GPU with bf16
    (Ampere or newer). ``--precision`` on the command line (SpeechBrain's flag) wins over the YAML key.
    """
    if "precision" in getattr(run_opts, "overridden_args", ()):
        return run_opts["precision"]
    if precision not in PRECISIONS:
        raise ConfigurationError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    device = (run_opts.get("device") if run_opts is not None else None) or "cpu"
    return "bf16" if native_bf16(device) else "fp32"


def native_bf16(device="cpu") -> bool:
    """Whether ``device`` computes bf16 natively: a CPU with AVX-512-BF16 or AMX (as oneDNN reports
    it), or a CUDA GPU of the Ampere generation or newer."""
    if torch.device(device).type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - builds without oneDNN
        return False


def check_consistency(hparams: Dict) -> None:
    """Catch configuration mistakes before any data is touched."""
    expected = len(hparams["label_encoder"].ind2lab)
    if hparams["num_outputs"] != expected:
        raise ConfigurationError(f"num_outputs is {hparams['num_outputs']} but the label set has {expected - 1} "
                                 f"labels + blank = {expected}: set --num_outputs={expected}")


def main_entry(prepare: Optional[Callable[..., Mapping[str, str]]] = None) -> None:
    """Entry point of the recipe scripts (ASR with ``prepare``, APC pretraining without).

    Configuration and data errors end the run with one clear message instead of a traceback.
    """
    from .brain import TrainingDivergedError
    from .data import DataPreparationError

    try:
        if prepare is None:
            run_apc_recipe(sys.argv[1:])
        else:
            run_asr_recipe(sys.argv[1:], prepare)
    except (ConfigurationError, DataPreparationError, TrainingDivergedError) as err:
        sys.exit(f"error: {err}")
