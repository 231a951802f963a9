"""surprisal_cc: surprisal-triggered conditional computation for CTC speech recognition.

The model: ``features`` (filterbanks), ``apc`` (features and per-frame surprisal), ``controllers``
(small/big decisions), ``encoders`` (the conditional encoder, really routed), ``adaptive`` (ACT and
PonderNet), ``nnet`` (the encoder interface and shared layers), ``flops`` (MACs counted from what ran).
Training is ``brain`` and the recipes' steps; using a trained model is ``inference``; the command line
is ``cli``. Every module, and the layer it belongs to: docs/design.md, section Modules.
"""

__version__ = "0.1.0"

from surprisal_cc.aliases import install as _install_aliases

_install_aliases()  # old dotted paths of published hyperparams files (surprisal_cc.aliases)
