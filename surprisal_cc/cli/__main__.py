"""``python -m surprisal_cc.cli``: the ``surprisal-cc`` command."""
import sys

from surprisal_cc.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
