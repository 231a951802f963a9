"""surprisal_cc: surprisal-triggered conditional computation for CTC speech recognition.

Modules
-------
features     log-mel filterbank front end (Kaldi-compatible) with frame skipping
apc          autoregressive predictive coding model: features and per-frame surprisal
cache        on-disk cache of frozen APC outputs, keyed by weights and feature settings
controllers  per-frame small/big decisions (surprisal, random, learned, big-only, small-only)
encoders     conditional CTC encoder with real routing; encoder interface
architectures  the encoders' model files (surprisal_cc/models) and build_encoder, which builds them
adaptive     ACT and PonderNet adaptive-depth encoders
flops        multiply-accumulate accounting (paper convention)
decoding     CTC beam search
metrics      corpus-level phone/word error rates
data         corpus preparation (Mini-LibriSpeech, LibriSpeech, TIMIT) and phone labels
"""

__version__ = "0.1.0"
