"""Hparams files that start from another one: a root-level ``!include``.

The corpus files share most of their settings, so each starts from a common file::

    --- !include:../common/conditional_ctc.yaml
    dataset: TIMIT
    num_outputs: 40

reads as "that file, with these top-level keys replaced (or added)". hyperpyyaml resolves
``!include:`` only below the root, so :func:`expand_hparams` writes the whole configuration out
as one file first; ``--key=value`` overrides then apply to it as usual (and must name one of its
keys). Every reader of hparams files in this package goes through it.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Union

import ruamel.yaml

INCLUDE = "!include:"
PathLike = Union[str, Path]


def included_file(path: PathLike) -> Path | None:
    """The file that ``path`` starts from (its root-level ``!include:``), or None."""
    tag = getattr(getattr(_load(Path(path).read_text(encoding="utf-8")), "tag", None), "value", None)
    if isinstance(tag, str) and tag.startswith(INCLUDE):
        return Path(path).parent / tag[len(INCLUDE):]
    return None


def expand_hparams(path: PathLike, _depth: int = 0) -> str:
    """The text of an hparams file with its root-level ``!include`` written out (recursively).

    The included file comes first, in its own order (so objects are built, and random numbers
    drawn, in the same order); each top-level key of ``path`` replaces the included value at its
    place, and new keys follow. A file without a root-level include is returned as it is.

    Arguments
    ---------
    path : str or pathlib.Path
        The hparams file.

    Returns
    -------
    str
        YAML text that hyperpyyaml loads directly.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "base.yaml").write_text("lr: 0.1\\nepochs: 5\\n")
    ...     _ = (Path(folder) / "corpus.yaml").write_text("--- !include:base.yaml\\nepochs: 9\\nname: x\\n")
    ...     print(expand_hparams(Path(folder) / "corpus.yaml"), end="")
    lr: 0.1
    epochs: 9
    name: x
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    base_file = included_file(path)
    if base_file is None:
        return text
    if _depth > 8:
        raise ValueError(f"{path}: more than 8 nested root-level includes (a cycle?)")
    if not base_file.is_file():
        raise ValueError(f"{path} starts from {base_file}, which does not exist")
    base = _load(expand_hparams(base_file, _depth + 1))
    for key, value in _load(text).items():
        base[key] = value
    out = io.StringIO()
    ruamel.yaml.YAML().dump(base, out)
    return out.getvalue()


def _load(text: str):
    return ruamel.yaml.YAML().load(text)
