"""The errors that end a recipe or command with one clear message instead of a traceback."""


class ConfigurationError(ValueError):
    """A problem with the hparams file, the command-line overrides or a model folder."""


class UsageError(ValueError):
    """A malformed command line found after parsing (exit status 2, as argparse's own errors)."""


class TrainingDivergedError(RuntimeError):
    """More training batches of one epoch had a non-finite loss than ``nonfinite_patience`` allows."""
