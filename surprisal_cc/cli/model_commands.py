"""``surprisal-cc`` commands using a model: ``transcribe`` audio files, ``evaluate`` a labelled corpus,
``export`` a finished recipe run as a model folder (with ONNX graphs: ``--onnx``), and count a model's
``flops`` from its hparams file (:mod:`~surprisal_cc.cli.flops_command`).

    surprisal-cc transcribe AUDIO... [--model DIR] [--json | --format ctm] [--plot OUT.png] [--threads N] [--backend onnx]
    surprisal-cc evaluate DATA [--model DIR] [--mfa-labels CSV|DIR] [--any-pronunciation] [--skip-bad] [--json]
        [--per-utterance FILE] [--sampled [--seed N]] [--threads N]
    surprisal-cc export RUN_DIR OUT_DIR [--dtype fp16] [--apc APC.pt] [--average N] [--onnx]
    surprisal-cc flops hparams/TIMIT/conditional_ctc.yaml [--key=value ...] [--json]

Without --model, transcribe and evaluate use the shipped model (surprisal_cc/pretrained); they route
deterministically (``p_big > 0.5``) unless given --sampled (a random-controller model is always sampled),
and decode on one thread unless given --threads. A routing plot that cannot be saved is one ``error:``
line, and the files after it are still transcribed (exit status 1 at the end).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from surprisal_cc.checks import (check_outputs_apart, check_writable, chunk_seconds, finite_float, make_output_folder,
                                 positive_int, routing_seed)
from surprisal_cc.cli import flops_command
from surprisal_cc.decoding.transcription import format_text
from surprisal_cc.errors import UsageError
from surprisal_cc.inference.long_audio import CHUNK_S, CONTEXT_S
from surprisal_cc.runtime import DEFAULT_DECODING_THREADS

#: each command's one-line help, in the order ``surprisal-cc --help`` lists them
HELP = {
    "transcribe": "phones, routing, FLOPs and RTF of audio files",
    "evaluate": "PER, FLOPs, p_big and RTF on a LibriSpeech, TIMIT, Kaldi or manifest corpus",
    "export": "model folder from the best checkpoint of a finished recipe run",
    "flops": "per-component MACs per frame of an hparams file (--key=value overrides)",
}


# ----------------------------------------------------------------------------------------------
# export, transcribe, evaluate
# ----------------------------------------------------------------------------------------------
def cmd_export(args, unknown: List[str]) -> int:
    if args.onnx and (Path(args.run_dir) / "model.json").is_file():  # a model folder: its graphs only
        from surprisal_cc.deploy.export import export_onnx

        print(f"exported the ONNX graphs of {args.run_dir} to {export_onnx(args.run_dir, args.out_dir)}: onnx.json, onnx/")
        return 0
    from surprisal_cc.training.export import export_run

    step = None
    if args.onnx:
        from surprisal_cc.deploy.export import write_onnx_graphs as step
    out = export_run(args.run_dir, args.out_dir, dtype=args.dtype, apc_path=args.apc, average=args.average,
                     onnx_step=step)
    config = json.loads((out / "model.json").read_text(encoding="utf-8"))
    size = sum(f.stat().st_size for f in out.iterdir() if f.suffix == ".pt")
    files = ", ".join(sorted(f.name for f in out.iterdir()))
    test = config["source"].get("test", {})
    alone = " (the run's test, of the best checkpoint alone)" if args.average > 1 else ""
    per = f"test PER {test['PER']:.2f} %{alone}, " if test.get("PER") is not None else ""
    if config["source"].get("results_epoch") is not None:
        per = (f"no test PER (the run's results file tested epoch {config['source']['results_epoch']}'s "
               f"checkpoint: `surprisal-cc evaluate` this model), ")
    averaged = f", averaged with the next {args.average - 1} best" if args.average > 1 else ""
    print(f"exported {config['source']['checkpoint']} (epoch {config['source'].get('epoch')}{averaged}) of {args.run_dir} "
          f"to {out}: {files}; {per}{size / 2 ** 20:.1f} MiB ({args.dtype})")
    return 0


def _load_model(args):
    from surprisal_cc.inference.asr import ConditionalASR
    from surprisal_cc.inference.budget import budget_big_fraction

    if args.deterministic and (args.sampled or args.seed is not None):
        raise UsageError("--deterministic and --sampled/--seed choose different routings: give one")
    if args.bias_shift is not None and args.flops_fraction is not None:
        raise UsageError("--bias-shift and --flops-fraction both set the controller's bias: give one")
    routing = "sampled" if args.sampled or args.seed is not None else "deterministic" if args.deterministic else None
    threads = {} if args.threads is None else {"threads": args.threads}  # default: DEFAULT_DECODING_THREADS
    asr = ConditionalASR.from_hparams(Path(args.model) if args.model else None, device=args.device,  # a folder
                                      precision=args.precision, routing=routing, seed=args.seed, **threads)
    if args.blank_penalty is not None:
        asr.beam_search.blank_penalty = args.blank_penalty
    if args.input_level is not None:
        asr.set_input_level(args.input_level)
    if args.bias_shift is not None:
        asr.set_bias_shift(args.bias_shift)
    if args.flops_fraction is not None:
        budget_big_fraction(asr, args.flops_fraction)  # a budget this model cannot meet fails before any audio is read
    return asr


def audio_inputs(given: str, skipped: Optional[List[Dict[str, str]]] = None) -> List[Tuple[Path, Optional[str]]]:
    """The audio files one ``transcribe`` input stands for, each with its utterance id or None: a
    Kaldi data folder (with ``wav.scp``) stands for its utterances, another folder for the audio files
    under it, a file for itself. Given a ``skipped`` list, ``wav.scp`` entries that are not audio files
    (commands, archive offsets) are left out with a :func:`_skipped_record` each appended to it; without
    one, such an entry is an error.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "wav.scp").write_text("u1 /audio/a.flac\\nu2 flac -c -d -s /audio/u2.flac |\\n")
    ...     skipped = []
    ...     audio_inputs(tmp, skipped), [(s["utterance"], s["skipped"].split(" (")[0]) for s in skipped]
    ([(PosixPath('/audio/a.flac'), 'u1')], [('u2', 'a command')])
    >>> audio_inputs("/audio/b.wav")
    [(PosixPath('/audio/b.wav'), None)]
    """
    from surprisal_cc.data.audio import iter_audio_paths
    from surprisal_cc.data.kaldi import is_kaldi_data_folder, read_wav_scp, read_wav_scp_entries

    if not is_kaldi_data_folder(given):
        return [(path, None) for path in iter_audio_paths([given])]
    if skipped is None:
        return [(Path(path), utt) for utt, path in read_wav_scp(given).items()]
    audio, not_files = read_wav_scp_entries(Path(given))
    wav_scp = str(Path(given) / "wav.scp")
    skipped += [_skipped_record(wav_scp, reason, utt) for utt, reason in not_files.items()]
    return [(Path(path), utt) for utt, path in audio.items()]


def output_names(items: Sequence[Tuple[Path, Optional[str]]]) -> List[str]:
    """A distinct name per input of :func:`audio_inputs`, the CTM file ids and the routing plots'
    names: the utterance id where there is one, else the file's stem, with the parent folder's name
    added where two stems are the same; a name still taken gets a number. Path separators become
    ``_``, so that a plot named after an utterance id stays in the plot folder.

    Example
    -------
    >>> output_names([(Path("a/x.flac"), None), (Path("b/x.flac"), None), (Path("b/y.wav"), None),
    ...               (Path("c/z.wav"), "y"), (Path("c/z.wav"), "u2"), (Path("d.wav"), "../up/u3")])
    ['a_x', 'b_x', 'y_1', 'y_2', 'u2', '.._up_u3']
    """
    stems = [path.stem for path, utt in items if utt is None]
    names = [utt if utt is not None else f"{path.parent.name}_{path.stem}" if stems.count(path.stem) > 1
             else path.stem for path, utt in items]
    names = [name.replace("/", "_").replace(os.sep, "_") for name in names]
    seen: Dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if names.count(name) == 1 else f"{name}_{seen[name]}")
    return unique


def plot_paths(plot: str, names: Sequence[str]) -> List[Path]:
    """The routing plot of each input named by :func:`output_names`: ``plot`` for one input; for
    several, ``OUT_<name>.png``; where ``plot`` is a folder (one that exists, or a name ending in
    ``/``), ``<name>.png`` in it.

    Example
    -------
    >>> [p.name for p in plot_paths("out/r.png", ["a_x", "b_x", "y"])], plot_paths("out/r.png", ["y"])
    (['r_a_x.png', 'r_b_x.png', 'r_y.png'], [PosixPath('out/r.png')])
    >>> plot_paths("plots/", ["y"])
    [PosixPath('plots/y.png')]
    """
    path = Path(plot)
    if plot_is_folder(plot):
        return [path / f"{name}.png" for name in names]
    if len(names) == 1:
        return [path]
    return [path.with_name(f"{path.stem}_{name}{path.suffix or '.png'}") for name in names]


def plot_is_folder(plot: str) -> bool:
    """Whether ``--plot`` names a folder: one that exists, or a name ending in ``/``."""
    return plot.endswith(("/", os.sep)) or Path(plot).is_dir()


def _emit(line: str) -> None:
    """Print one result and flush it: an interrupted run keeps every result already printed."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _long_progress(path: str):
    """A progress callback writing ``path: done of total s`` lines to stderr (long files)."""
    def report(done: float, total: float) -> None:
        print(f"{path}: {done:.0f} of {total:.0f} s ({100 * done / max(total, 1e-9):.0f} %)", file=sys.stderr,
              flush=True)
    return report


def read_standard_input(folder: Path, stream=None) -> Path:
    """Standard input (an audio file piped in, e.g. ``ffmpeg -i talk.m4a -f wav - | surprisal-cc
    transcribe -``) written to ``folder/stdin``, where it is read like any audio file."""
    stream = sys.stdin if stream is None else stream
    if stream.isatty():
        raise UsageError("- reads audio from standard input, and nothing is piped to it "
                         "(e.g. ffmpeg -i talk.m4a -f wav - | surprisal-cc transcribe -)")
    import shutil

    path = folder / "stdin"
    with open(path, "wb") as out:
        shutil.copyfileobj(stream.buffer, out)
    return path


def cmd_transcribe(args, unknown: List[str]) -> int:
    import tempfile

    if args.backend == "onnx":  # the torch-free runtime (surprisal_cc.deploy)
        from surprisal_cc.deploy.command import transcribe_args

        return transcribe_args(args)
    if args.audio.count("-") > 1:
        raise UsageError("- (standard input) can be given once")
    if "-" not in args.audio:
        return _transcribe(args)
    with tempfile.TemporaryDirectory(prefix="surprisal-cc-") as folder:
        return _transcribe(args, read_standard_input(Path(folder)))


def _skipped_record(path: str, reason: str, utterance: Optional[str] = None) -> Dict[str, str]:
    """The JSON record of an input ``transcribe --skip-bad`` leaves out: its file (a ``wav.scp`` for an
    entry that is not an audio file), its utterance where there is one, and why.

    Example
    -------
    >>> _skipped_record("d/wav.scp", "a command", "u1")
    {'path': 'd/wav.scp', 'utterance': 'u1', 'skipped': 'a command'}
    """
    return {"path": path, **({"utterance": utterance} if utterance else {}), "skipped": reason}


def _skipped_line(record: Mapping[str, str]) -> str:
    """A :func:`_skipped_record` as one ``path: [utterance: ]reason`` line.

    Example
    -------
    >>> _skipped_line(_skipped_record("d/wav.scp", "a command", "u1")), _skipped_line(_skipped_record("a.wav", "empty"))
    ('d/wav.scp: u1: a command', 'a.wav: empty')
    """
    return ": ".join([record["path"], *([record["utterance"]] if "utterance" in record else []), record["skipped"]])


def _transcribe(args, stdin_audio: Optional[Path] = None) -> int:
    """``transcribe``, with ``stdin_audio`` the file standard input was written to (given as ``-``)."""
    from surprisal_cc.data.audio import warn_converted
    from surprisal_cc.data.errors import DataPreparationError
    from surprisal_cc.inference.asr import transcribe_checked_file
    from surprisal_cc.inference.budget import meet_flops_budget
    from surprisal_cc.inference.long_audio import PROGRESS_AFTER_S

    fmt = _transcribe_format(args)
    if args.plot is not None and not args.plot.strip():
        raise UsageError("--plot needs a PNG file or a folder to write the routing plots to")
    asr = _load_model(args)
    _check_plot(args, asr)
    items, skipped, infos = _gather_audio(args.audio, stdin_audio, args.skip_bad, asr)
    warn_converted({_as_given(key, stdin_audio): info for key, info in infos.items()},
                   asr.feature_config.sample_rate, stacklevel=3, input_level=asr.input_level_dbfs)
    usable = [(path, utt) for path, utt in items if str(path) in infos]
    if fmt == "json":
        for record in skipped:
            _emit(json.dumps(record))
    if not usable:  # every input left out by --skip-bad (without it, _gather_audio has refused them)
        raise DataPreparationError(f"none of the given files is usable audio ({len(skipped)} left out, listed "
                                   "above)")
    budget = (meet_flops_budget(asr, [path for path, _ in usable], args.flops_fraction, long_chunk_s=args.chunk_seconds)
              if args.flops_fraction is not None else None)
    names = output_names([(Path("stdin") if _as_given(path, stdin_audio) == "-" else path, utt)
                          for path, utt in usable])  # standard input is "stdin", not its temporary folder's
    names = ["stdin" if _as_given(path, stdin_audio) == "-" and "stdin" not in names else name
             for (path, _), name in zip(usable, names)]
    plots = plot_paths(args.plot, names) if args.plot else []
    if fmt != "json":  # the JSON objects carry these; text and CTM say them once, on stderr
        _announce(asr, budget, fmt)
    run = {"model": str(asr.source), "device": str(asr.device), "precision": asr.precision, "threads": asr.threads,
           **({"budget": budget} if budget else {})}
    unsaved_plots = 0
    for i, (path, utt) in enumerate(usable):
        long = infos[str(path)].duration > PROGRESS_AFTER_S
        result = transcribe_checked_file(asr, path, long_chunk_s=args.chunk_seconds, keep_fbank=bool(args.plot),
                                         progress=_long_progress(_as_given(path, stdin_audio)) if long else None)
        result.path = _as_given(path, stdin_audio)
        _emit_result(result, fmt, utt, names[i], run)
        if args.plot and not _save_routing_plot(result, plots[i], title=utt or path.name):
            unsaved_plots += 1
    return 1 if unsaved_plots else 0


def _transcribe_format(args) -> str:
    """The output format ``--json`` and ``--format`` choose: text, json or ctm."""
    if args.json and args.format not in ("text", "json"):
        raise UsageError(f"--json and --format {args.format} choose different outputs: give one")
    return "json" if args.json else args.format


def _as_given(path, stdin_audio: Optional[Path]) -> str:
    """A file as the user named it: ``-`` for standard input (written to ``stdin_audio``).

    Example
    -------
    >>> _as_given(Path("/tmp/x/stdin"), Path("/tmp/x/stdin")), _as_given(Path("a.wav"), None)
    ('-', 'a.wav')
    """
    return "-" if stdin_audio is not None and str(path) == str(stdin_audio) else str(path)


def _check_plot(args, asr) -> None:
    """Refuse ``--plot`` for a model without APC, and make its folder: before any decoding."""
    from surprisal_cc.errors import ConfigurationError

    if args.plot and not asr.uses_apc:
        raise ConfigurationError("--plot draws the surprisal, and this model runs no APC")
    if args.plot:  # before any decoding
        make_output_folder("--plot", Path(args.plot) / "plot.png" if plot_is_folder(args.plot) else args.plot)


def _gather_audio(given: Sequence[str], stdin_audio: Optional[Path], skip_bad: bool, asr):
    """The audio files of ``transcribe``'s inputs (``-``: ``stdin_audio``), each checked for the model
    ``asr`` before any decoding (:func:`~surprisal_cc.data.audio.check_audio_each` at its limits: audio too short
    for one of its frames is unusable):
    ``(items, skipped, infos)``, with ``items`` every ``(path, utterance or None)`` found, ``skipped`` a
    :func:`_skipped_record` per unusable input (each warned about) and ``infos`` the :class:`AudioInfo` of
    each usable file by its path. Unusable inputs without ``skip_bad`` are an error."""
    from surprisal_cc.data.audio import AudioInfo, check_audio_each, refuse_bad_audio

    skipped: List[Dict[str, str]] = []  # every unusable input, found before any decoding
    found = [(name, [(stdin_audio, None)] if name == "-" else audio_inputs(name, skipped)) for name in given]
    items = [item for _, listed in found for item in listed]
    if not items and not skipped:
        raise FileNotFoundError(f"no audio files in {', '.join(given)}")
    empty = [name for name, listed in found if not listed]
    if empty and items:
        warnings.warn(f"no audio files in {', '.join(empty)}")
    total = len(items) + len(skipped)
    infos: Dict[str, AudioInfo] = {}
    for (path, utt), (_, info, problem) in zip(items, check_audio_each([path for path, _ in items],
                                                                       **asr.feature_config.audio_limits)):
        if info is not None:
            infos[str(path)] = info
        elif stdin_audio is not None and path == stdin_audio:  # named as the user gave it
            reason = problem.replace(f"b'{stdin_audio}'", "it").replace(str(stdin_audio), "standard input (-)")
            skipped.append(_skipped_record("standard input (-)", reason))
        else:
            skipped.append(_skipped_record(str(path), problem, utt))
    refuse_bad_audio([_skipped_line(record) for record in skipped], total, skip_bad,
                     f"{len(skipped)} of {total} files are unusable; pass --skip-bad to transcribe the others")
    for record in skipped:
        warnings.warn(f"skipped {record['path']}: " + (f"utterance {record['utterance']}: " if "utterance" in record
                                                       else "") + record["skipped"])
    return items, skipped, infos


def _announce(asr, budget: Optional[Dict[str, Any]], fmt: str) -> None:
    """Say on stderr, once, what text and CTM output do not carry per file: the solved FLOPs budget,
    and the seed of sampled routing (CTM)."""
    if budget:
        print(f"budget: {budget['fraction']:g} x big-only MACs per frame at bias shift {budget['bias_shift']:+.3f} "
              f"({100 * budget['big_fraction']:.1f} % of frames on the big network, solved on "
              f"{budget['frames']} frames)", file=sys.stderr)
    if fmt == "ctm" and asr.routing == "sampled":
        print(f"routing: sampled, seed {asr.seed}", file=sys.stderr)


def _emit_result(result, fmt: str, utterance: Optional[str], name: str, run: Dict[str, Any]) -> None:
    """Print one file's result in ``fmt``: a JSON object (with ``run``, what was run), its CTM lines
    (file id ``name``) or text."""
    if fmt == "json":
        _emit(json.dumps({**result.to_dict(), **({"utterance": utterance} if utterance else {}), **run}))
    elif fmt == "ctm":
        if result.phones:  # a file without phones has no CTM record (an empty line is none)
            _emit(result.to_ctm(name))
    else:
        _emit(format_text(result, utterance))


def _save_routing_plot(result, path: Path, title: str) -> bool:
    """Draw ``result``'s routing plot into ``path``; False, after one ``error:`` line naming the plot and
    why, where it cannot be saved (the other files are still transcribed)."""
    from surprisal_cc.experiments.plots import plot_routing

    try:
        plot_routing(result.fbank, result.surprisal, result.use_big, path, title=title,
                     frame_shift_s=result.frame_shift_s)
    except (OSError, ValueError) as err:  # an unwritable path, a full disk, a format matplotlib lacks
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err) or type(err).__name__
        print(f"error: {path}: routing plot not saved ({reason})", file=sys.stderr, flush=True)
        return False
    return True


def _macs(value: float) -> str:
    return f"{value / 1e6:.2f}M" if value >= 1000 else f"{value:.0f}"


def _json_lines_to(target, stack: contextlib.ExitStack) -> Callable[[Dict[str, Any]], None]:
    """A writer of one JSON object per line to ``target``, flushed after each (JSON Lines): a stream, or
    a file path opened (and emptied) in ``stack`` when the first line comes, not before."""
    stream = [target if hasattr(target, "write") else None]

    def write(row: Dict[str, Any]) -> None:
        if stream[0] is None:
            stream[0] = stack.enter_context(open(target, "w", encoding="utf-8"))
        stream[0].write(json.dumps(row) + "\n")
        stream[0].flush()
    return write


def mfa_labels_beside(data: str) -> Optional[Path]:
    """The MFA labels the recipes would find for ``data`` where it is a LibriSpeech-format subset folder
    (``phone_labels/<subset>_mfa.csv``, else ``phone_labels/<subset>/``, inside ``LibriSpeech/`` or beside
    it: :func:`~surprisal_cc.data.mfa.find_mfa_labels`); None for any other corpus or where there are none.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     subset = Path(tmp, "LibriSpeech", "dev-clean-2")
    ...     subset.mkdir(parents=True)
    ...     before = mfa_labels_beside(str(subset))
    ...     Path(tmp, "phone_labels").mkdir()
    ...     _ = Path(tmp, "phone_labels", "dev-clean-2_mfa.csv").write_text("")
    ...     after = mfa_labels_beside(str(subset)).relative_to(tmp).as_posix()
    >>> before, after
    (None, 'phone_labels/dev-clean-2_mfa.csv')
    """
    from surprisal_cc.data.kaldi import is_kaldi_data_folder
    from surprisal_cc.data.mfa import find_mfa_labels

    path = Path(data)
    if not path.is_dir() or is_kaldi_data_folder(path):
        return None
    return find_mfa_labels(path)


def _interrupted_line(err, per_utterance: Optional[str], alignments: Optional[str]) -> str:
    """What an interrupted ``evaluate`` scored (an :class:`~surprisal_cc.inference.evaluation.EvaluationInterrupted`) and
    where those utterances' results are (``-``: standard output), in one line.

    Example
    -------
    >>> from surprisal_cc.inference.evaluation import EvaluationInterrupted
    >>> _interrupted_line(EvaluationInterrupted(8, 20, 25.0), "utts.jsonl", None).split("; ")[-1]
    'their results are in utts.jsonl (--per-utterance)'
    >>> _interrupted_line(EvaluationInterrupted(8, 20, 25.0), None, None).split("; ")[-1]
    "pass --per-utterance FILE to keep each utterance's result as it is scored"
    """
    saved = [f"{'standard output' if path == '-' else path} ({option})"
             for option, path in (("--per-utterance", per_utterance), ("--alignments", alignments)) if path]
    if not err.done:
        return str(err)
    if not saved:
        return f"{err}; pass --per-utterance FILE to keep each utterance's result as it is scored"
    return f"{err}; their results are in {' and '.join(saved)}"


def cmd_evaluate(args, unknown: List[str]) -> int:
    if args.per_utterance == "-" and args.alignments == "-":
        raise UsageError("--per-utterance - and --alignments - would both write to standard output: "
                         "give one of them a file")
    check_outputs_apart({"--per-utterance": args.per_utterance, "--alignments": args.alignments},
                        {"DATA": args.data, "--mfa-labels": args.mfa_labels})
    if args.per_utterance and args.per_utterance != "-":
        check_writable("per-utterance file", args.per_utterance)
    asr = _load_model(args)
    beside = None if args.mfa_labels else mfa_labels_beside(args.data)
    if beside is not None:  # scored against lexicon labels all the same: the choice stays the user's
        print(f"note: MFA labels for {Path(args.data).name} found at {beside}; pass --mfa-labels {beside} to score "
              "against them (now: lexicon)", file=sys.stderr, flush=True)
    from surprisal_cc.inference.evaluation import EvaluationInterrupted, evaluate_corpus

    try:
        with contextlib.ExitStack() as stack:
            write = None
            if args.per_utterance:
                # a run that fails before its first result leaves the file from an earlier run as it was
                write = _json_lines_to(sys.stdout if args.per_utterance == "-" else args.per_utterance, stack)
            result = evaluate_corpus(asr, args.data, mfa_labels=args.mfa_labels, skip_bad=args.skip_bad,
                                     batch_size=args.batch_size, g2p=args.g2p, timit_split=args.timit_split,
                                     progress=not args.json and sys.stderr.isatty(),
                                     any_pronunciation=args.any_pronunciation,
                                     flops_fraction=args.flops_fraction, per_utterance=write,
                                     alignments=sys.stdout if args.alignments == "-" else args.alignments,
                                     long_chunk_s=args.chunk_seconds)
    except EvaluationInterrupted as err:
        print(f"error: {_interrupted_line(err, args.per_utterance, args.alignments)}", file=sys.stderr, flush=True)
        return 130
    # with the per-utterance lines or the alignments on standard output, the summary goes to stderr
    out = sys.stderr if "-" in (args.per_utterance, args.alignments) else sys.stdout
    if args.json:
        print(json.dumps(result, indent=2), file=out)
        return 0
    comps = ", ".join(f"{k} {_macs(v)}" for k, v in result["flops_components"].items() if k != "total")
    lines = [f"PER {result['per']:.2f} % (S {result['substitutions']}, D {result['deletions']}, "
             f"I {result['insertions']}; {result['num_ref_tokens']} reference phones, "
             f"{result['num_utterances']} utterances; labels: {result['labels']})",
             f"FLOPs per frame {result['flops_per_frame'] / 1e6:.2f}M ({comps})"]
    if "any_pronunciation" in result:
        free = result["any_pronunciation"]
        lines.insert(1, f"PER {free['per']:.2f} % against the closest pronunciation of each word (S "
                        f"{free['substitutions']}, D {free['deletions']}, I {free['insertions']}; "
                        f"{free['fixed']} utterances scored against their labels as they are)")
    if "p_big_mean" in result:
        lines.append(f"p_big {result['p_big_mean']:.3f} (variance {result['p_big_var']:.4f}), big network on "
                     f"{100 * result['big_fraction']:.1f} % of frames")
    if "mean_steps" in result:
        lines.append(f"{result['mean_steps']:.2f} steps per frame")
    seed = f" seed {result['seed']}" if result["seed"] is not None else ""
    lines.append(f"RTF {result['rtf']:.3f} ({result['compute_s']:.1f} s for {result['audio_s']:.1f} s of audio, "
                 f"{result['device']}, {result['precision']}, {result['threads']} thread(s), batch "
                 f"{result['batch_size']}, {result['routing']} routing{seed})")
    if result["skipped"]:
        lines.append(f"skipped {len(result['skipped'])} utterance(s) with unusable audio or labels")
    print("\n".join(lines), file=out)
    return 0



COMMANDS = {"transcribe": cmd_transcribe, "evaluate": cmd_evaluate, "export": cmd_export,
            "flops": flops_command.cmd_flops}


def add_parsers(subparsers, command: Optional[str] = None) -> None:
    """The parsers of these commands (``command``, the one about to run, is unused: none imports a tool
    for its options)."""
    _add_transcribe_parser(subparsers)
    _add_evaluate_parser(subparsers)
    _add_export_parser(subparsers)
    flops_command.add_parser(subparsers, HELP["flops"])


def _add_export_parser(subparsers) -> None:
    p = subparsers.add_parser("export", help=HELP["export"])
    p.add_argument("run_dir", help="the recipe run's output_folder (hyperparams.yaml, results.json, save/)")
    p.add_argument("out_dir", help="the model folder to write: a new or empty folder, or a model folder, which is replaced")
    p.add_argument("--dtype", choices=["fp32", "fp16"], default="fp32",
                   help="weight storage (fp16: half the size, loaded back as fp32)")
    p.add_argument("--apc", help="APC model file, a relative one from the working directory (default: the run's "
                                 "apc_path, else apc_export_path; a relative one is looked for where the recipe "
                                 "ran, then here)")
    p.add_argument("--average", type=positive_int, default=1, metavar="N",
                   help="average the weights of the N best checkpoints (default 1: the best one)")
    p.add_argument("--onnx", action="store_true", help="also write ONNX graphs (onnx.json, onnx/) for transcribe "
                                                       "--backend onnx; RUN_DIR may be a model folder then")


def _add_transcribe_parser(subparsers) -> None:
    p = subparsers.add_parser("transcribe", help=HELP["transcribe"])
    p.add_argument("audio", nargs="+", help="audio files, folders of audio files, Kaldi data folders "
                                            "(their wav.scp; each utterance named by its id), or - for "
                                            "audio piped to standard input")
    p.add_argument("--plot", help="routing plot (spectrogram, surprisal, network per frame) as PNG; "
                                  "with several files, one per file named OUT_<file or utterance id>.png; "
                                  "a folder (an existing one, or a name ending in /): "
                                  "<file or utterance id>.png in it")
    p.add_argument("--format", choices=["text", "json", "ctm"], default="text",
                   help="text (default); json: one JSON object per file (JSON Lines) as it finishes, "
                        "with each phone's start and end; ctm: one line per phone (file channel start "
                        "duration phone)")
    p.add_argument("--backend", choices=["torch", "onnx"], default="torch",
                   help="torch (default), or onnx: the model folder's ONNX graphs (export --onnx) in onnxruntime")
    p.add_argument("--decoder", choices=["beam", "greedy"], default="beam", help="with --backend onnx: CTC decoding")
    _add_decoding_options(p, chunk_help=f"files longer than S + {2 * CONTEXT_S:g} s are decoded in parts of S seconds "
                                        f"with {CONTEXT_S:g} s of context on each side, in bounded memory (default "
                                        f"{CHUNK_S:g}; 0: every file whole)",
                          json_help="the same as --format json")


def _add_evaluate_parser(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help=HELP["evaluate"])
    p.add_argument("data", help="LibriSpeech-format folder of one subset (e.g. LibriSpeech/dev-clean-2; a folder "
                                "holding several is refused), TIMIT folder, Kaldi data folder (wav.scp, text) "
                                "or manifest CSV")
    p.add_argument("--mfa-labels", help="MFA labels (CSV export or TextGrid folder) of a LibriSpeech-format "
                                        "folder, instead of lexicon labels (without it, a note names the "
                                        "phone_labels/ the recipes would find beside the corpus)")
    p.add_argument("--g2p", choices=["spn", "flite", "error"],
                   help="lexicon labels: words CMUdict lacks (default: the model's training policy)")
    p.add_argument("--timit-split", choices=["test", "valid", "train"],
                   help="TIMIT folders: core test set (default), development speakers or training set")
    p.add_argument("--batch-size", type=positive_int, help="utterances per forward pass (default: the run's)")
    p.add_argument("--per-utterance", metavar="FILE",
                   help="write each utterance's id, reference, hypothesis, S/D/I, FLOPs and p_big to FILE "
                        "as JSON Lines, as its batch finishes (-: standard output, and the totals go to "
                        "stderr)")
    p.add_argument("--alignments", metavar="FILE",
                   help="write each utterance's alignment of hypothesis and reference to FILE "
                        "(SpeechBrain's format, as the recipes' test_alignments.txt; -: standard output, "
                        "and the totals go to stderr)")
    p.add_argument("--any-pronunciation", action="store_true",
                   help="also score against the references whose words take the CMUdict (or labelled) "
                        "pronunciation closest to the hypothesis: how much of the PER is pronunciation")
    _add_decoding_options(p, chunk_help=f"utterances longer than S + {2 * CONTEXT_S:g} s are decoded alone, in parts "
                                        f"of S seconds with {CONTEXT_S:g} s of context on each side, in bounded "
                                        f"memory (default {CHUNK_S:g}; 0: every utterance whole, in batches)",
                          json_help="the corpus totals and what was run (seed, routing, batch size, threads, "
                                    "precision) as JSON")


def _add_decoding_options(p: argparse.ArgumentParser, chunk_help: str, json_help: str) -> None:
    """The options ``transcribe`` and ``evaluate`` share, after their own: long audio (``chunk_help``),
    the model, JSON output (``json_help``), unusable audio, then :func:`_add_model_options`."""
    p.add_argument("--chunk-seconds", type=chunk_seconds, metavar="S", help=chunk_help)
    p.add_argument("--model", help="exported model folder (default: the shipped model, surprisal_cc/pretrained)")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--skip-bad", action="store_true", help="leave out unusable audio files (listed) "
                                                           "instead of stopping")
    _add_model_options(p)


def _add_model_options(p: argparse.ArgumentParser) -> None:
    """How the model runs, as :func:`_load_model` reads it: device, precision, threads, routing,
    controller bias, blank penalty and input level."""
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--precision", choices=["fp32", "bf16", "auto"], default="auto",
                   help="bf16: autocast where the device computes it natively; auto (default): the faster "
                        "for inference, fp32 (bf16 is slower on CPUs at these sizes and on GPUs)")
    p.add_argument("--threads", type=positive_int, metavar="N",  # None: the model's DEFAULT_DECODING_THREADS
                   help=f"torch threads (default {DEFAULT_DECODING_THREADS}: decoding never competes for busy "
                        "cores; more pay off only for large batches on idle cores)")
    p.add_argument("--deterministic", action="store_true",
                   help="route with p_big > 0.5 (the default, but for a random-controller model, which is "
                        "always sampled; the same result on every run)")
    p.add_argument("--sampled", action="store_true",
                   help="draw the routing from p_big as the recipes test (seeded: --seed, else a random "
                        "seed that is reported)")
    p.add_argument("--seed", type=routing_seed, help="seed of sampled routing (implies --sampled)")
    p.add_argument("--bias-shift", type=finite_float, metavar="S",
                   help="add S to the controller's trained logit: below 0 fewer frames on the big network, "
                        "fewer FLOPs (default: the model's own shift, 0 unless it was saved with one; "
                        "0: the trained operating point)")
    p.add_argument("--flops-fraction", type=finite_float, metavar="F",
                   help="instead of --bias-shift: the shift that spends F x the big-only MACs per frame over "
                        "the given audio, from its surprisal (surprisal controller)")
    p.add_argument("--blank-penalty", type=finite_float, metavar="P",
                   help="subtract P from the blank's log-probability before the beam search (default: the "
                        "model's, 0 unless it was exported with one)")
    p.add_argument("--input-level", type=finite_float, metavar="DBFS",
                   help="scale each file (each part of a long one) to this RMS level in dBFS before its "
                        "features, e.g. -26 (LibriSpeech's speech) for recordings much quieter or louder; "
                        "default: read the audio as it is")
