"""What a recipe run takes on its command line: SpeechBrain's own options (:data:`SPEECHBRAIN_OPTIONS`) and the
top-level keys of its hparams file. A grid checks every setting it passes its runs against them
(:func:`setting_problem`, :func:`refused_settings`) before anything is prepared or launched, so that a misspelt
key is one line naming where it is set (:mod:`surprisal_cc.experiments.grid_spec` expands the runs).
"""
from __future__ import annotations

import difflib
from typing import Any, Collection, Dict, List, Optional

__all__ = ["SPEECHBRAIN_FLAGS", "SPEECHBRAIN_OPTIONS", "PASSED_KEYS", "setting_problem", "refused_settings"]

# The options of SpeechBrain's command line (speechbrain.utils.run_opts.RunOptions), which a recipe parses
# (surprisal_cc.training.command_line.parse_arguments) before it passes the other --key=value options to its hparams
# file as overrides: a grid key that names one is a run option. The flags take no value.
SPEECHBRAIN_FLAGS = frozenset({
    "auto_mix_prec", "bfloat16_mix_prec", "compile", "compile_using_dynamic_shape_tracing", "compile_using_fullgraph",
    "data_parallel_backend", "debug", "debug_persistently", "find_unused_parameters", "jit", "noprogressbar",
    "profile_training", "remove_vector_weight_decay", "skip_nonfinite_grads", "test_only", "tqdm_colored_bar"})
SPEECHBRAIN_OPTIONS = SPEECHBRAIN_FLAGS | {
    "ckpt_interval_minutes", "ckpt_interval_steps", "compile_mode", "compile_module_keys", "debug_batches",
    "debug_epochs", "device", "distributed_backend", "eval_precision", "grad_accumulation_factor", "jit_module_keys",
    "log_config", "max_grad_norm", "nonfinite_patience", "optimizer_step_limit", "precision", "profile_steps",
    "profile_warmup"}


def setting_problem(key: str, value: Any, hparams_keys: Collection[str], hparams_file: str = "the hparams file"
                    ) -> Optional[str]:
    """Why a recipe run would refuse the setting ``key: value`` at launch, or None where it takes it.

    A run takes one of SpeechBrain's options (:data:`SPEECHBRAIN_OPTIONS`) or a top-level key of its hparams
    file (``hparams_keys``; hyperpyyaml refuses an override of any other key, and applies a mapping value
    to the key's mapping as it is). A key that begins an option's name is taken for that option (an
    abbreviation, to SpeechBrain's parser), even where the file has it; ``precision: auto`` is an override
    of the file's ``precision`` (SpeechBrain's option takes fp32, fp16 or bf16).

    Example
    -------
    >>> keys = {"lr", "controller", "seed"}
    >>> [setting_problem(k, v, keys) for k, v in (("lr", 0.1), ("device", "cuda:0"), ("test_only", True))]
    [None, None, None]
    >>> setting_problem("contoller", "random", keys, "h.yaml")
    'contoller is not a key of h.yaml nor a SpeechBrain option (did you mean controller?)'
    >>> setting_problem("dev", "cpu", keys)
    "dev: SpeechBrain's command line takes --dev for its option --device: write the option's full name"
    >>> setting_problem("precision", "auto", keys, "h.yaml")
    'precision: auto is an override of the key precision, which h.yaml lacks'
    """
    key = str(key)
    if key == "precision" and str(value).lower() == "auto":
        return None if key in hparams_keys else f"precision: auto is an override of the key precision, which " \
                                                f"{hparams_file} lacks"
    if key in SPEECHBRAIN_OPTIONS:
        return None
    taken_for = sorted(option for option in SPEECHBRAIN_OPTIONS if option.startswith(key))
    if taken_for:
        return (f"{key}: SpeechBrain's command line takes --{key} for its option{'s' if len(taken_for) > 1 else ''} "
                f"{' or '.join('--' + o for o in taken_for)}: write the option's full name")
    if key in hparams_keys:
        return None
    close = difflib.get_close_matches(key, sorted(set(hparams_keys) | SPEECHBRAIN_OPTIONS), n=1)
    return (f"{key} is not a key of {hparams_file} nor a SpeechBrain option"
            + (f" (did you mean {close[0]}?)" if close else ""))


# keys the grid passes to every run: its hparams file must have them
PASSED_KEYS = ("experiment_root", "seed", "output_folder")


def refused_settings(spec: Any, extra_settings: Dict[str, Any], hparams_keys: Collection[str]) -> List[str]:
    """One line for each setting of the grid that its recipe would refuse at launch (:func:`setting_problem`),
    naming where it is set: ``overrides``, ``group 'NAME' set`` or ``vary``, or ``command line``
    (``extra_settings``); and one for each key the grid passes to every run (:data:`PASSED_KEYS`) that the
    hparams file lacks.

    Example
    -------
    >>> from surprisal_cc.experiments.grid_spec import GridSpec
    >>> spec = GridSpec("r.py", "h.yaml", "exp", {"lr": 0.1}, [{"name": "g", "vary": {"contoller": ["random"]}}])
    >>> refused_settings(spec, {"device": "cpu"}, {"lr", "controller", "seed", "experiment_root", "output_folder"})
    ["group 'g' vary: contoller is not a key of h.yaml nor a SpeechBrain option (did you mean controller?)"]
    """
    places = [("overrides", spec.overrides, False)]
    places += [(f"group {group['name']!r} {part}", group.get(part) or {}, part == "vary")
               for group in spec.groups for part in ("set", "vary")]
    places.append(("command line", extra_settings, False))
    lines = []
    for where, settings, varied in places:
        for key, value in settings.items():
            values = value if varied and isinstance(value, (list, tuple)) else [value]
            problem = next(filter(None, (setting_problem(key, v, hparams_keys, spec.hparams) for v in values)), None)
            if problem:
                lines.append(f"{where}: {problem}")
    lines += [f"{key} is not a key of {spec.hparams}, and the grid passes it to every run"
              for key in PASSED_KEYS if key not in hparams_keys]
    return lines
