"""Whether two configurations of one run are the same training: what a resumed run
(:func:`~surprisal_cc.training.run_settings.create_experiment_directory`) and the grid's conflict check
compare between the ``hyperparams.yaml`` a run folder holds and the configuration a new command asks for.

Both are read as plain data (:func:`~surprisal_cc.config.parse_yaml_tolerant`: an object's arguments as a
:class:`~surprisal_cc.config.TaggedMapping`); :func:`changed_training_settings` names each setting that
differs, leaving out those a resumed run may change (:data:`RESUMABLE_KEYS`), and
:func:`argument_references` tells which arguments of the objects are written out in the hparams text.
"""
from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any, FrozenSet, List, Mapping, Optional, Tuple, Union

import yaml

from surprisal_cc.config import REFERENCE_TAGS, TaggedMapping, TolerantLoader, tag_of, yaml_tree

# Settings a resumed training run may change: where files are, how long it trains, and how it is
# validated and tested. Any other plain setting (a number, a name, a list of them) that differs from
# the one its checkpoints were trained with is refused: the run would mix two configurations.
RESUMABLE_KEYS = frozenset({
    "apc_export_path", "apc_output_folder", "beam_size", "cache_batch_size", "cache_folder", "checkpoints_to_keep",
    "ckpt_interval_minutes", "controller_at_test", "data_folder", "dev_subset", "download", "error_details_file",
    "experiment_root", "find_unused_parameters", "malloc_reuse", "num_workers", "number_of_epochs", "output_folder",
    "prepared_folder", "results_file", "save_folder", "selection_metric", "test_bias_shifts", "test_budget_split",
    "test_controller", "test_flops_fraction", "test_stochastic", "test_threads", "train_log", "use_feature_cache", "valid_search"})


#: Where a value sits in an hparams file: its top-level key, then argument names and list positions.
KeyPath = Tuple[Union[str, int], ...]


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
    >>> from surprisal_cc.config import parse_yaml_tolerant
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
    """The key paths of the values that hparams ``text`` (the whole configuration: :func:`~surprisal_cc.config.expand_hparams`),
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

    tree = yaml_tree(text)
    overrides = yaml_tree(overrides) if isinstance(overrides, str) else overrides
    if isinstance(tree, Mapping) and isinstance(overrides, Mapping):
        recursive_update(tree, overrides)
    found = set()

    def walk(node: Any, path: KeyPath) -> None:
        if tag_of(node) in REFERENCE_TAGS:
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
    """``text`` as YAML reads it (tags as plain data, :class:`~surprisal_cc.config.TolerantLoader`), or the text itself where it is
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
