#!/usr/bin/env python3
"""Mini-LibriSpeech phone recognition with surprisal-triggered conditional computation.

Trains on train-clean-5 (minus 3 held-out validation speakers, which select the checkpoint),
reports mfa-dev (a labelled development split, when staged) and tests on dev-clean-2:

    python recipes/MiniLibriSpeech/train.py hparams/MiniLibriSpeech/conditional_ctc.yaml \\
        --data_folder=data/MiniLibriSpeech [--controller=random] [--device=cuda:0]

Re-running the same command resumes an interrupted run; with ``--debug`` it checks the pipeline on
debug_batches x batch_size utterances of each split, in <output_folder>-debug (docs/recipes.md).
Results: README.md beside this file.
"""
import sys

import speechbrain as sb

from surprisal_cc.training.brain import ConditionalCTCBrain
from surprisal_cc.data import prepare_mini_librispeech
from surprisal_cc.data.librispeech import DEV_SPLIT
from surprisal_cc.training.datasets import dataio_prep, training_loader_options
from surprisal_cc.training.frozen_features import feature_cache, obtain_apc
from surprisal_cc.training.recipe import debug_manifests, prepare_labels, prepare_manifests, recipe_errors
from surprisal_cc.training.run_settings import create_experiment_directory, load_hparams
from surprisal_cc.training.command_line import parse_arguments


def main(argv):
    # Command line and hparams (every --key=value must name a key of the file), the DDP group
    # when run by torchrun, and the experiment folder with the resolved hyperparams.yaml.
    hparams_file, run_opts, overrides = parse_arguments(argv)
    sb.utils.distributed.ddp_init_group(run_opts)
    hparams = load_hparams(hparams_file, overrides, run_opts)
    create_experiment_directory(hparams["output_folder"], hparams_file, overrides,
                                test_only=bool(run_opts.get("test_only", False)), hparams=hparams)

    # Manifests: train-clean-5 without the validation speakers, the validation speakers,
    # mfa-dev (MFA TextGrids) and dev-clean-2 (the paper's MFA labels), labels checked.
    # The main process writes them; every process reads them.
    manifests = prepare_manifests(prepare_mini_librispeech, hparams)
    prepare_labels(hparams, manifests)  # phones checked against phone_set (sentencepiece: its units trained)

    # --debug: each split cut to its first debug_batches x batch_size utterances, in the debug run's
    # own folder (<output_folder>-debug), so everything below touches only those.
    manifests = debug_manifests(hparams, manifests, run_opts)

    # The frozen APC model: loaded from apc_path, or pretrained on the training split.
    apc = obtain_apc(hparams, manifests, run_opts)

    # Filterbanks, APC features and surprisal of every utterance (and of the training audio at
    # each perturbation speed), computed once.
    cache = feature_cache(hparams, manifests, apc, device=run_opts.get("device", "cpu"))

    # DynamicItemDatasets: cached features, CTC targets (or pronunciation graphs).
    datasets = dataio_prep(hparams, manifests, cache)

    asr_brain = ConditionalCTCBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams,
                                    run_opts=run_opts, checkpointer=hparams["checkpointer"], apc=apc,
                                    manifests=manifests)
    # The surprisal controller's two parameters fitted to its target p_big statistics (Eq. 4), then frozen.
    asr_brain.calibrate_controller(datasets["train"])

    if hparams["test_flops_fraction"] is not None:  # the test-time bias that meets a FLOPs budget
        asr_brain.set_test_flops_budget(hparams["test_flops_fraction"], datasets[hparams["test_budget_split"]],
                                        split=hparams["test_budget_split"])

    # CTC training; checkpoints kept by the validation error rate (selection_metric: PER, or TER with sentencepiece).
    asr_brain.fit(hparams["epoch_counter"], datasets["train"], datasets["valid"],
                  train_loader_kwargs=training_loader_options(hparams, datasets["train"]),
                  valid_loader_kwargs=hparams["test_loader_options"])

    # The best checkpoint decodes mfa-dev and dev-clean-2 (beam search) at each controller bias
    # shift (Appendix B; [0.0] by default).
    for shift in hparams["test_bias_shifts"]:
        asr_brain.set_test_bias_shift(shift)
        if DEV_SPLIT in datasets:
            asr_brain.evaluate_split(datasets[DEV_SPLIT], DEV_SPLIT, min_key=hparams["selection_metric"],
                                     test_loader_kwargs=hparams["test_loader_options"])
        asr_brain.evaluate(datasets["test"], min_key=hparams["selection_metric"],
                           test_loader_kwargs=hparams["test_loader_options"])


if __name__ == "__main__":
    with recipe_errors():  # bad configuration or data: one line "error: ...", no traceback
        main(sys.argv[1:])
