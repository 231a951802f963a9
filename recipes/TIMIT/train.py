#!/usr/bin/env python3
"""TIMIT phone recognition (39 folded phones) with surprisal-triggered conditional computation.

Prepares TIMIT (LDC layout; SA removed, 61 -> 39 folding, 50-speaker dev set, 192-utterance core
test), loads the LibriSpeech-pretrained APC model (``--apc_path``), calibrates the controller,
trains with CTC and decodes the core test set with beam search.

    python recipes/TIMIT/train.py hparams/TIMIT/conditional_ctc.yaml \
        --data_folder=/path/to/TIMIT --apc_path=results/LibriSpeech/apc/apc.pt
"""
from surprisal_cc.data import prepare_timit
from surprisal_cc.recipe import main_entry

if __name__ == "__main__":
    main_entry(prepare_timit)
