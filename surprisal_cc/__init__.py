"""surprisal_cc: surprisal-triggered conditional computation for CTC speech recognition.

One subpackage per job, each layer importing only those below it: ``data`` (corpora, audio), ``decoding``
(beam search, alignment, PER), ``model`` (APC and its surprisal, controllers, routed and adaptive encoders,
FLOPs from what ran), ``training`` (the SpeechBrain Brain and the recipes' steps), ``inference``
(``ConditionalASR``), ``alignment`` (relabelling), ``experiments`` (grids, reports), ``cli``
(``surprisal-cc``); shared: ``errors``, ``checks``, ``config``, ``runtime``, ``aliases``. Every module and
its layer: docs/design.md, section Modules.
"""

__version__ = "0.1.0"

from surprisal_cc.aliases import install as _install_aliases

_install_aliases()  # old dotted paths of published hyperparams files (surprisal_cc.aliases)
