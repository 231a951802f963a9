"""From per-frame log-probabilities to phones: CTC beam ``search`` (numpy; the third-party searchers it can
run instead in ``backends``, which import torch), ``viterbi`` forced alignment, phone ``timestamps``, one
utterance's ``transcription`` (as both runtimes return it), and the error-rate ``metrics`` (corpus-level
edit distance).

May import: the shared modules (errors, checks, config, runtime) and ``data``.
"""


def __getattr__(name: str):
    from surprisal_cc.aliases import old_attribute

    return old_attribute(__name__, name)  # the old module surprisal_cc.decoding's names
