"""``surprisal-cc transcribe --backend onnx``: :func:`transcribe_main` transcribes audio files with
:class:`~surprisal_cc.deploy.runtime.OnnxASR` and prints what ``surprisal-cc transcribe`` prints (text, JSON
Lines or CTM), without torch. The command line (``surprisal_cc.cli``) hands it its arguments, less
``--backend onnx``; ``python -m surprisal_cc.deploy.command AUDIO... --model DIR`` runs it alone.

Bad input ends in ``error:`` lines on stderr and a non-zero exit status: a model folder without graphs, or
with graphs of another version of the model, unusable audio (one line per file; ``--skip-bad`` leaves them
out), options the ONNX runtime does not take.

Example
-------
>>> transcribe_main(["missing.flac", "--model", "no/such/model"])
1
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from surprisal_cc.data.errors import BadAudioError
from surprisal_cc.data.audio_files import AudioInfo
from surprisal_cc.deploy.parts import PROGRESS_AFTER_S
from surprisal_cc.decoding.transcription import format_text
from surprisal_cc.deploy.runtime import DECODERS, OnnxASR

AUDIO_SUFFIXES = (".flac", ".wav", ".sph", ".ogg", ".opus", ".mp3", ".aiff", ".aif")  # as surprisal_cc.data.audio


def build_parser() -> argparse.ArgumentParser:
    """The options of ``transcribe --backend onnx`` (those of ``transcribe`` that the ONNX runtime takes)."""
    p = argparse.ArgumentParser(prog="surprisal-cc transcribe --backend onnx",
                                description="phones, routing, FLOPs and RTF of audio files, run by onnxruntime")
    p.add_argument("audio", nargs="+", help="audio files or folders of audio files")
    p.add_argument("--model", help="model folder with ONNX graphs (surprisal-cc export ... --onnx); default: the "
                                   "shipped model's folder, once its graphs are exported")
    p.add_argument("--format", choices=["text", "json", "ctm"], default="text")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--chunk-seconds", type=float, metavar="S", help="parts of long files (default 60; 0: whole)")
    p.add_argument("--decoder", choices=DECODERS, default="beam",
                   help="beam: the model's CTC prefix beam search (default); greedy: best path")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="onnxruntime threads (default 1)")
    p.add_argument("--skip-bad", action="store_true", help="leave out unusable audio files (listed)")
    p.add_argument("--deterministic", action="store_true", help="route with p_big > 0.5 (the default)")
    p.add_argument("--sampled", action="store_true", help="draw the routing from p_big (numpy's generator)")
    p.add_argument("--seed", type=int, help="seed of sampled routing (implies --sampled)")
    p.add_argument("--bias-shift", type=float, metavar="S", help="add S to the controller's logit")
    p.add_argument("--blank-penalty", type=float, metavar="P", help="subtract P from the blank's log-probability")
    p.add_argument("--input-level", type=float, metavar="DBFS", help="scale each file to this RMS level first")
    return p


def audio_files(given: str) -> List[Path]:
    """The audio files ``given`` stands for: itself, or a folder's audio files (recursively, sorted)."""
    path = Path(given)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file())
    return [path]


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def load(args: argparse.Namespace) -> OnnxASR:
    """The model the options ask for."""
    from surprisal_cc.errors import UsageError

    if args.deterministic and (args.sampled or args.seed is not None):
        raise UsageError("--deterministic and --sampled/--seed choose different routings: give one")
    routing = "sampled" if args.sampled or args.seed is not None else "deterministic" if args.deterministic else None
    asr = OnnxASR.from_folder(args.model, threads=args.threads, decoder=args.decoder, routing=routing, seed=args.seed)
    if args.blank_penalty is not None:
        asr.beam_search.blank_penalty = float(args.blank_penalty)
    if args.bias_shift is not None:
        asr.set_bias_shift(args.bias_shift)
    if args.input_level is not None:
        asr.set_input_level(args.input_level)
    return asr


def gather(asr: OnnxASR, given: Sequence[str], skip_bad: bool) -> List[Tuple[Path, AudioInfo]]:
    """The usable audio files of the inputs, checked before any is decoded (a :class:`BadAudioError` listing
    the unusable ones, unless ``skip_bad``, which warns about each)."""
    paths = [path for name in given for path in audio_files(name)]
    if not paths:
        raise FileNotFoundError(f"no audio files in {', '.join(given)}")
    usable, problems = [], []
    for path, (_, facts, problem) in zip(paths, asr.check_files(paths)):
        if facts is None:
            problems.append(f"{path}: {problem}")
        else:
            usable.append((path, facts))
    if problems and not skip_bad:
        raise BadAudioError(problems, len(paths), f"{len(problems)} of {len(paths)} files are unusable; pass "
                                                  "--skip-bad to transcribe the others" if usable else "")
    for line in problems:
        warnings.warn(f"skipped {line}")
    if not usable:
        raise BadAudioError(problems, len(paths))
    return usable


#: ``surprisal-cc transcribe`` options of the PyTorch runtime only: (attribute, its value when not given, option)
TORCH_ONLY = (("plot", None, "--plot"), ("flops_fraction", None, "--flops-fraction"), ("device", "cpu", "--device"))


def transcribe_args(args: argparse.Namespace) -> int:
    """``transcribe`` with ``args``, the namespace of :func:`build_parser` or of ``surprisal-cc transcribe``'s own
    parser (what ``cmd_transcribe`` hands over for ``--backend onnx``; options it lacks take their defaults);
    errors are raised, for the command line to print. Returns the exit status."""
    from surprisal_cc.errors import UsageError

    defaults = vars(build_parser().parse_args(["-"]))
    args = argparse.Namespace(**{**defaults, **vars(args)})
    for name, default, option in TORCH_ONLY:
        if getattr(args, name, default) not in (default, False):
            raise UsageError(f"{option} is an option of the PyTorch runtime: leave it out with --backend onnx")
    if getattr(args, "precision", "auto") == "bf16":
        raise UsageError("--precision bf16 is an option of the PyTorch runtime: the ONNX graphs run in fp32")
    if "-" in args.audio:
        raise UsageError("- (standard input) is read by the PyTorch runtime only: give audio files with --backend onnx")
    if args.json and args.format not in ("text", "json"):
        raise UsageError(f"--json and --format {args.format} choose different outputs: give one")
    if args.threads is None:
        args.threads = 1
    return run(args)


def run(args: argparse.Namespace) -> int:
    fmt = "json" if args.json else args.format
    asr = load(args)
    files = gather(asr, args.audio, args.skip_bad)
    run_info: Dict[str, Any] = {"model": str(asr.source), "device": "cpu", "precision": "fp32", "threads": asr.threads,
                                "backend": "onnx", "decoder": asr.decoder}
    if fmt == "ctm" and asr.routing == "sampled":
        print(f"routing: sampled, seed {asr.seed}", file=sys.stderr)
    for path, facts in files:
        progress = _progress(str(path)) if facts.duration > PROGRESS_AFTER_S else None
        result = asr.transcribe_file(path, long_chunk_s=args.chunk_seconds, progress=progress)
        result.path = str(path)
        if fmt == "json":
            _emit(json.dumps({**result.to_dict(), **run_info}))
        elif fmt == "ctm":
            if result.phones:
                _emit(result.to_ctm(path.stem))
        else:
            _emit(format_text(result))
    return 0


def _progress(path: str):
    def report(done: float, total: float) -> None:
        print(f"{path}: {done:.0f} of {total:.0f} s ({100 * done / max(total, 1e-9):.0f} %)", file=sys.stderr,
              flush=True)
    return report


def transcribe_main(argv: Optional[List[str]] = None) -> int:
    """``transcribe --backend onnx`` with ``argv`` (its arguments, less ``--backend onnx``): the exit status
    (0; 1 after ``error:`` lines for bad input; 2 for a bad command line)."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    from surprisal_cc.errors import UsageError

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda message, *a, **k: print(f"warning: {message}", file=sys.stderr)
        try:
            return transcribe_args(args)
        except BrokenPipeError:
            return 141
        except UsageError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except BadAudioError as err:
            for line in [*err.problems, *([err.hint] if err.hint else [])]:
                print(f"error: {line}", file=sys.stderr)
            return 1
        except (ValueError, OSError) as err:
            print(f"error: {' '.join(str(err).split()) or type(err).__name__}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(transcribe_main())
