"""The steps a recipe script (``recipes/*/train.py``, ``pretrain_apc.py``) takes beside its settings
(:mod:`surprisal_cc.training.run_settings`), frozen features (:mod:`surprisal_cc.training.frozen_features`) and datasets
(:mod:`surprisal_cc.training.datasets`): the corpus prepared (:func:`prepare_manifests`, the corpus's ``prepare_*``
function) with its labels (:func:`prepare_labels`: phones checked against the phone set, or sentencepiece
units trained), a ``--debug`` run's splits cut to a few batches (:func:`debug_manifests`), and the
script's end (:func:`recipe_errors`: configuration and data errors as one line ``error: ...``, the DDP
process group closed).
"""
from __future__ import annotations

import contextlib
import csv
import gc
import inspect
import io
import logging
import sys
from pathlib import Path
from typing import Callable, Dict, Mapping

import torch
from speechbrain.utils.distributed import run_on_main

from surprisal_cc.errors import ConfigurationError, TrainingDivergedError, os_error_line
from surprisal_cc.training.labels import SentencePieceLabels, train_units
from surprisal_cc.model.nnet import keyword_names
from surprisal_cc.training.run_checks import check_manifest_phones, check_num_outputs

logger = logging.getLogger(__name__)


def prepare_manifests(prepare: Callable[..., Dict[str, str]], hparams: Mapping) -> Dict[str, str]:
    """Run the corpus's ``prepare`` function with the hparams key ``prepare_options`` on the main
    process, then on every process (a repeat returns the manifests at once), and return
    ``{split: manifest path}``. Options that ``prepare`` does not take, or lacks, are a clear error first.
    Where ``prepare`` takes ``sample_rate`` and the options leave it out, it is the features' rate
    (``feature_config``), which words the warning about audio at other rates.

    Example
    -------
    >>> def prepare_toy(save_folder: str, speakers: int = 2):
    ...     return {"train": f"{save_folder}/train.csv"}
    >>> prepare_manifests(prepare_toy, {"prepare_options": {"save_folder": "out"}})
    {'train': 'out/train.csv'}
    >>> prepare_manifests(prepare_toy, {"prepare_options": {"save_folder": "out", "speaker": 3}})
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: prepare_options: 'speaker' is not an argument of prepare_toy, which takes ['save_folder', 'speakers']
    >>> def prepare_rated(save_folder: str, sample_rate: int = 16000):
    ...     return {"train": f"{save_folder}/train.csv ({sample_rate} Hz)"}
    >>> from surprisal_cc.model.feature_config import FeatureConfig
    >>> prepare_manifests(prepare_rated, {"prepare_options": {"save_folder": "out"},
    ...                                   "feature_config": FeatureConfig(sample_rate=8000)})
    {'train': 'out/train.csv (8000 Hz)'}
    >>> prepare_manifests(prepare_toy, {"prepare_options": {"speakers": 3}})
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: prepare_options lacks 'save_folder', which prepare_toy needs
    """
    options = dict(hparams["prepare_options"])
    taken = keyword_names(prepare)
    for key in options:
        if taken is not None and key not in taken:
            raise ConfigurationError(f"prepare_options: {key!r} is not an argument of {prepare.__name__}, "
                                     f"which takes {sorted(taken)}")
    needed = [p.name for p in inspect.signature(prepare).parameters.values()
              if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    missing = [name for name in needed if name not in options]
    if missing:
        raise ConfigurationError(f"prepare_options lacks {', '.join(map(repr, missing))}, which "
                                 f"{prepare.__name__} needs")
    if "sample_rate" in (taken or ()) and "sample_rate" not in options and "feature_config" in hparams:
        options["sample_rate"] = hparams["feature_config"].sample_rate
    run_on_main(prepare, kwargs=options)
    return prepare(**options)


def prepare_labels(hparams: Dict, manifests: Mapping[str, str]) -> None:
    """Check the manifests' phones against the label set (``phone_set``), or with ``target_unit:
    sentencepiece``, train the units on the training words (main process) and make them
    ``hparams["label_encoder"]``. The units lie beside the training manifest, in its preparation's
    folder: other options (validation speakers, subsets) give other training words, hence units of
    their own."""
    if hparams.get("target_unit", "phone") != "sentencepiece":
        encoder = hparams["label_encoder"]
        check_manifest_phones(manifests, [label for label in encoder.lab2ind if label != encoder.blank_label])
        return
    sp_dir = Path(manifests["train"]).parent / f"sentencepiece_{hparams['sp_vocab_size']}"
    run_on_main(train_units, args=[sp_dir, hparams["sp_vocab_size"], manifests["train"]])
    hparams["label_encoder"] = SentencePieceLabels(sp_dir, hparams["sp_vocab_size"], manifests["train"])
    check_num_outputs(hparams)


def debug_utterances(hparams: Mapping, run_opts: Mapping, batch_size_key: str = "batch_size") -> int:
    """N, the utterances of each split a ``--debug`` run keeps: ``debug_batches`` x the batch size
    (``hparams[batch_size_key]``), so validation and test run their ``debug_batches`` batches. With
    ``dynamic_batching`` ``batch_size`` is still the validation and test batch, and a training batch of
    ``max_batch_length`` seconds holds about as many utterances (the profiles: 400 s, about 32).

    Example
    -------
    >>> debug_utterances({"batch_size": 32}, {"debug": True, "debug_batches": 2})
    64
    """
    return int(run_opts.get("debug_batches") or 2) * int(hparams[batch_size_key])


def debug_manifests(hparams: Mapping, manifests: Mapping[str, str], run_opts: Mapping,
                    folder_key: str = "output_folder", batch_size_key: str = "batch_size") -> Dict[str, str]:
    """The manifests a run reads: with ``--debug``, each split's cut to its first N utterances
    (:func:`debug_utterances`), written (on the main process) as ``<split>.csv`` in
    ``<hparams[folder_key]>/debug_manifests/``, the debug run's own folder
    (:func:`~surprisal_cc.training.command_line.debug_folder_overrides`), so that the feature cache, APC
    pretraining, calibration and datasets built from them touch those utterances only; the prepared
    manifests are left as they are. Without ``--debug``, ``manifests`` as they are. APC pretraining
    passes ``apc_output_folder`` and ``apc_batch_size``.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "train.csv").write_text("ID,wav\\n" + "".join(f"u{i},u{i}.flac\\n" for i in range(9)))
    ...     cut = debug_manifests({"batch_size": 2, "output_folder": f"{tmp}/run-debug"}, {"train": f"{tmp}/train.csv"},
    ...                           {"debug": True, "debug_batches": 2})
    ...     print(Path(cut["train"]).relative_to(tmp), Path(cut["train"]).read_text().split())
    run-debug/debug_manifests/train.csv ['ID,wav', 'u0,u0.flac', 'u1,u1.flac', 'u2,u2.flac', 'u3,u3.flac']
    """
    if not run_opts.get("debug"):
        return dict(manifests)
    count = debug_utterances(hparams, run_opts, batch_size_key)
    folder = Path(hparams[folder_key]) / "debug_manifests"
    cut = {split: str(folder / f"{split}.csv") for split in manifests}
    for split, manifest in manifests.items():
        run_on_main(_write_first_rows, args=[manifest, cut[split], count])
    logger.info("--debug: the first %d utterances (debug_batches x batch size) of each split, in %s", count, folder)
    return cut


def _write_first_rows(manifest: str, target: str, count: int) -> None:
    """``target``: the manifest CSV ``manifest`` with its first ``count`` rows, every field as written."""
    from surprisal_cc.data.manifest import atomic_write_text, read_manifest

    columns, rows = read_manifest(manifest, ("ID",), resolve_wav=False)  # wav as the datasets read it
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows[:count])
    atomic_write_text(target, out.getvalue())


@contextlib.contextmanager
def recipe_errors():
    """Configuration, data and divergence errors, and a file or folder the run cannot read or write, end
    the script with one line ``error: ...`` (exit 1).

    Under torchrun the process group is also closed here, after a barrier when the script succeeded,
    so no rank tears down its communication threads at interpreter exit while another still uses them.

    Example
    -------
    >>> with recipe_errors():
    ...     raise ConfigurationError("num_outputs is 40")
    Traceback (most recent call last):
    SystemExit: error: num_outputs is 40
    >>> with recipe_errors():
    ...     open("/nonexistent-folder/labels.csv")
    Traceback (most recent call last):
    SystemExit: error: /nonexistent-folder/labels.csv: No such file or directory
    """
    from surprisal_cc.data import DataPreparationError

    succeeded = False
    try:
        yield
        succeeded = True
    except (ConfigurationError, DataPreparationError, TrainingDivergedError) as err:
        sys.exit(f"error: {err}")
    except OSError as err:  # a file or folder the run reads or writes: named, with the system's reason
        if not (err.filename and err.strerror):
            raise
        sys.exit(f"error: {os_error_line(err)}")
    finally:
        close_process_group(barrier=succeeded)


def close_process_group(barrier: bool = True) -> None:
    """Leave the DDP process group, if this process joined one (a no-op otherwise): wait for every
    rank first when ``barrier``, then destroy the group explicitly rather than at interpreter exit.

    The Brain's DDP wrappers sit in reference cycles that outlive ``main()``; they are collected
    first, so their reducers release the group now and not during the interpreter's shutdown,
    where gloo's threads can abort a finished run (SIGABRT)."""
    from speechbrain.utils.distributed import ddp_barrier, is_distributed_initialized

    if is_distributed_initialized():
        gc.collect()
        if barrier:
            ddp_barrier()  # SpeechBrain's: passes the CUDA device under NCCL
        torch.distributed.destroy_process_group()
