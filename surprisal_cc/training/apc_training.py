"""APC pretraining: a SpeechBrain Brain that minimises mean surprisal, and the export of the best model.

Used by ``recipes/LibriSpeech/pretrain_apc.py`` and by the ASR recipes when no ``apc_path`` is given.
Filterbanks come from a :class:`~surprisal_cc.training.cache.FeatureCache` without APC (computed once), so
an epoch costs only the APC forward/backward passes.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional

import speechbrain as sb
import torch
from speechbrain.utils.distributed import if_main_process

from surprisal_cc.model.apc import APCModel, apc_config, save_apc
from surprisal_cc.training.augment import activate_in_training
from surprisal_cc.training.base_brain import FiniteLossBrain
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.nnet import absolute_lengths, lengths_to_mask, unwrap

logger = logging.getLogger(__name__)

SETTINGS_FILE = "apc_settings.json"  # in the checkpoint folder: the settings its checkpoints were trained with


class APCBrain(FiniteLossBrain):
    """Trains ``modules.apc`` (an :class:`APCModel`) on cached filterbanks (``batch.fbank``).

    The loss of a batch is its mean surprisal per real frame; the validation loss of an epoch is
    frame-weighted over the whole validation set. Each validation appends a line to
    ``<output_folder>/apc_history.jsonl`` and saves a checkpoint (the two best by loss are kept).
    ``hparams`` needs ``train_logger`` and ``output_folder`` (see :func:`pretrain_apc`).
    """

    def compute_forward(self, batch, stage):
        """Sum of the surprisal over the batch's real frames, and the number of those frames."""
        batch = batch.to(self.device)
        fbank = batch.fbank.data
        lengths = absolute_lengths(batch.fbank).to(fbank.device)
        out = self.modules.apc(fbank, lengths)
        return out.surprisal.sum(), lengths.sum()

    def compute_objectives(self, predictions, batch, stage):
        """Mean surprisal per real frame; also counts the frames (and the validation totals)."""
        surprisal_sum, frames = predictions
        self.frames_seen += int(frames)
        if stage != sb.Stage.TRAIN:
            self.eval_sum += float(surprisal_sum)
            self.eval_frames += int(frames)
        return surprisal_sum / frames.clamp(min=1)

    def on_stage_start(self, stage, epoch=None):
        """Reset the frame counters and start the stage's clock; perturbed speeds in training only."""
        activate_in_training(getattr(self.hparams, "speed_perturbation", None), stage)
        self.frames_seen, self.eval_sum, self.eval_frames = 0, 0.0, 0
        self.stage_start = time.time()

    def on_stage_end(self, stage, stage_loss, epoch=None):
        """Keep the training statistics; after validation log the epoch and save a checkpoint."""
        elapsed = time.time() - self.stage_start
        if stage == sb.Stage.TRAIN:
            self.train_stats = {"loss": stage_loss, "epoch_s": elapsed, "frames": self.frames_seen,
                                "frames_per_s": self.frames_seen / elapsed}
            return
        # frame-weighted mean surprisal over the whole validation set
        valid_loss = self.eval_sum / max(self.eval_frames, 1)
        self.hparams.train_logger.log_stats(stats_meta={"epoch": epoch}, train_stats=self.train_stats,
                                            valid_stats={"loss": valid_loss})
        if if_main_process():
            with open(Path(self.hparams.output_folder) / "apc_history.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"epoch": epoch, "train_loss": self.train_stats["loss"], "valid_loss": valid_loss,
                                    "epoch_s": self.train_stats["epoch_s"], "train_frames": self.train_stats["frames"],
                                    "train_frames_per_s": self.train_stats["frames_per_s"]}) + "\n")
        self.checkpointer.save_and_keep_only(meta={"loss": valid_loss}, min_keys=["loss"], num_to_keep=2)

    def export_best(self, path, training: Optional[Mapping] = None) -> Path:
        """Load the checkpoint with the lowest validation loss and write it as one model file.

        Arguments
        ---------
        path : str or pathlib.Path
            Output file (:func:`~surprisal_cc.model.apc.save_apc`); written by the main process only.
        training : mapping, optional
            The pretraining settings stored with the model (:func:`pretraining_settings`).

        Returns
        -------
        pathlib.Path
            ``path``.
        """
        if self.checkpointer.recover_if_possible(min_key="loss") is None:
            raise ConfigurationError(f"{self.checkpointer.checkpoints_dir} holds no APC checkpoint to export: "
                                     "pretrain at least one epoch (a --test_only run does not pretrain)")
        path = Path(path)
        if if_main_process():
            save_apc(unwrap(self.modules.apc), path, training=training)
            logger.info("best APC model exported to %s", path)
        return path


def mean_training_frame(dataset, batch_size: int, max_batches: int = 4):
    """Mean filterbank frame over the real frames of the first few training batches.

    Arguments
    ---------
    dataset : speechbrain.dataio.dataset.DynamicItemDataset
        Dataset with an ``fbank`` output key, (T, D) per item.
    batch_size : int
        Items per batch (read in order, not shuffled).
    max_batches : int
        Batches read.

    Returns
    -------
    torch.Tensor
        (D,) mean frame.

    Example
    -------
    >>> import torch
    >>> from speechbrain.dataio.dataset import DynamicItemDataset
    >>> data = DynamicItemDataset({"a": {"fbank": torch.ones(3, 2)}, "b": {"fbank": torch.full((1, 2), 3.0)}})
    >>> data.set_output_keys(["id", "fbank"])
    >>> mean_training_frame(data, batch_size=2).tolist()  # padding of "b" left out
    [1.5, 1.5]
    """
    loader = sb.dataio.dataloader.make_dataloader(dataset, batch_size=batch_size, shuffle=False)
    total, frames = 0.0, 0
    for i, batch in enumerate(loader):
        if i == max_batches:
            break
        fbank, lengths = batch.fbank.data, absolute_lengths(batch.fbank)
        mask = lengths_to_mask(lengths, fbank.shape[1])
        total = total + fbank[mask].sum(0)
        frames += int(mask.sum())
    return total / max(frames, 1)


def reference_surprisal(dataset, mean_frame: torch.Tensor) -> Dict[str, float]:
    """Frame-weighted mean surprisal ``0.5 ||x_t - xhat_t||^2`` of two predictors that learn nothing.

    ``copy_previous_frame``: xhat_t = x_{t-1} (x_0 = 0, APC's causal zero frame);
    ``mean_frame``: xhat_t = ``mean_frame``. An APC model worth its name scores well below both.

    Arguments
    ---------
    dataset : iterable of dict
        Items with an ``fbank`` tensor (T, D).
    mean_frame : torch.Tensor
        (D,) the mean-frame predictor's constant prediction.

    Returns
    -------
    dict
        ``copy_previous_frame`` and ``mean_frame``: mean surprisal per frame.

    Example
    -------
    >>> import torch
    >>> reference_surprisal([{"fbank": torch.ones(3, 2)}, {"fbank": torch.full((1, 2), 3.0)}], torch.ones(2))
    {'copy_previous_frame': 2.5, 'mean_frame': 1.0}
    """
    totals = {"copy_previous_frame": 0.0, "mean_frame": 0.0}
    frames = 0
    for item in dataset:
        x = item["fbank"].float()
        previous = torch.cat([x.new_zeros(1, x.shape[1]), x[:-1]])
        totals["copy_previous_frame"] += float(0.5 * (x - previous).pow(2).sum())
        totals["mean_frame"] += float(0.5 * (x - mean_frame).pow(2).sum())
        frames += x.shape[0]
    return {name: total / max(frames, 1) for name, total in totals.items()}


def pretraining_settings(hparams: Mapping, data_ids: Optional[Mapping[str, Iterable[str]]] = None) -> Dict[str, Dict]:
    """What an APC pretraining's result depends on: ``config`` (the model's constructor arguments) and
    ``training`` (named by their hparams keys, and ``apc_data``, a digest of the utterance ids of each
    split where ``data_ids`` gives them), as JSON values.

    Arguments
    ---------
    hparams : mapping
        The keys :func:`pretrain_apc` reads.
    data_ids : mapping of str to iterable of str, optional
        The utterance ids of each split (``train``, ``valid``); None or empty: the data is not compared.

    Returns
    -------
    dict
        ``{"config": {...}, "training": {...}}``.
    """
    perturbation = hparams.get("apc_speed_perturbation")
    training = {"apc_epochs": hparams["apc_epoch_counter"].limit,
                "apc_lr": getattr(hparams["apc_opt_class"], "keywords", {}).get("lr"),
                "apc_batch_size": hparams["apc_loader_options"]["batch_size"],
                "apc_max_grad_norm": hparams.get("apc_max_grad_norm", 5.0),
                "apc_speed_perturb": list(perturbation.factors) if perturbation is not None else []}
    if data_ids:
        training["apc_data"] = data_digest(data_ids)
    return json.loads(json.dumps({"config": apc_config(hparams["apc_model"]), "training": training}))


def data_digest(data_ids: Mapping[str, Iterable[str]]) -> str:
    """A short digest of the utterance ids of each split: other data, another digest.

    Example
    -------
    >>> data_digest({"train": ["b", "a"], "valid": ["c"]}) == data_digest({"valid": ["c"], "train": ["a", "b"]})
    True
    """
    text = json.dumps({split: sorted(map(str, ids)) for split, ids in sorted(data_ids.items())})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def settings_differences(stored: Mapping, requested: Mapping) -> List[str]:
    """``"key: stored X, requested Y"`` for each setting of :func:`pretraining_settings` that both
    hold and that differs (a setting ``stored`` lacks, as in files written before it was stored, is
    not compared).

    Example
    -------
    >>> settings_differences({"config": {"residual": False}},
    ...                      {"config": {"residual": True}, "training": {"apc_epochs": 6}})
    ['apc_residual: stored False, requested True']
    """
    stored = json.loads(json.dumps(dict(stored), default=str))
    differences = []
    for part in ("config", "training"):
        old = stored.get(part) or {}
        for key, value in requested.get(part, {}).items():
            if key in old and old[key] != value:
                name = key if part == "training" else "apc_residual" if key == "residual" else f"apc_model.{key}"
                name += " (the training and validation utterances)" if key == "apc_data" else ""
                differences.append(f"{name}: stored {old[key]!r}, requested {value!r}")
    return differences


def check_stored_settings(hparams: Mapping, settings: Mapping, export: Optional[os.PathLike] = None,
                          todo: Optional[str] = None) -> None:
    """Refuse an existing export or checkpoints of ``hparams``' APC pretraining made with other
    ``settings`` (:func:`pretraining_settings`): they would be reused as if made with these. The
    export (``export``, default ``apc_export_path``: where a run read from elsewhere found it) is checked
    where it exists, else the checkpoint folder (when there is a checkpointer). One
    :class:`ConfigurationError` line naming them and ``todo`` (what to do; default: pretrain elsewhere or
    again)."""
    export = Path(export if export is not None else hparams["apc_export_path"])
    checkpointer = hparams.get("apc_checkpointer")
    found = []
    if export.is_file():
        try:
            found.append((export, torch.load(export, map_location="cpu", weights_only=True)))
        except Exception:  # not a model file: load_apc says so where it is loaded
            pass
    elif checkpointer is not None and checkpointer.list_checkpoints():
        settings_file = Path(checkpointer.checkpoints_dir) / SETTINGS_FILE
        if settings_file.is_file():
            try:
                found.append((settings_file.parent, json.loads(settings_file.read_text(encoding="utf-8"))))
            except (ValueError, UnicodeDecodeError):
                raise ConfigurationError(f"{settings_file} is not the JSON of the settings the checkpoints beside it "
                                         "were trained with: delete it to resume without the check") from None
    for path, stored in found:
        differences = settings_differences(stored, settings) if isinstance(stored, dict) else []
        if differences:
            if todo is None:
                todo = (f"give another apc_output_folder (or experiment_root), or delete "
                        f"{hparams['apc_output_folder']} to pretrain again")
            raise ConfigurationError(f"{path}: APC pretrained with other settings ({'; '.join(differences)}); {todo}")


def existing_export(hparams: Mapping, settings: Mapping) -> Optional[Path]:
    """``apc_export_path`` where it exists, to be used instead of pretraining; None where it does not. An
    export or checkpoints made with other ``settings`` are refused first (:func:`check_stored_settings`)."""
    check_stored_settings(hparams, settings)
    export = Path(hparams["apc_export_path"])
    if not export.exists():
        return None
    logger.info("APC model %s exists: skipping pretraining", export)
    return export


def _write_settings(save_folder: Path, settings: Mapping) -> None:
    """``save_folder/apc_settings.json``, replaced whole (a reader never sees it half written)."""
    save_folder.mkdir(parents=True, exist_ok=True)
    partial = save_folder / (SETTINGS_FILE + ".partial")
    partial.write_text(json.dumps(settings, indent=2), encoding="utf-8")
    os.replace(partial, save_folder / SETTINGS_FILE)


def pretrain_apc(datasets: Mapping[str, sb.dataio.dataset.DynamicItemDataset], hparams: Dict, run_opts: Dict) -> Path:
    """Pretrain an APC model on ``datasets["train"]`` (validation on ``datasets["valid"]``) and export it.

    Resumes from its checkpoints; skips training when the exported file already exists. An export,
    or checkpoints, made with other settings (:func:`pretraining_settings`, stored with the export
    and as ``apc_settings.json`` in the checkpoint folder) are a :class:`ConfigurationError`. A fresh
    start sets the head's bias from the mean training frame (:meth:`APCModel.init_output_bias`),
    and the validation surprisal of the reference predictors (:func:`reference_surprisal`) is
    written once to ``<apc_output_folder>/reference_surprisal.json``.

    Arguments
    ---------
    datasets : mapping of str to DynamicItemDataset
        ``train`` and ``valid`` datasets with an ``fbank`` output key.
    hparams : dict
        Needs ``apc_model`` (APCModel), ``apc_opt_class``, ``apc_epoch_counter``,
        ``apc_checkpointer``, ``train_logger``, ``apc_output_folder``, ``apc_export_path`` and
        ``apc_loader_options``; optional ``apc_max_grad_norm`` (default 5), ``precision`` and
        ``apc_speed_perturbation`` (:class:`~surprisal_cc.training.augment.SpeedPerturbation`, drawn in
        training stages only; the training dataset reads it, as :func:`~surprisal_cc.training.frozen_features.pretrain_apc_on` sets up).
    run_opts : dict
        SpeechBrain run options (device, ...).

    Returns
    -------
    pathlib.Path
        The exported model file.
    """
    settings = pretraining_settings(hparams, {split: dataset.data_ids for split, dataset in datasets.items()})
    export = existing_export(hparams, settings)
    return export if export is not None else train_apc(datasets, hparams, run_opts, settings)


def train_apc(datasets: Mapping[str, sb.dataio.dataset.DynamicItemDataset], hparams: Dict, run_opts: Dict,
              settings: Mapping) -> Path:
    """:func:`pretrain_apc` once :func:`existing_export` found no export to use: trains (from its
    checkpoints, where there are some), stores ``settings`` (:func:`pretraining_settings` of the datasets)
    with the checkpoints and the export, and returns the exported file."""
    export = Path(hparams["apc_export_path"])
    model: APCModel = hparams["apc_model"]
    if if_main_process():
        _write_settings(Path(hparams["apc_checkpointer"].checkpoints_dir), settings)
    fresh_start = not hparams["apc_checkpointer"].list_checkpoints()
    reference_file = Path(hparams["apc_output_folder"]) / "reference_surprisal.json"
    needs_reference = if_main_process() and not reference_file.exists()
    if fresh_start or needs_reference:
        mean_frame = mean_training_frame(datasets["train"], hparams["apc_loader_options"]["batch_size"])
    if fresh_start:
        model.init_output_bias(mean_frame)
    if needs_reference:
        reference = reference_surprisal(datasets["valid"], mean_frame)
        reference_file.write_text(json.dumps(reference, indent=2))
        logger.info("validation surprisal of predictors that learn nothing: %s", reference)
    brain = APCBrain(modules={"apc": model}, opt_class=hparams["apc_opt_class"],
                     hparams={"train_logger": hparams["train_logger"], "output_folder": hparams["apc_output_folder"],
                              "max_grad_norm": hparams.get("apc_max_grad_norm", 5.0),
                              "precision": hparams.get("precision", "fp32"),
                              "speed_perturbation": hparams.get("apc_speed_perturbation")},
                     run_opts=run_opts, checkpointer=hparams["apc_checkpointer"])
    brain.fit(hparams["apc_epoch_counter"], datasets["train"], datasets["valid"],
              train_loader_kwargs=hparams["apc_loader_options"],
              valid_loader_kwargs={**hparams["apc_loader_options"], "shuffle": False})
    return brain.export_best(export, training=settings["training"])
