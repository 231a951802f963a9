"""Hparams files: the one way the package reads them.

The corpus files share most of their settings, so each starts from a common file::

    --- !include:../common/conditional_ctc.yaml
    dataset: TIMIT
    num_outputs: 40

reads as "that file, with these top-level keys replaced (or added)". hyperpyyaml resolves
``!include:`` only below the root, so :func:`expand_hparams` writes the whole configuration out as one
file first (the rule of its order is in its docstring); everything else goes through that text:

* :func:`load_hparams_file` builds it (hyperpyyaml's ``load_hyperpyyaml``, ``overrides`` applied): the
  recipes' hparams and the model files;
* :func:`resolved_hparams` is the same configuration with the overrides applied and the references resolved,
  nothing built (hyperpyyaml's ``resolve_references``): what a run saves as ``hyperparams.yaml``;
* :func:`load_yaml_tolerant` and :func:`parse_yaml_tolerant` read such text as plain data, tags and all,
  without running anything (with PyYAML, the parser hyperpyyaml builds with, so numbers read as a build
  reads them; :class:`TaggedMapping` remembers an object's tag).

ruamel.yaml (hyperpyyaml's reader of tags and references) is used only for the text: the include, and
:func:`yaml_tree`. Building one may create folders (a checkpointer's ``save/``):
:func:`new_empty_folders_removed` takes back those that a rejected configuration leaves empty
(:func:`configured_paths` names the candidates). What a resumed run or a grid compares of two
configurations is :mod:`surprisal_cc.training.changed_settings`'s.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import io
import os
import re
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Set, Union

import ruamel.yaml
import yaml

INCLUDE = "!include:"
#: hyperpyyaml's tags of a value taken from elsewhere in the file
REFERENCE_TAGS = ("!ref", "!copy")
PathLike = Union[str, Path]


def included_file(path: PathLike) -> Path | None:
    """The file that ``path`` starts from (its root-level ``!include:``), or None."""
    tag = _root_tag(Path(path).read_text(encoding="utf-8"))
    if tag is not None and tag.startswith(INCLUDE):
        return Path(path).parent / tag[len(INCLUDE):]
    return None


@functools.lru_cache(maxsize=64)
def _root_tag(text: str) -> str | None:
    """The tag of the root node of YAML ``text`` (e.g. ``!include:base.yaml``), or None (kept for the
    next call with the same text: each load of an hparams file reads it several times)."""
    return tag_of(yaml_tree(text))


def yaml_tree(text: str) -> Any:
    """YAML ``text`` as hyperpyyaml reads it before it resolves anything: ruamel.yaml's round-trip tree,
    whose nodes keep their tags (:func:`tag_of`) and comments.

    Example
    -------
    >>> tree = yaml_tree("lr: 0.1  # rate\\nmodel: !new:torch.nn.Linear [2, !ref <lr>]\\n")
    >>> tag_of(tree["model"]), tag_of(tree["model"][1]), tag_of(tree["lr"])
    ('!new:torch.nn.Linear', '!ref', None)
    """
    return ruamel.yaml.YAML().load(text)


def tag_of(node: Any) -> str | None:
    """The tag of a node of :func:`yaml_tree` (``!ref``, ``!new:...``), or None for an untagged one."""
    tag = getattr(getattr(node, "tag", None), "value", None)
    return tag if isinstance(tag, str) else None


def referenced_keys(node: Any) -> Set[str]:
    """The top-level keys that the references (``!ref``, ``!copy``) in a node of :func:`yaml_tree` name, at
    any depth: ``!ref <prepared_folder>/train.csv`` and ``!ref <labels[train]>`` name ``prepared_folder`` and
    ``labels``, as hyperpyyaml reads a reference (each ``<...>``: a key, then ``[entry]`` or ``.attribute``).

    Example
    -------
    >>> tree = yaml_tree("a:\\n  x: !ref <root>/<sub[train]>\\n  y: [!copy <model.size>, 3]\\n  z: <plain text>\\n")
    >>> sorted(referenced_keys(tree))
    ['model', 'root', 'sub']
    """
    found: Set[str] = set()
    if tag_of(node) in REFERENCE_TAGS and isinstance(getattr(node, "value", None), str):
        found.update(re.split(r"[.\[]", name, maxsplit=1)[0] for name in re.findall(r"<([^>]*)>", node.value))
    if isinstance(node, Mapping):
        for value in node.values():
            found |= referenced_keys(value)
    elif isinstance(node, list):
        for value in node:
            found |= referenced_keys(value)
    return found


def expand_hparams(path: PathLike, _depth: int = 0) -> str:
    """The text of an hparams file with its root-level ``!include`` written out (recursively).

    The order is that of hyperpyyaml's overrides, with one exception. The included file comes first,
    in its own order (so objects are built, and random numbers drawn, in the same order), each
    top-level key that ``path`` sets holding its new value at its place; the keys that ``path`` adds
    follow in its order, except that an added key that holds a reference and that a key above it refers
    to (``!ref`` or ``!copy``: :func:`referenced_keys`) moves to just before the first such key.
    hyperpyyaml resolves references top-down in one pass: a reference that is a whole value (``!ref
    <file>``, or ``!ref <source[train]>`` into a mapping) to a value further down that is itself a
    reference does not resolve (a plain value resolves wherever it stands), and an added key is the
    only kind the included file cannot have placed above its referrers. A file without a root-level
    include is returned as it is.

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
    ...     _ = (Path(folder) / "base.yaml").write_text("lr: 0.1\\nsource: {train: null}\\nepochs: 5\\n")
    ...     _ = (Path(folder) / "corpus.yaml").write_text("--- !include:base.yaml\\nepochs: 9\\nname: x\\n"
    ...                                                   "source: {train: !ref <file>}\\nfile: !ref <name>.csv\\n")
    ...     print(expand_hparams(Path(folder) / "corpus.yaml"), end="")
    lr: 0.1
    file: !ref <name>.csv
    source: {train: !ref <file>}
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
    return _merged(expand_hparams(base_file, _depth + 1), text)


@functools.lru_cache(maxsize=64)
def _merged(base_text: str, text: str) -> str:
    """``base_text`` with each top-level key of ``text`` replacing or added, in :func:`expand_hparams`' order
    (kept for the next call with the same texts)."""
    merged = yaml_tree(base_text)
    added = []
    for key, value in yaml_tree(text).items():
        if key not in merged:
            added.append(key)
        merged[key] = value
    for key in added:
        if not referenced_keys(merged[key]):
            continue  # a value without references resolves wherever it stands
        keys = list(merged)
        referrer = next((other for other in keys[:keys.index(key)] if key in referenced_keys(merged[other])), None)
        if referrer is not None:
            merged.insert(keys.index(referrer), key, merged.pop(key))
    out = io.StringIO()
    ruamel.yaml.YAML().dump(merged, out)
    return out.getvalue()


def load_hparams_file(path: PathLike, overrides: Union[str, Dict[str, Any]] = "") -> Dict[str, Any]:
    """Build an hparams file with hyperpyyaml: its root-level include written out
    (:func:`expand_hparams`), then ``overrides`` (YAML text or a mapping) applied.

    Hparams files are code (``!new:``/``!apply:`` run Python): only load files you trust.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "base.yaml").write_text("lr: 0.1\\nlayer: !new:torch.nn.Linear [2, !ref <width>]\\nwidth: 3\\n")
    ...     _ = (Path(folder) / "run.yaml").write_text("--- !include:base.yaml\\nwidth: 4\\n")
    ...     hparams = load_hparams_file(Path(folder) / "run.yaml", "lr: 0.5")
    >>> hparams["lr"], hparams["layer"].out_features
    (0.5, 4)
    """
    from hyperpyyaml import load_hyperpyyaml

    return load_hyperpyyaml(io.StringIO(expand_hparams(path)), overrides)


def resolved_hparams(path: PathLike, overrides: Union[str, Mapping[str, Any], None] = None) -> str:
    """The whole configuration of an hparams file (:func:`expand_hparams`) with ``overrides`` (YAML text or a
    mapping, left as given) applied and every reference resolved, nothing built: hyperpyyaml's
    ``resolve_references``, the text a run saves as its ``hyperparams.yaml``. Overrides need not name keys
    of the file here (building it, :func:`load_hparams_file`, refuses those that do not).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "run.yaml").write_text("root: exp\\nsave: !ref <root>/save\\nmodel: !new:torch.nn.ReLU\\n")
    ...     print(resolved_hparams(Path(folder) / "run.yaml", {"root": "out"}), end="")
    root: out
    save: out/save
    model: !new:torch.nn.ReLU
    """
    from hyperpyyaml import resolve_references

    overrides = copy.deepcopy(overrides) if isinstance(overrides, Mapping) else overrides
    return resolve_references(io.StringIO(expand_hparams(path)), overrides or None).getvalue()


def configured_paths(path: PathLike, overrides: Union[str, Mapping[str, Any]] = "") -> List[Path]:
    """Every text value of an hparams file (at any depth, ``overrides`` applied and references resolved,
    nothing built) as a path: the folders that building the file creates (a checkpointer's
    ``checkpoints_dir``, and the ``output_folder`` above it) are among them. [] where the file or the
    overrides do not resolve (loading them then fails before anything is built).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "run.yaml").write_text("output_folder: exp/run\\nsave_folder: !ref <output_folder>/save\\n"
    ...                                                "checkpointer: !new:speechbrain.utils.checkpoints.Checkpointer\\n"
    ...                                                "    checkpoints_dir: !ref <save_folder>\\n")
    ...     paths = configured_paths(Path(folder) / "run.yaml", "output_folder: out")
    >>> [str(p) for p in paths]
    ['out', 'out/save', 'out/save']
    """
    try:
        text = resolved_hparams(path, overrides)
    except Exception:  # noqa: BLE001 (any error of the file or the overrides: loading it names the error)
        return []
    texts: List[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, str):
            texts.append(node)
        elif isinstance(node, Mapping):
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(parse_yaml_tolerant(text))
    return [Path(t) for t in texts if t.strip() and "\0" not in t]


def _missing_folders(path: Path) -> List[Path]:
    """``path`` and those of its parents that do not exist, deepest first; [] where the path cannot
    be looked up (a name too long for the file system)."""
    missing = []
    try:
        for folder in (path, *path.parents):
            if folder.exists():
                return missing
            missing.append(folder)
    except (OSError, ValueError):
        return []
    return missing


@contextlib.contextmanager
def new_empty_folders_removed(paths: Iterable[PathLike]) -> Iterator[None]:
    """Run the block; where it raises, remove each of ``paths`` and their parents that did not exist
    before the block and is an empty folder after it (deepest first), so that a configuration rejected
    while it is built leaves no empty folder of its own behind (a checkpointer's ``save/``). A folder
    that existed before, or that holds anything, is left as it is.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     kept, made = Path(folder) / "kept", Path(folder) / "run" / "save"
    ...     kept.mkdir()
    ...     try:
    ...         with new_empty_folders_removed([made, kept / "save"]):
    ...             made.mkdir(parents=True); (kept / "save").mkdir()
    ...             raise ValueError("lr must be a positive number")
    ...     except ValueError:
    ...         pass
    ...     print(sorted(p.name for p in Path(folder).rglob("*")))
    ['kept']
    """
    missing = {folder for path in paths for folder in _missing_folders(Path(os.path.abspath(path)))}
    try:
        yield
    except BaseException:
        for folder in sorted(missing, key=lambda f: len(f.parts), reverse=True):
            with contextlib.suppress(OSError):  # not a folder, not empty, or gone
                if folder.is_dir() and not folder.is_symlink():
                    folder.rmdir()
        raise


class TolerantLoader(yaml.SafeLoader):
    """Safe YAML loader that reads hyperpyyaml tags (``!ref``, ``!new:``...) as plain data."""


class TaggedMapping(dict):
    """A mapping that was tagged in YAML (an object's arguments: ``!new:``, ``!apply:``...), read as a
    plain ``dict`` that remembers its ``tag``:
    :func:`~surprisal_cc.training.changed_settings.changed_training_settings` compares the arguments written
    out in such objects (given :func:`~surprisal_cc.training.changed_settings.argument_references`) and the
    settings they are built from, not the objects' classes."""

    def __init__(self, items=(), tag: str = ""):
        super().__init__(items)
        self.tag = tag


for _dumper in (yaml.SafeDumper, yaml.Dumper):  # written back as the plain mapping it reads as
    _dumper.add_representer(TaggedMapping, yaml.representer.SafeRepresenter.represent_dict)


def _construct_tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    """The node under any ``!`` tag as a plain mapping (:class:`TaggedMapping`), list or string."""
    if isinstance(node, yaml.MappingNode):
        return TaggedMapping(loader.construct_mapping(node, deep=True), node.tag)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


TolerantLoader.add_multi_constructor("!", _construct_tagged)


def load_yaml_tolerant(path: PathLike) -> Dict[str, Any]:
    """Top-level mapping of a (hyper)YAML file without running any tag; {} if unreadable.

    Tagged nodes (``!new:``, ``!ref``, ``!name:``...) are read as their plain contents.

    Arguments
    ---------
    path : str or pathlib.Path
        The YAML file.

    Returns
    -------
    dict
        The mapping; {} when the file is missing, not YAML or not a mapping.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "hparams.yaml").write_text(
    ...         "lr: 0.1\\nmodel: !new:torch.nn.Linear\\n  in_features: 2\\nlr_copy: !ref <lr>\\n")
    ...     hparams = load_yaml_tolerant(Path(folder) / "hparams.yaml")
    ...     missing = load_yaml_tolerant(Path(folder) / "missing.yaml")
    >>> hparams, missing
    ({'lr': 0.1, 'model': {'in_features': 2}, 'lr_copy': '<lr>'}, {})
    """
    try:
        text = expand_hparams(path)
    except (OSError, ValueError, ruamel_errors()):
        return {}
    return parse_yaml_tolerant(text)


def parse_yaml_tolerant(text: Union[str, bytes]) -> Dict[str, Any]:
    """:func:`load_yaml_tolerant` of YAML text already whole (a saved ``hyperparams.yaml``); {} if unreadable.

    Example
    -------
    >>> parse_yaml_tolerant("lr: 0.1\\nmodel: !new:torch.nn.Linear [2, 3]\\n"), parse_yaml_tolerant("- a list")
    ({'lr': 0.1, 'model': [2, 3]}, {})
    """
    try:
        data = yaml.load(text, Loader=TolerantLoader)
    except (ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def inert_overrides(hparams_file: PathLike) -> Dict[str, str]:
    """Overrides (key -> YAML value) that keep loading an hparams file free of side effects.

    No checkpoint folders are created (``checkpointer`` and ``apc_checkpointer`` become null), and
    top-level ``!PLACEHOLDER`` values get a dummy (building the modules needs no data).

    Arguments
    ---------
    hparams_file : str or path
        An hparams file; a missing file gives no overrides.

    Returns
    -------
    dict of str to str
        Key -> YAML value.

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     hparams = Path(tmp) / "hparams.yaml"
    ...     _ = hparams.write_text("data_folder: !PLACEHOLDER\\nlr: 0.1\\n"
    ...                            "checkpointer: !new:speechbrain.utils.checkpoints.Checkpointer\\n"
    ...                            "    checkpoints_dir: save\\n")
    ...     overrides = inert_overrides(hparams)
    >>> overrides
    {'checkpointer': 'null', 'data_folder': 'placeholder'}
    """
    import re

    path = Path(hparams_file)
    if not path.is_file():
        return {}
    keys = load_yaml_tolerant(path)
    overrides = {key: "null" for key in ("checkpointer", "apc_checkpointer") if key in keys}
    try:
        text = expand_hparams(path)
    except (ValueError, ruamel_errors()):  # not YAML: loading the file reports it
        text = path.read_text(encoding="utf-8", errors="replace")
    overrides.update({key: "placeholder" for key in re.findall(r"^(\w+):[ \t]*!PLACEHOLDER", text, flags=re.M)})
    return overrides


def ruamel_errors():
    """The exception class of ruamel.yaml's parse errors."""
    return ruamel.yaml.YAMLError
