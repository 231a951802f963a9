"""The ``surprisal-cc`` command line: its parser and dispatch (``main``); the commands are those of
:mod:`~surprisal_cc.cli.model_commands` (using a model) and :mod:`~surprisal_cc.cli.experiment_commands`
(experiments).

A configuration or data error ends a command with one line ``error: ...`` per problem on stderr and exit
status 1 (2 for a command-line usage error); results already printed stay printed (each is flushed as it
finishes). The benchmarks of a source checkout run with ``python -m benchmarks.run_all`` (``make bench``).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import warnings
from typing import List, Optional

from surprisal_cc.cli import experiment_commands, model_commands
from surprisal_cc.errors import UsageError, os_error_line

#: the command families, as ``surprisal-cc --help`` groups them
FAMILIES = (("using a model", model_commands), ("experiments", experiment_commands))
COMMANDS = {**model_commands.COMMANDS, **experiment_commands.COMMANDS}
DESCRIPTION = """Conditional-computation phone recognition with APC surprisal: use a trained model, or run experiments.
A configuration or data error ends a command with one line "error: ..." per problem on stderr and exit
status 1 (2 for a command-line usage error); results already printed stay printed."""
# commands that take --key=value overrides besides their own options
TAKE_OVERRIDES = ("flops", "grid")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line ``error: ...`` (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")



def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line; ``command`` (the one about to run) is the only experiment tool whose module is
    imported for its options, so that ``transcribe`` and ``--help`` do not import the tools (None: no
    tool's options, as for ``surprisal-cc --help``). The help lists the commands by family."""
    import surprisal_cc

    parser = _Parser(prog="surprisal-cc", usage="surprisal-cc [-h] [--version] COMMAND ...", description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog="surprisal-cc COMMAND --help: the command's options")
    parser.add_argument("--version", action="version", version=f"surprisal-cc {surprisal_cc.__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS,
                                       prog="surprisal-cc")
    width = max(len(name) for _, family in FAMILIES for name in family.HELP)
    for title, family in FAMILIES:
        parser.add_argument_group(title, "\n".join(f"{name:<{width}}  {text}" for name, text in family.HELP.items()))
        family.add_parsers(subparsers, command)
    for name in TAKE_OVERRIDES:
        _usage_with_overrides(subparsers.choices[name])
    return parser


def _usage_with_overrides(parser: argparse.ArgumentParser) -> None:
    """Show a command's ``--key=value`` overrides (:data:`TAKE_OVERRIDES`) in its usage line (after its options
    are added)."""
    parser.usage = parser.format_usage().split("usage: ", 1)[1].rstrip() + " [--key=value ...]"



@contextlib.contextmanager
def _one_line_warnings():
    """Warnings as ``warning: ...`` lines on stderr, without source locations."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda message, *args, **kwargs: print(f"warning: {message}", file=sys.stderr)
        yield


def _print_error(err: BaseException) -> None:
    from surprisal_cc.data.errors import BadAudioError

    if isinstance(err, BadAudioError):
        lines = [*err.problems, *([err.hint] if err.hint else [])]
    elif isinstance(err, OSError) and err.filename and err.strerror and str(err).startswith("[Errno"):
        lines = [os_error_line(err)]
    else:
        lines = [str(err).strip() or type(err).__name__]
    for line in lines:
        print(f"error: {line}", file=sys.stderr)


_DISCARD = logging.NullHandler()


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so that flushing it at exit raises no second BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (captured output): nothing to flush to a pipe
        pass


def _printable_stdout() -> None:
    """Let standard output print any file name: one whose bytes are not valid in the locale's
    encoding (held as surrogate escapes) is written as escapes, as stderr does, instead of failing."""
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")


def main(argv: Optional[List[str]] = None) -> int:
    _printable_stdout()
    # SpeechBrain's notices (e.g. about optional packages) would reach stderr through logging's
    # last-resort handler; this CLI reports in its own lines
    logging.getLogger("speechbrain").addHandler(_DISCARD)
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command not in TAKE_OVERRIDES:  # named with the subcommand's help
        parser.exit(2, f"error: unrecognized arguments: {' '.join(unknown)} (see {parser.prog} {args.command} --help)\n")
    from yaml import YAMLError

    from surprisal_cc.errors import TrainingDivergedError

    try:
        with _one_line_warnings():
            return COMMANDS[args.command](args, unknown)
    except BrokenPipeError:  # the reader went away (`| head`): what it read is complete, say nothing more
        _silence_stdout()
        return 141  # as a shell reports a command ended by SIGPIPE
    except UsageError as err:  # the command line itself, as argparse's own errors
        _print_error(err)
        return 2
    except (ValueError, OSError, YAMLError, TrainingDivergedError) as err:  # configuration and data errors
        _print_error(err)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # anything else still ends in one line; SURPRISAL_CC_TRACEBACK=1 shows the trace
        if os.environ.get("SURPRISAL_CC_TRACEBACK"):
            raise
        message = " ".join(str(err).split())  # one line even for a library's multi-line message
        if len(message) > 300:
            message = message[:297] + "..."
        print(f"error: {type(err).__name__}: {message} (set SURPRISAL_CC_TRACEBACK=1 for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
