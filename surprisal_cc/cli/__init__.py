"""The ``surprisal-cc`` command line: its parser and dispatch (``commands``, ``main``), the commands using a model
(``model_commands``: transcribe, evaluate, export, flops) and those of experiments (``experiment_commands``:
grid, report, curves, analyse).

May import: everything; nothing imports it.
"""
from surprisal_cc.cli.commands import main

__all__ = ["main"]


def __getattr__(name: str):
    from surprisal_cc.aliases import old_attribute

    return old_attribute(__name__, name)  # the old module surprisal_cc.cli's names
