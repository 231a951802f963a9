#!/usr/bin/env python3
"""Write the model that ``pretrained/`` held at a git revision of this repository to a folder.

Labels made by the shipped model (``realign_labels.py pretrained …``) change when ``pretrained/`` is
replaced by a better model. A comparison whose runs must all train on the same labels relabels with
the model of a fixed revision instead (``hparams/MiniLibriSpeech/grid_session.yaml``, its prepare
steps)::

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
from typing import List

REPOSITORY = Path(__file__).resolve().parents[2]


def write_shipped_model(revision: str, out_dir: Path, folder: str = "pretrained") -> List[Path]:
    """Extract ``folder`` as committed at ``revision`` into ``out_dir``; returns the files written.

    Raises ``RuntimeError`` naming the revision when git cannot give it.
    """
    try:
        archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", "--format=tar", revision, folder],
                                 capture_output=True, check=True).stdout
    except FileNotFoundError as error:
        raise RuntimeError("git is not installed; it is needed to read the model of a past revision") from error
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"{folder}/ at revision {revision} cannot be read from the clone in {REPOSITORY} "
                           f"({error.stderr.decode(errors='replace').strip()}); a shallow clone lacks it: run "
                           f"`git fetch --unshallow`") from error
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
    parser.add_argument("--folder", default="pretrained", help="the model's folder in the repository")
    args = parser.parse_args(argv)
    try:
        written = write_shipped_model(args.revision, args.out_dir, args.folder)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{args.folder}/ at {args.revision} written to {args.out_dir}: {', '.join(p.name for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
