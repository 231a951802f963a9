"""Command-line interface: ``surprisal-cc analyse|flops|grid|report|curves|bench|export|transcribe|evaluate``.

    surprisal-cc analyse --apc APC.pt --mfa MFA.csv --audio-root DIR [--plot OUT.png] [--json OUT.json]
    surprisal-cc flops hparams/TIMIT/conditional_ctc.yaml [--key=value ...] [--json]
    surprisal-cc grid hparams/MiniLibriSpeech/grid_cpu.yaml [--dry-run] [--jobs N] [--threads N] [--only SUBSTRING]
        [--no-report] [--key=value ...]
    surprisal-cc report results/MiniLibriSpeech [more results files or folders] [--json] [--csv FILE] [--pool KEY]
    surprisal-cc report results/MiniLibriSpeech/grid --out docs/results/MiniLibriSpeech   # every table + plot
    surprisal-cc curves RUN_DIR[=LABEL] ... [--key PER] [--plot OUT.png]   # runs in progress too
    surprisal-cc bench [--json] [--quick] [--only training,rnn] [--device cuda] [--threads 1] [--output FILE.json]
    surprisal-cc export RUN_DIR OUT_DIR [--dtype fp16] [--apc APC.pt] [--average N]
    surprisal-cc transcribe AUDIO... [--model DIR] [--json | --format ctm] [--plot OUT.png] [--threads N]
    surprisal-cc evaluate DATA [--model DIR] [--mfa-labels CSV|DIR] [--any-pronunciation] [--skip-bad] [--json]
        [--per-utterance FILE] [--sampled [--seed N]] [--threads N]

``grid`` runs every run of a grid file that has not finished yet (``--key=value`` options go to every
run), then writes the tables and figures; ``bench`` runs the benchmarks/ folder of the source checkout
it is started in (``python -m benchmarks.run_all``). Without --model, transcribe and evaluate use the
shipped model (surprisal_cc/pretrained, installed with the package); they route deterministically
(``p_big > 0.5``: the same result on every run) unless given --sampled (a random-controller model, which
routes by chance alone, is always sampled), and decode on one thread
unless given --threads. A configuration or data error ends the command with one line ``error: ...``
per problem on stderr and exit status 1 (2 for a command-line usage error); results already printed
stay printed (each is flushed as it finishes). A routing plot of transcribe that cannot be saved is
such a line too, and the files after it are still transcribed (exit status 1 at the end).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from surprisal_cc.checks import (check_outputs_apart, check_writable, chunk_seconds, finite_float, make_output_folder, positive_int,
                        routing_seed)
from surprisal_cc.errors import UsageError, os_error_line
from surprisal_cc.inference.long_audio import CHUNK_S, CONTEXT_S
from surprisal_cc.runtime import DEFAULT_DECODING_THREADS


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line ``error: ...`` (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


# ----------------------------------------------------------------------------------------------
# flops
# ----------------------------------------------------------------------------------------------
def flops_table(hparams_file: str, overrides: Sequence[str] = ()) -> dict:
    """Static MACs per frame of every component of the model an hparams file describes.

    Builds the modules only: no data is read, ``!PLACEHOLDER`` values (e.g. TIMIT's
    ``data_folder``) need no override, and no checkpoint folder is created. APC is counted when
    the model needs it. A surprisal model also gets its expected cost at the mean p_big its
    calibration aims at: ``flops_budget``'s where one is set, else ``controller_target_mean``.
    """
    from surprisal_cc.model.apc import APCModel
    from surprisal_cc.model.calibration import check_calibration_target, target_mean_for_budget
    from surprisal_cc.errors import ConfigurationError
    from surprisal_cc.model.flops import expected_macs_at_mean_p_big, module_macs, static_flop_rows
    from surprisal_cc.model.nnet import runs_apc
    from surprisal_cc.training.run_settings import check_flops_budget, load_inert_hparams

    given = dict(_split_override(o) for o in overrides)
    hparams = load_inert_hparams(hparams_file, "\n".join(f"{key}: {value}" for key, value in given.items()))
    if not isinstance(hparams, dict):
        raise ConfigurationError(f"{hparams_file}: not an hparams file (a YAML mapping of settings)")
    if "encoder_module" not in hparams:  # e.g. APC pretraining: the APC model is the whole model
        if "apc_model" not in hparams:
            raise ConfigurationError(f"{hparams_file} describes no model (neither encoder_module nor apc_model)")
        return {"hparams": hparams_file, "overrides": list(overrides),
                "macs_per_frame": {"apc": module_macs(hparams["apc_model"])}}
    encoder = hparams["encoder_module"]
    apc = (hparams.get("apc_model") or APCModel()) if runs_apc(hparams["input_features"], encoder) else None
    apc_macs = module_macs(apc) if apc is not None else 0
    rows = static_flop_rows(encoder, apc_macs)
    mean = hparams.get("controller_target_mean")
    budget = hparams.get("flops_budget")
    calibrated = getattr(getattr(encoder, "controller", None), "calibrates_on_surprisal", False)
    if budget is not None:  # the calibration aims at the budget's mean p_big, not controller_target_mean
        check_flops_budget(hparams, apc)
        mean = target_mean_for_budget(budget, rows["small-only"], rows["big-only"])
        rows[f"expected at flops_budget={budget:.4g} (mean p_big={mean:.3f})"] = expected_macs_at_mean_p_big(rows, mean)
    elif "small-only" in rows and calibrated and mean is not None:  # its mean p_big is the calibration's target
        try:
            check_calibration_target(mean)
        except ValueError as err:
            raise ConfigurationError(str(err)) from None
        rows[f"expected at mean p_big={mean:g}"] = expected_macs_at_mean_p_big(rows, mean)
    return {"hparams": hparams_file, "overrides": list(overrides), "macs_per_frame": rows}


def _split_override(option: str):
    if not option.startswith("--") or "=" not in option:
        raise UsageError(f"override {option!r} must look like --key=value")
    key, value = option[2:].split("=", 1)
    return key, value


def cmd_flops(args, unknown: List[str]) -> int:
    from surprisal_cc.model.flops import format_flop_table

    table = flops_table(args.hparams, unknown)
    print(json.dumps(table, indent=2) if args.json else format_flop_table(table["macs_per_frame"]))
    return 0


# ----------------------------------------------------------------------------------------------
# grid, report, bench
# ----------------------------------------------------------------------------------------------
def cmd_analyse(args, unknown: List[str]) -> int:
    from surprisal_cc.experiments.analysis import run_analysis

    return run_analysis(args)


def cmd_grid(args, unknown: List[str]) -> int:
    from surprisal_cc.experiments.grid import run_grid

    return run_grid(args, unknown)


def cmd_report(args, unknown: List[str]) -> int:
    from surprisal_cc.experiments.aggregation import pool_configurations
    from surprisal_cc.experiments.report import format_markdown, write_csv
    from surprisal_cc.training.run_folder import collect_results
    from surprisal_cc.experiments.run_labels import POOLABLE_KEYS

    pool = [key for keys in args.pool for key in keys.split(",") if key]
    wrong = [key for key in pool if key not in POOLABLE_KEYS]
    if wrong:
        raise UsageError(f"--pool {','.join(wrong)}: a report pools over {', '.join(POOLABLE_KEYS)}")
    if args.out and args.json:
        raise UsageError("--json prints the results files' rows, --out writes the tables: give one of them")
    if args.out and len(args.paths) != 1:
        raise UsageError("--out takes one results folder")
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"no such file or folder: {', '.join(missing)}")
    rows = collect_results(args.paths)
    if not rows:
        raise FileNotFoundError(f"no results files (results*.json) found under {', '.join(args.paths)}")
    check_outputs_apart({"--csv": args.csv}, {f"results file {row['path']}": row["path"] for row in rows})
    rows = pool_configurations(rows, pool)
    if args.csv:
        write_csv(rows, args.csv)
    if args.out:
        from surprisal_cc.experiments.plots import make_all_plots
        from surprisal_cc.experiments.report import write_report

        print(write_report(args.paths[0], args.out, pool=pool))
        for path in make_all_plots(args.paths[0], args.out, pool=pool):
            print(f"wrote {path}")
        return 0
    print(json.dumps(rows, indent=2, default=str) if args.json else format_markdown(rows))
    return 0


def cmd_curves(args, unknown: List[str]) -> int:
    from surprisal_cc.experiments.report import format_learning_curves
    from surprisal_cc.training.run_folder import read_history

    given = []  # (folder, label, history) of each run, in order
    for spec in args.runs:
        folder, _, label = spec.partition("=")
        if not (Path(folder) / "history.jsonl").exists():
            raise FileNotFoundError(f"{folder}: no history.jsonl (give run folders of the recipes)")
        history = read_history(Path(folder))
        if history and not any(row.get(args.key) is not None for row in history):  # a run in progress may have none
            found = sorted({key for row in history for key, value in row.items() if isinstance(value, (int, float))})
            raise ValueError(f"{Path(folder) / 'history.jsonl'}: no {args.key} in any epoch; give --key one of "
                             f"{', '.join(k for k in found if k != 'epoch')}")
        given.append((folder, label or folder, history))
    # the table has a column per run (a label given twice: told apart by the folder's name); the plot
    # draws one curve per label, the mean over its runs
    labels = [label for _, label, _ in given]
    columns = [label if labels.count(label) == 1 else f"{label} ({Path(folder).name})" for folder, label, _ in given]
    if len(set(columns)) < len(columns):
        raise UsageError("curves: two runs have the same label and folder name: give each its own label")
    print(format_learning_curves({c: folder for c, (folder, _, _) in zip(columns, given)}, key=args.key,
                                 histories={c: history for c, (_, _, history) in zip(columns, given)}))
    if args.plot:
        from surprisal_cc.experiments.plots import plot_validation_curves

        written = plot_validation_curves([folder for folder, _, _ in given], args.plot, key=args.key, labels=labels,
                                         histories=[history for _, _, history in given],
                                         title=args.title or f"Validation {args.key} by epoch")
        print(f"wrote {written}")
    return 0


def cmd_bench(args, unknown: List[str]) -> int:
    checkout = Path.cwd()  # the benchmarks/ folder belongs to a source checkout; it is not installed
    if not (checkout / "benchmarks" / "run_all.py").is_file():
        raise FileNotFoundError(f"surprisal-cc bench runs the benchmarks/ folder of a source checkout, and there is "
                                f"none in {checkout}: run it from the root of a checkout of this repository")
    command = [sys.executable, "-m", "benchmarks.run_all"]
    if args.json:
        command.append("--json")
    if args.quick:
        command.append("--quick")
    if args.only is not None:  # benchmarks.run_all checks the names (an empty list is an error there)
        command.append(f"--only={args.only}")
    command.append(f"--threads={args.threads}")
    if args.output is not None:  # relative to the folder bench was started in, which is the checkout
        check_writable("--output file", args.output)  # now, not after a run of minutes
        command.append(f"--output={args.output}")
    if args.device != "cpu":
        command.append(f"--device={args.device}")
    return _run_forwarding_output(command, cwd=checkout)


def _run_forwarding_output(command: Sequence[str], cwd: Path) -> int:
    """Run ``command`` in ``cwd``, copying its output line by line to ``sys.stdout`` and ``sys.stderr``.

    Unlike inherited file descriptors, this output reaches whatever ``sys.stdout`` and ``sys.stderr``
    are at the time (a caller's redirection, pytest's capture). Returns the command's exit status.

    Example
    -------
    >>> _run_forwarding_output([sys.executable, "-c", "print('hello')"], cwd=Path("."))
    hello
    0
    """
    def copy(lines, target) -> None:
        for line in lines:
            target.write(line)
            target.flush()

    with subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        errors = threading.Thread(target=copy, args=(proc.stderr, sys.stderr), daemon=True)
        errors.start()
        copy(proc.stdout, sys.stdout)
        errors.join()
    return proc.returncode


# ----------------------------------------------------------------------------------------------
# export, transcribe, evaluate
# ----------------------------------------------------------------------------------------------
def cmd_export(args, unknown: List[str]) -> int:
    from surprisal_cc.training.export import export_run

    out = export_run(args.run_dir, args.out_dir, dtype=args.dtype, apc_path=args.apc, average=args.average)
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
        _emit(_format_transcription(result, utterance))


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


def _format_transcription(result, utterance: Optional[str] = None) -> str:
    routing = ""
    if result.p_big is not None:
        routing = (f", p_big {float(result.p_big.mean()):.3f} (big network on {100 * result.big_fraction:.1f} % "
                   f"of frames, {result.routing} routing{'' if result.seed is None else f' seed {result.seed}'})")
    elif result.steps is not None:
        routing = f", {float(result.steps.mean()):.2f} steps per frame"
    header = f"{utterance} ({result.path})" if utterance else result.path
    text = result.text or "(no phones recognised)"  # silence, or audio too short to hold a phone
    frames = f"{result.num_frames} frame{'' if result.num_frames == 1 else 's'}"
    return (f"{header}\n  {text}\n  {result.duration_s:.2f} s, {frames}, "
            f"{result.flops_per_frame / 1e6:.2f}M FLOPs per frame{routing}, RTF {result.rtf:.3f}")


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


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------
COMMANDS = {"analyse": cmd_analyse, "flops": cmd_flops, "grid": cmd_grid, "report": cmd_report, "bench": cmd_bench, "export": cmd_export,
            "curves": cmd_curves,
            "transcribe": cmd_transcribe, "evaluate": cmd_evaluate}
# commands that take --key=value overrides besides their own options
TAKE_OVERRIDES = ("flops", "grid")


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line; ``command`` (the one about to run) is the only experiment tool whose module is
    imported for its options, so that ``transcribe`` and ``--help`` do not import the tools (None: no
    tool's options, as for ``surprisal-cc --help``)."""
    import surprisal_cc

    parser = _Parser(prog="surprisal-cc", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"surprisal-cc {surprisal_cc.__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_flops_parser(subparsers)
    _add_grid_parser(subparsers, command)
    _add_analyse_parser(subparsers)
    _add_report_parser(subparsers)
    _add_curves_parser(subparsers)
    _add_bench_parser(subparsers)
    _add_export_parser(subparsers)
    _add_transcribe_parser(subparsers)
    _add_evaluate_parser(subparsers)
    return parser


def _add_flops_parser(subparsers) -> None:
    p = subparsers.add_parser("flops", help="per-component MACs per frame of an hparams file (--key=value overrides)")
    p.add_argument("hparams")
    p.add_argument("--json", action="store_true")
    _usage_with_overrides(p)


def _usage_with_overrides(parser: argparse.ArgumentParser) -> None:
    """Show a command's ``--key=value`` overrides (:data:`TAKE_OVERRIDES`) in its usage line."""
    parser.usage = parser.format_usage().split("usage: ", 1)[1].rstrip() + " [--key=value ...]"


def _add_grid_parser(subparsers, command: Optional[str]) -> None:
    """The grid's options, which :mod:`surprisal_cc.experiments.grid` declares (with its description), are added only
    where ``command`` is ``grid``: ``surprisal-cc --help`` and ``transcribe`` do not import the tool."""
    p = subparsers.add_parser("grid", help="run an experiment grid (resumable, --key=value overrides for every "
                                           "run), then write its tables and figures",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    if command == "grid":
        from surprisal_cc.experiments import grid

        p.description = grid.__doc__
        grid.add_arguments(p)
        _usage_with_overrides(p)


def _add_analyse_parser(subparsers) -> None:
    p = subparsers.add_parser("analyse", help="APC surprisal on silence vs speech frames (forced alignments), "
                                              "routing plot",
                              description="Where is the APC model surprised? Its surprisal on silence vs. speech "
                                          "frames of force-aligned audio (MFA's silence marks are silence), and a "
                                          "routing plot of the first utterance (surprisal_cc.experiments.analysis).")
    p.add_argument("--apc", required=True, help="exported APC model file")
    p.add_argument("--mfa", required=True, help="MFA CSV export with sample-level phone boundaries")
    p.add_argument("--audio-root", required=True, help="folder the CSV's paths are relative to")
    p.add_argument("--max-utterances", type=positive_int, default=None)
    p.add_argument("--cache", help="feature cache folder to reuse surprisal from (e.g. results/MiniLibriSpeech/feature_cache)")
    p.add_argument("--calibration", help="calibration.json of a run: draws its routing in the plot")
    p.add_argument("--plot", help="write a routing plot of the first utterance to this PNG")
    p.add_argument("--json", help="also write the numbers to this file")


def _add_report_parser(subparsers) -> None:
    p = subparsers.add_parser("report", help="Markdown table from results files or folders")
    p.add_argument("paths", nargs="+")
    p.add_argument("--json", action="store_true",
                   help="print the rows the table is made of, one per results file (every field), as JSON")
    p.add_argument("--csv", help="also write the table as CSV to this file")
    p.add_argument("--out", help="write every paper-style table (Markdown + CSV) and every plot into this "
                                 "folder (from one results folder)")
    p.add_argument("--pool", action="append", default=[], metavar="KEY[,KEY]",
                   help="configuration keys that no longer tell rows apart, of apc, precision, train_labels, "
                        "train_targets, dataset (e.g. apc: seeds trained with an APC file and with its fp16 copy "
                        "form one row, labelled with both fingerprints)")


def _add_curves_parser(subparsers) -> None:
    p = subparsers.add_parser("curves", help="learning curves of runs, finished or in progress: Markdown table "
                                             "(lr, validation metric, minutes per epoch) and plot")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR[=LABEL]", help="recipe run folders (label: column name)")
    p.add_argument("--key", default="PER", help="validation metric of history.jsonl (default: PER)")
    p.add_argument("--plot", help="also draw the curves into this PNG file")
    p.add_argument("--title", help="title of the plot")


def _add_bench_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="run the benchmarks and print a table")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="smaller sizes (seconds instead of minutes)")
    p.add_argument("--only", help="comma-separated benchmarks (training,inference,rnn,decoding,dataprep,memory,allocator,layout)")
    p.add_argument("--threads", type=positive_int, default=1, metavar="N",
                   help="torch threads of the benchmarks (default 1; timings compare only at a stated count)")
    p.add_argument("--output", metavar="FILE.json", help="also write the results and machine information there")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: the training and rnn benchmarks there")


def _add_export_parser(subparsers) -> None:
    p = subparsers.add_parser("export", help="model folder from the best checkpoint of a finished recipe run")
    p.add_argument("run_dir", help="the recipe run's output_folder (hyperparams.yaml, results.json, save/)")
    p.add_argument("out_dir", help="the model folder to write: a new or empty folder, or a model folder, which is replaced")
    p.add_argument("--dtype", choices=["fp32", "fp16"], default="fp32",
                   help="weight storage (fp16: half the size, loaded back as fp32)")
    p.add_argument("--apc", help="APC model file, a relative one from the working directory (default: the run's "
                                 "apc_path, else apc_export_path; a relative one is looked for where the recipe "
                                 "ran, then here)")
    p.add_argument("--average", type=positive_int, default=1, metavar="N",
                   help="average the weights of the N best checkpoints (default 1: the best one)")


def _add_transcribe_parser(subparsers) -> None:
    p = subparsers.add_parser("transcribe", help="phones, routing, FLOPs and RTF of audio files")
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
    _add_decoding_options(p, chunk_help=f"files longer than S + {2 * CONTEXT_S:g} s are decoded in parts of S seconds "
                                        f"with {CONTEXT_S:g} s of context on each side, in bounded memory (default "
                                        f"{CHUNK_S:g}; 0: every file whole)",
                          json_help="the same as --format json")


def _add_evaluate_parser(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="PER, FLOPs, p_big and RTF on a LibriSpeech, TIMIT, Kaldi or "
                                               "manifest corpus")
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
