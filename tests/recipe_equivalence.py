#!/usr/bin/env python3
"""Do the recipes still compute what they computed at another revision?

Runs the recipes on the test fixtures (a stand-in Mini-LibriSpeech from real dev-clean-2 audio, and
the TIMIT fixture) once with the code of git revision ``BASE`` and once with the working tree, with
the same arguments, seed and one thread each, then compares every number of each run's
``results.json`` (PER and its error counts, FLOPs, routing, calibration, losses, the mfa-dev stand-in)
and ``history.jsonl``. Then the working tree decodes the checkpoint that ``BASE`` trained
(``--test_only``), which must load and score as it did. A refactoring that must not change results
prints ``identical`` for every row::

    python tests/recipe_equivalence.py 4d279b0            # about 15 min on 2 cores
    python tests/recipe_equivalence.py 4d279b0 --only act pondernet
    python tests/recipe_equivalence.py 340e016 --extra=--precision=fp32   # fp32 on both sides

Exit status 1 when a run differs (the differing keys are printed) or fails.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_fixtures import REPO, make_mini_librispeech_subset, make_timit_fixture, require_dev_clean_2  # noqa: E402

MLS = ["recipes/MiniLibriSpeech/train.py", "hparams/MiniLibriSpeech/conditional_ctc.yaml"]
TIMIT = ["recipes/TIMIT/train.py", "hparams/TIMIT/conditional_ctc.yaml"]
TOY = ["--valid_speakers=2", "--number_of_epochs=2", "--batch_size=4", "--apc_epochs=1", "--apc_batch_size=4",
       "--seed=3"]
# name -> (recipe and hparams, arguments, folder of results.json below the experiment root)
RUNS: Dict[str, Tuple[List[str], List[str], str]] = {
    "surprisal": (MLS, TOY, "conditional-surprisal-paper-apc/seed3"),
    "big_only": (MLS, TOY + ["--controller=big_only", "--apc_path=APC"], "conditional-big_only-paper-apc/seed3"),
    "random": (MLS, TOY + ["--controller=random", "--apc_path=APC"], "conditional-random-paper-apc/seed3"),
    "learned": (MLS, TOY + ["--controller=learned", "--apc_path=APC"], "conditional-learned-paper-apc/seed3"),
    "act": (MLS, TOY + ["--encoder=act", "--apc_path=APC"], "act-surprisal-paper-apc/seed3"),
    "pondernet": (MLS, TOY + ["--encoder=pondernet", "--apc_path=APC"], "pondernet-surprisal-paper-apc/seed3"),
    "fbank": (MLS, TOY + ["--input_features=fbank", "--apc_path=APC"], "conditional-surprisal-paper-fbank/seed3"),
    "cpu_profile": (MLS, TOY + ["--apc_path=APC", "--pronunciation_alternatives=True", "--speed_perturb=[0.9,1.1]",
                                "--dynamic_batching=True", "--max_batch_length=60", "--lr=0.001",
                                "--lr_schedule=hold_decay", "--precision=fp32",
                                "--output_folder=EXP/cpu_profile/seed3"], "cpu_profile/seed3"),
    "timit": (TIMIT, ["--number_of_epochs=2", "--batch_size=2", "--apc_epochs=1", "--apc_batch_size=2",
                      "--controller_target_mean=0.5"], "conditional-surprisal-paper-apc/seed1"),
}
# bookkeeping that differs from run to run by design
IGNORED = {"date", "commit", "elapsed_s", "epoch_s", "wall_s", "seconds", "hostname", "data", "manifests",
           "run_dir", "output_folder", "git", "python", "torch", "cpu", "threads_used", "time_s", "duration_s"}


def flatten(value: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """``(dotted key, leaf)`` pairs of nested dicts and lists, bookkeeping keys left out."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in IGNORED and not key.endswith("_s"):
                yield from flatten(item, f"{prefix}{key}.")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from flatten(item, f"{prefix}{i}.")
    else:
        yield prefix.rstrip("."), value


def differences(before: Any, after: Any) -> List[str]:
    """Keys whose values differ (numbers compared exactly; a path differs only by its folder)."""
    a, b = dict(flatten(before)), dict(flatten(after))
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, "<missing>"), b.get(key, "<missing>")
        if isinstance(x, str) and isinstance(y, str) and ("/" in x or "/" in y):
            x, y = Path(x).name, Path(y).name
        same = x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        if not same:
            out.append(f"{key}: {x!r} -> {y!r}")
    return out


def recipe_env(tree: Path) -> Dict[str, str]:
    """Environment of a recipe run with the code of ``tree``: one thread, fixed hash seed."""
    return {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def run_recipes(tree: Path, root: Path, names: List[str], extra: List[str] = ()) -> Dict[str, Dict[str, Any]]:
    """Run the named recipes with the code of ``tree`` and the arguments ``extra`` too; results below ``root``."""
    env = recipe_env(tree)
    exp, timit_exp = root / "exp", root / "timit_exp"
    apc = exp / "apc" / "apc.pt"
    order = ["surprisal"] + [n for n in names if n != "surprisal"]  # the first run pretrains the shared APC
    found = {}
    for name in order:
        (recipe, hparams), args, folder = RUNS[name]
        data = root.parent / ("timit" if name == "timit" else "corpus")
        base = timit_exp if name == "timit" else exp
        args = [a.replace("APC", str(apc)).replace("EXP", str(base)) for a in args]
        command = [sys.executable, recipe, hparams, f"--data_folder={data}", f"--experiment_root={base}", *args, *extra]
        proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            found[name] = {"error": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]}
            print(f"{tree.name}: {name} failed: {found[name]['error']}", file=sys.stderr)
            continue
        run = base / folder
        history = (run / "history.jsonl").read_text().splitlines()
        found[name] = {"results": json.loads((run / "results.json").read_text()),
                       "history": [json.loads(line) for line in history]}
        print(f"{tree.name}: {name} done", file=sys.stderr, flush=True)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="git revision to compare the working tree with")
    parser.add_argument("--only", nargs="+", choices=sorted(RUNS), default=sorted(RUNS))
    parser.add_argument("--folder", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--extra", action="append", default=[], metavar="ARG",
                        help="a recipe argument for every run on both sides, e.g. --extra=--precision=fp32 (repeatable)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        shared = require_dev_clean_2()
        make_mini_librispeech_subset(shared / "LibriSpeech" / "dev-clean-2", folder / "corpus", train_speakers=4,
                                     test_speakers=2, utterances_per_speaker=3, dev_speakers=1,
                                     mfa_csv=shared / "phone_labels" / "dev-clean-2_mfa.csv")
        make_timit_fixture(folder / "timit")
        base_tree = folder / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(base_tree), args.base], cwd=REPO, check=True,
                       capture_output=True)
        try:
            before = run_recipes(base_tree, folder / "runs_base", args.only, args.extra)
            after = run_recipes(REPO, folder / "runs_working_tree", args.only, args.extra)
            reloaded = decode_base_checkpoint(folder / "runs_base", folder / "corpus")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=REPO, capture_output=True)
    failed = False
    print(f"| run | {args.base} → working tree |\n|---|---|")
    for name in args.only:
        b, a = before.get(name, {}), after.get(name, {})
        if "error" in b or "error" in a:
            verdict, failed = f"failed: {b.get('error') or a.get('error')}", True
        else:
            diff = differences(b, a)
            failed |= bool(diff)
            verdict = "identical" if not diff else f"{len(diff)} differ: " + "; ".join(diff[:6])
        n = len(dict(flatten(b)))
        print(f"| {name} | {verdict} ({n} values compared) |")
    keys = ("PER", "error_rate_details", "flops_per_frame", "big_fraction", "p_big_mean", "dev")
    if "error" in reloaded or "surprisal" not in before or "error" in before["surprisal"]:
        verdict, failed = f"failed: {reloaded.get('error')}", True
    else:
        trained = {k: before["surprisal"]["results"].get(k) for k in keys}
        diff = differences(trained, {k: reloaded.get(k) for k in keys})
        failed |= bool(diff)
        verdict = "identical" if not diff else f"{len(diff)} differ: " + "; ".join(diff[:6])
    print(f"| surprisal checkpoint of {args.base}, decoded by the working tree (--test_only) | {verdict} |")
    return 1 if failed else 0


def decode_base_checkpoint(base_runs: Path, corpus: Path) -> Dict[str, Any]:
    """The working tree's ``--test_only`` decoding of the surprisal run that the base revision
    trained: its checkpoint (today's format) must load and give the same test results."""
    recipe, args, folder = RUNS["surprisal"]
    env = recipe_env(REPO)
    exp = base_runs / "exp"
    command = [sys.executable, *recipe, f"--data_folder={corpus}", f"--experiment_root={exp}", *args,
               f"--apc_path={exp / 'apc' / 'apc.pt'}", "--test_only"]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]}
    return json.loads((exp / folder / "results_test_only.json").read_text())


if __name__ == "__main__":
    sys.exit(main())
