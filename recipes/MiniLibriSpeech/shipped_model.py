#!/usr/bin/env python3
"""Write the model that the repository shipped at a git revision to a folder.

The shipped model is ``surprisal_cc/pretrained/`` (``pretrained/`` at the root in revisions before
the package carried it). Labels made by the shipped model (``realign_labels.py surprisal_cc/pretrained …``)
change when it is replaced by a better model. A comparison whose runs must all train on the same
labels relabels with the model of a fixed revision instead (``hparams/MiniLibriSpeech/grid_apc_tc5.yaml``,
its prepare steps)::

    python recipes/MiniLibriSpeech/shipped_model.py 0cb7ec2 results/MiniLibriSpeech/aligner/0cb7ec2
    python recipes/MiniLibriSpeech/realign_labels.py results/MiniLibriSpeech/aligner/0cb7ec2 out.csv --pauses ...

The folder appears whole or not at all (written beside it, then renamed). Needs ``git`` and a clone
that holds the revision (a shallow clone does not: ``git fetch --unshallow``).
"""
import argparse
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath
from typing import List, Optional

REPOSITORY = Path(__file__).resolve().parents[2]
# where the shipped model lived, newest first
SHIPPED_FOLDERS = ("surprisal_cc/pretrained", "pretrained")


def _git(revision: str, *args: str) -> bytes:
    """The output of ``git ARGS`` in this clone; ``RuntimeError`` naming ``revision`` when it fails."""
    try:
        return subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True, check=True).stdout
    except FileNotFoundError as error:
        raise RuntimeError("git is not installed; it is needed to read the model of a past revision") from error
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"the model of revision {revision} cannot be read from the clone in {REPOSITORY} "
                           f"({error.stderr.decode(errors='replace').strip()}); a shallow clone lacks it: run "
                           f"`git fetch --unshallow`") from error


def write_shipped_model(revision: str, out_dir: Path, folder: Optional[str] = None) -> List[Path]:
    """Extract ``folder`` (default: the shipped model's folder at that revision) as committed at
    ``revision`` into ``out_dir``; returns the files written.

    Raises ``RuntimeError`` naming the revision when git cannot give it.
    """
    if folder is None:
        held = _git(revision, "ls-tree", "--name-only", revision, *SHIPPED_FOLDERS).decode().split()
        folder = next((f for f in SHIPPED_FOLDERS if f in held), SHIPPED_FOLDERS[0])
    archive = _git(revision, "archive", "--format=tar", revision, folder)
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    names = []
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                name = PurePosixPath(member.name).relative_to(folder)
                target = partial.joinpath(*name.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
                names.append(name)
    if not names:
        raise RuntimeError(f"{folder}/ is empty at revision {revision}")
    shutil.rmtree(out_dir, ignore_errors=True)
    partial.rename(out_dir)
    return [out_dir.joinpath(*name.parts) for name in names]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="a commit of this repository (hash, tag or branch)")
    parser.add_argument("out_dir", type=Path, help="folder to write the model to (replaced if it exists)")
    parser.add_argument("--folder", help="the model's folder in the repository (default: the shipped model's, "
                                         f"{' or '.join(SHIPPED_FOLDERS)})")
    args = parser.parse_args(argv)
    try:
        written = write_shipped_model(args.revision, args.out_dir, args.folder)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"the model of {args.revision} written to {args.out_dir}: {', '.join(p.name for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
