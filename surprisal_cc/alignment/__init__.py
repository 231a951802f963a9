"""Training labels from a trained model: ``realign`` (forced alignment with optional silences and
pauses) and ``label_eval`` (phone labels and boundaries scored against MFA's).

May import: the shared modules, ``data``, ``model``, ``decoding``, ``training`` and ``inference``.
"""
