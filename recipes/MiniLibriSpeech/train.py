#!/usr/bin/env python3
"""Mini-LibriSpeech phone recognition with surprisal-triggered conditional computation.

Prepares train-clean-5 (minus held-out validation speakers) and dev-clean-2, loads or pretrains
the APC model, caches features and surprisal, calibrates the controller, trains with CTC
(checkpoints selected by validation PER) and decodes dev-clean-2 with CTC beam search.

    python recipes/MiniLibriSpeech/train.py hparams/MiniLibriSpeech/conditional_ctc.yaml \\
        --data_folder=data/MiniLibriSpeech [--controller=random] [--device=cuda:0]

Re-running the same command resumes an interrupted run. Results: README.md beside this file.
"""
import sys

import speechbrain as sb
from speechbrain.utils.distributed import run_on_main

from surprisal_cc import recipe
from surprisal_cc.brain import ConditionalCTCBrain
from surprisal_cc.data import prepare_mini_librispeech

if __name__ == "__main__":
    with recipe.recipe_errors():  # bad configuration or data: one line "error: ...", no traceback
        hparams_file, run_opts, overrides = recipe.parse_arguments(sys.argv[1:])
        sb.utils.distributed.ddp_init_group(run_opts)
        hparams = recipe.load_hparams(hparams_file, overrides, run_opts)
        recipe.create_experiment_directory(hparams["output_folder"], hparams_file, overrides,
                                           test_only=run_opts["test_only"], hparams=hparams)

        # Manifests of the three splits, labels checked (main process first, then read by all).
        run_on_main(prepare_mini_librispeech, kwargs=hparams["prepare_options"])
        manifests = prepare_mini_librispeech(**hparams["prepare_options"])
        recipe.prepare_labels(hparams, manifests)

        # The frozen APC model (apc_path, or pretrained on the training split) and the feature cache.
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
