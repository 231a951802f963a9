"""Training a model with SpeechBrain: the ``brain`` of the ASR recipes and ``apc_training`` (their
``base_brain``), the ``datasets`` and their ``augment``-ation, the frozen-APC feature ``cache``
(``frozen_features``), ``schedulers``, ``checkpoints``, the recipes' shared steps (``recipe``,
``command_line``, ``run_settings`` with its ``run_checks`` and ``precision``, ``labels``), the settings a
resumed run or a grid may not change (``changed_settings``) and the ``label_record`` of a run, what a run
folder holds (``run_folder``), ``export`` of a finished run as a model folder, and the memory
``allocator``.

May import: the shared modules, ``data``, ``model`` and ``decoding``.
"""
