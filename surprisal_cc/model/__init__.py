"""The model: what a trained network is and computes.

Filterbank ``features`` (defined by ``feature_config``, which the ONNX runtime shares), the ``apc``
model (features and per-frame surprisal), the ``controllers`` that route a frame to the small or the big
network, the routed ``encoders`` and the ``adaptive`` ones (ACT, PonderNet), their shared layers
(``nnet``), ``architectures`` (encoders built from the YAML ``graphs/``), the ``forward`` pass that
training and inference share, ``flops`` counted from what ran, the controller's ``calibration``, the
``ctc`` objective over pronunciations, and the ``model_folder`` format of a trained model.

May import: the shared modules (errors, checks, config, runtime), ``data`` and ``decoding``.
"""
