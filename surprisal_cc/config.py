"""Hparams files that start from another one: a root-level ``!include``.

The corpus files share most of their settings, so each starts from a common file::

    --- !include:../common/conditional_ctc.yaml
    dataset: TIMIT
    num_outputs: 40

reads as "that file, with these top-level keys replaced (or added)". hyperpyyaml resolves
``!include:`` only below the root, so :func:`expand_hparams` writes the whole configuration out
as one file first; ``--key=value`` overrides then apply to it as usual (and must name one of its
keys). The package has two readers of hparams files, both through it: :func:`load_hparams_file`
builds one (hyperpyyaml: the recipes' hparams, the model files), :func:`load_yaml_tolerant` reads one
(or a saved run's ``hyperparams.yaml``) as plain data without building anything, and
:func:`changed_training_settings` tells which settings of a saved run a new command would change.
Building one may create folders (a checkpointer's ``save/``): :func:`new_empty_folders_removed` takes
back those that a rejected configuration leaves empty (:func:`configured_paths` names the candidates).
"""
from __future__ import annotations

import contextlib
import copy
import filecmp
import functools
import io
import os
import re
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

import ruamel.yaml
import yaml

INCLUDE = "!include:"
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
    tag = getattr(getattr(_load(text), "tag", None), "value", None)
    return tag if isinstance(tag, str) else None


def expand_hparams(path: PathLike, _depth: int = 0) -> str:
    """The text of an hparams file with its root-level ``!include`` written out (recursively).

    The included file comes first, in its own order (so objects are built, and random numbers
    drawn, in the same order); each top-level key of ``path`` replaces the included value at its
    place, and new keys follow, except that a new key whose value holds a reference moves just
    before the first key that refers to it: hyperpyyaml cannot resolve a reference that is a whole
    value (``!ref <file>``, or ``!ref <source[train]>`` into a mapping) to a value further down that is
    itself a ``!ref`` (or ``!copy``). References inside text (``!ref <file>/save``), and references to a
    later mapping, list or object that holds references, resolve wherever they stand. A file without
    a root-level include is returned as it is.

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
    return _merged(expand_hparams(base_file, _depth + 1), text)


@functools.lru_cache(maxsize=64)
def _merged(base_text: str, text: str) -> str:
    """``base_text`` with each top-level key of ``text`` replacing or added (:func:`expand_hparams`; kept for
    the next call with the same texts)."""
    base = _load(base_text)
    added = []
    for key, value in _load(text).items():
        if key not in base:
            added.append(key)
        base[key] = value
    for key in added:
        if "!ref" in _dump({key: base[key]}):  # a plain value resolves wherever it stands
            _move_before_first_referrer(base, key)
    out = io.StringIO()
    ruamel.yaml.YAML().dump(base, out)
    return out.getvalue()


def _move_before_first_referrer(mapping, key: str) -> None:
    """Move ``key`` of the ruamel ``mapping`` just before the first key whose value refers to it."""
    keys = list(mapping)
    position = keys.index(key)
    pattern = re.compile(r"<" + re.escape(str(key)) + r"(?:[.\[>])")
    for index, other in enumerate(keys[:position]):
        if pattern.search(_dump({other: mapping[other]})):
            value = mapping.pop(key)
            mapping.insert(index, key, value)
            return


def _dump(data) -> str:
    out = io.StringIO()
    ruamel.yaml.YAML().dump(data, out)
    return out.getvalue()


def _load(text: str):
    return ruamel.yaml.YAML().load(text)


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
    from hyperpyyaml import resolve_references

    overrides = copy.deepcopy(overrides) if isinstance(overrides, Mapping) else overrides
    try:
        text = resolve_references(io.StringIO(expand_hparams(path)), overrides or None).getvalue()
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
    plain ``dict`` that remembers its ``tag``: :func:`changed_training_settings` compares the arguments
    written out in such objects (given :func:`argument_references`) and the settings they are built from,
    not the objects' classes."""

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


# Settings a resumed training run may change: where files are, how long it trains, and how it is
# validated and tested. Any other plain setting (a number, a name, a list of them) that differs from
# the one its checkpoints were trained with is refused: the run would mix two configurations.
RESUMABLE_KEYS = frozenset({
    "apc_export_path", "apc_output_folder", "beam_size", "cache_batch_size", "cache_folder", "checkpoints_to_keep",
    "ckpt_interval_minutes", "controller_at_test", "data_folder", "dev_subset", "download", "error_details_file",
    "experiment_root", "find_unused_parameters", "malloc_reuse", "num_workers", "number_of_epochs", "output_folder",
    "prepared_folder", "results_file", "save_folder", "selection_metric", "test_bias_shifts", "test_budget_split",
    "test_flops_fraction", "test_stochastic", "test_threads", "train_log", "use_feature_cache", "valid_search"})


#: Where a value sits in an hparams file: its top-level key, then argument names and list positions.
KeyPath = Tuple[Union[str, int], ...]

#: hyperpyyaml's tags of a value taken from elsewhere in the file (resolved in a saved ``hyperparams.yaml``).
REFERENCE_TAGS = ("!ref", "!copy")


def changed_training_settings(stored: Mapping[str, Any], requested: Mapping[str, Any],
                              references: Optional[FrozenSet[KeyPath]] = None) -> List[str]:
    """``"key: trained with X, requested Y"`` for each top-level setting (not in :data:`RESUMABLE_KEYS`)
    that both configurations hold and that differs (:func:`_same_setting`: numbers by value, however
    written; a file by its content where both names lead to one; mappings and lists, such as ``labels``,
    ``mfa_labels`` or ``prepare_options``, entry by entry, leaving out entries named in
    :data:`RESUMABLE_KEYS`). The arguments of objects (``!new:``, ``!apply:``, ``!name:``) are compared
    where ``references`` (:func:`argument_references` of the requested configuration's hparams text)
    tells the ones written out from references: each argument both objects hold, down to entries of its
    mappings and lists, named by its key path (``"apc_model.hidden_size: trained with 512, requested
    256"``); a reference is compared where it leads (its top-level key), an argument named in
    :data:`RESUMABLE_KEYS` not at all. Without ``references`` they are not compared.

    Example
    -------
    >>> changed_training_settings({"lr": 0.001, "number_of_epochs": 30, "seed": 1, "learned_penalty": "1e-05"},
    ...                           {"lr": 0.002, "number_of_epochs": 40, "seed": 1, "learned_penalty": 1e-05})
    ['lr: trained with 0.001, requested 0.002']
    >>> changed_training_settings({"labels": {"train": "mfa", "test": "mfa"}},
    ...                           {"labels": "{train: lexicon, test: mfa}"})
    ["labels: trained with {'train': 'mfa', 'test': 'mfa'}, requested '{train: lexicon, test: mfa}'"]
    >>> text = "epochs: 4\\nmodel: !new:torch.nn.GRU\\n  hidden_size: {}\\n  num_layers: !ref <epochs>\\n"
    >>> trained, now = (parse_yaml_tolerant(text.format(size)) for size in (512, 256))
    >>> changed_training_settings(trained, now, argument_references(text.format(256)))
    ['model.hidden_size: trained with 512, requested 256']
    """
    changed = []
    for key, value in requested.items():
        if key not in stored or key in RESUMABLE_KEYS or str(key).startswith("__"):
            continue
        if references is not None and isinstance(stored[key], TaggedMapping) and isinstance(value, TaggedMapping):
            changed += _changed_arguments(stored[key], value, (key,), references)
        elif not _same_setting(stored[key], value):
            changed.append(f"{key}: trained with {stored[key]!r}, requested {value!r}")
    return changed


def argument_references(text: str, overrides: Union[str, Mapping[str, Any], None] = None) -> FrozenSet[KeyPath]:
    """The key paths of the values that hparams ``text`` (the whole configuration: :func:`expand_hparams`),
    with ``overrides`` applied as hyperpyyaml applies them (mappings entry by entry), gives as references
    (``!ref``, ``!copy``). A saved ``hyperparams.yaml`` holds them resolved, so only the text tells an
    object's argument written out (``hidden_size: 512``) from one that repeats another setting
    (``limit: !ref <number_of_epochs>``): :func:`changed_training_settings` compares the first kind.

    Example
    -------
    >>> text = "lr: 0.1\\nopt: !name:torch.optim.Adam\\n  lr: !ref <lr>\\n  eps: 1.0e-8\\n  betas: [!ref <lr>, 0.9]\\n"
    >>> sorted(argument_references(text)), sorted(argument_references(text, "opt: {lr: 0.5}"))
    ([('opt', 'betas', 0), ('opt', 'lr')], [('opt', 'betas', 0)])
    """
    from hyperpyyaml.core import recursive_update

    tree = _load(text)
    overrides = _load(overrides) if isinstance(overrides, str) else overrides
    if isinstance(tree, Mapping) and isinstance(overrides, Mapping):
        recursive_update(tree, overrides)
    found = set()

    def walk(node: Any, path: KeyPath) -> None:
        if getattr(getattr(node, "tag", None), "value", None) in REFERENCE_TAGS:
            found.add(path)
        elif isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, path + (key,))
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                walk(value, path + (i,))

    walk(tree, ())
    return frozenset(found)


def _changed_arguments(stored: Any, requested: Any, path: KeyPath, references: FrozenSet[KeyPath]) -> List[str]:
    """:func:`changed_training_settings`' lines for an object's arguments at ``path`` (or a value within
    them): mappings entry by entry (the entries both hold, not named in :data:`RESUMABLE_KEYS`), lists of one
    length element by element, anything else by :func:`_same_setting`; values at ``references`` left out.

    Example
    -------
    >>> _changed_arguments({"size": 512, "steps": [2, 2], "limit": 4}, {"size": "512", "steps": [2, 3], "limit": 8},
    ...                    ("model",), frozenset({("model", "limit")}))
    ['model.steps.1: trained with 2, requested 3']
    """
    if path in references:
        return []
    if isinstance(stored, Mapping) and isinstance(requested, Mapping):
        return [line for key in requested if key in stored and key not in RESUMABLE_KEYS
                for line in _changed_arguments(stored[key], requested[key], path + (key,), references)]
    if isinstance(stored, (list, tuple)) and isinstance(requested, (list, tuple)) and len(stored) == len(requested):
        return [line for i, (old, new) in enumerate(zip(stored, requested))
                for line in _changed_arguments(old, new, path + (i,), references)]
    if _same_setting(stored, requested):
        return []
    return [f"{'.'.join(map(str, path))}: trained with {stored!r}, requested {requested!r}"]


def _same_setting(stored: Any, requested: Any) -> bool:
    """Whether a setting a run was trained with and one requested are the same, as
    :func:`changed_training_settings` compares them: YAML text of a mapping or list (``--labels="{train:
    mfa}"``) as what it reads as; mappings entry by entry, an entry missing on one side as null, entries
    named in :data:`RESUMABLE_KEYS` (``prepare_options``' ``data_folder``) left out, and a mapping the same
    as null where every entry is null, or as one value where every entry is that value (``labels: mfa``
    for every split); lists element-wise; a tagged mapping (an object's arguments, :class:`TaggedMapping`)
    always the same (:func:`_changed_arguments` compares those); anything else as :func:`_as_number` reads
    it, or a file by its content where both name one.

    Example
    -------
    >>> _same_setting({"train": "a.csv", "test": None, "data_folder": "x"}, {"train": "a.csv", "data_folder": "y"})
    True
    >>> _same_setting([{"lr": 1}], [{"lr": "1.0"}]), _same_setting({"train": "mfa"}, {"train": "lexicon"})
    (True, False)
    >>> _same_setting({"train": "mfa", "test": "mfa"}, "mfa"), _same_setting({"train": None}, None)
    (True, True)
    """
    if isinstance(stored, TaggedMapping) or isinstance(requested, TaggedMapping):
        return True
    if isinstance(stored, str) != isinstance(requested, str) and isinstance(stored, (str, Mapping, list, tuple)) \
            and isinstance(requested, (str, Mapping, list, tuple)):
        stored, requested = (_yaml_value(v) if isinstance(v, str) else v for v in (stored, requested))
    if isinstance(stored, Mapping) != isinstance(requested, Mapping):  # one value for every entry, or null for none
        mapping, value = (stored, requested) if isinstance(stored, Mapping) else (requested, stored)
        if not isinstance(value, (list, tuple)) and (mapping or value is None):
            return all(_same_setting(entry, value) for key, entry in mapping.items() if key not in RESUMABLE_KEYS)
    if isinstance(stored, Mapping) and isinstance(requested, Mapping):
        return all(_same_setting(stored.get(key), requested.get(key)) for key in {*stored, *requested}
                   if key not in RESUMABLE_KEYS)
    if isinstance(stored, (list, tuple)) and isinstance(requested, (list, tuple)):
        return len(stored) == len(requested) and all(map(_same_setting, stored, requested))
    if isinstance(stored, (Mapping, list, tuple)) or isinstance(requested, (Mapping, list, tuple)):
        return stored == requested
    return _as_number(stored) == _as_number(requested) or _same_file(stored, requested)


def _yaml_value(text: str) -> Any:
    """``text`` as YAML reads it (tags as plain data, :class:`TolerantLoader`), or the text itself where it is
    not YAML."""
    try:
        return yaml.load(text, Loader=TolerantLoader)
    except yaml.YAMLError:
        return text


def _same_file(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` name one file by two names (relative and absolute, another working directory):
    both files, with the same content."""
    return isinstance(a, str) and isinstance(b, str) and Path(a).is_file() and Path(b).is_file() \
        and filecmp.cmp(a, b, shallow=False)


def _as_number(value: Any) -> Any:
    """A setting as compared: numbers (and numbers written as text, as YAML 1.1 reads ``1e-05``) as
    floats, lists and tuples element-wise, anything else as it is.

    Example
    -------
    >>> _as_number("1e-05") == _as_number(1e-05), _as_number((0.9, 1)) == _as_number([0.9, 1.0])
    (True, True)
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, (list, tuple)):
        return [_as_number(v) for v in value]
    return value
