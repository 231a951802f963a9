#!/usr/bin/env python3
"""TIMIT phone recognition (39 folded phones) with surprisal-triggered conditional computation.

Prepares TIMIT (LDC layout; SA sentences removed, 61 -> 39 folding, the 50-speaker dev set, the
192-utterance core test set), loads the LibriSpeech-pretrained APC model (``--apc_path``),
caches features and surprisal, calibrates the controller, trains with CTC (checkpoints selected
by dev PER) and decodes the core test set with CTC beam search.

    python recipes/TIMIT/train.py hparams/TIMIT/conditional_ctc.yaml \
        --data_folder=/path/to/TIMIT --apc_path=results/LibriSpeech/apc/apc.pt

Re-running the same command resumes an interrupted run. Results: README.md beside this file.
"""
import sys

import speechbrain as sb
from speechbrain.utils.distributed import run_on_main

from surprisal_cc import recipe
from surprisal_cc.brain import ConditionalCTCBrain
from surprisal_cc.data import prepare_timit

if __name__ == "__main__":
    with recipe.recipe_errors():  # bad configuration or data: one line "error: ...", no traceback
        hparams_file, run_opts, overrides = recipe.parse_arguments(sys.argv[1:])
        sb.utils.distributed.ddp_init_group(run_opts)
        hparams = recipe.load_hparams(hparams_file, overrides, run_opts)
        recipe.create_experiment_directory(hparams["output_folder"], hparams_file, overrides,
                                           test_only=run_opts["test_only"], hparams=hparams)

        # Manifests of train / dev / core test, phones folded and checked (main process first).
        run_on_main(prepare_timit, kwargs=hparams["prepare_options"])
        manifests = prepare_timit(**hparams["prepare_options"])
        recipe.prepare_labels(hparams, manifests)

        # The frozen APC model (apc_path, or pretrained on TIMIT train) and the feature cache.
        apc = recipe.obtain_apc(hparams, manifests, run_opts)
        cache = recipe.feature_cache(hparams, manifests, apc)
        datasets = recipe.build_datasets(hparams, manifests, cache)

        brain = ConditionalCTCBrain(modules=hparams["modules"], opt_class=hparams["opt_class"],
                                    hparams=hparams, run_opts=run_opts, checkpointer=hparams["checkpointer"],
                                    apc=apc, manifests=manifests)
        brain.calibrate_controller(datasets["train"])  # surprisal -> p_big statistics (Eq. 4)
        brain.fit(hparams["epoch_counter"], datasets["train"], datasets["valid"],
                  train_loader_kwargs=recipe.training_loader_options(hparams, datasets["train"]),
                  valid_loader_kwargs=hparams["test_loader_options"])

        for shift in hparams["test_bias_shifts"]:  # Appendix B: controller bias shifted at test time
            brain.set_test_bias_shift(shift)
            brain.evaluate(datasets["test"], min_key=hparams["selection_metric"],
                           test_loader_kwargs=hparams["test_loader_options"])
