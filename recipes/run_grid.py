#!/usr/bin/env python3
"""Run an experiment grid (resumable), then write the tables and figures to <experiment_root>/report.

    python recipes/run_grid.py hparams/MiniLibriSpeech/grid_cpu.yaml --dry-run
    python recipes/run_grid.py hparams/MiniLibriSpeech/grid_paper.yaml --jobs 4 --only controllers
    python recipes/run_grid.py hparams/MiniLibriSpeech/grid_paper.yaml --device=cuda:0

Extra --key=value options are passed to every run. See surprisal_cc/grid.py for the grid format.
"""
import sys

from surprisal_cc.grid import main

if __name__ == "__main__":
    sys.exit(main())
