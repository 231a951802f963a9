"""Experiments over many runs: the ``grid`` of runs (``grid_spec`` reads a grid file, ``run_locks``
keeps two grids off one run), the results tables (``aggregation``, ``run_labels``, ``tables``, ``report``,
``learning_curves``, ``plots``) and the surprisal ``analysis``.

May import: everything below it (shared modules, data, model, decoding, training, inference);
nothing imports it but the command line.
"""
