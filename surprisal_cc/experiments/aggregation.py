"""Results rows over seeds: one row per configuration (:func:`aggregate`: PER mean and sample std,
FLOPs, routing, the development split), configurations pooled over keys that no longer tell them apart
(:func:`pool_configurations`), the seed-paired difference of two configurations with its 95 % interval
(:func:`paired_difference`), the Pareto front in PER and FLOPs, and the rows of the paper's setup
(:func:`select_rows`, :func:`sort_rows`, :func:`setup_groups`). The tables (:mod:`surprisal_cc.experiments.report`)
and figures (:mod:`surprisal_cc.experiments.plots`) are made of these rows.

Example
-------
>>> rows = [{"controller": "surprisal", "seed": s, "PER": per, "flops_per_frame": 6.9e6}
...         for s, per in ((1, 29.2), (2, 29.4), (3, 29.6))]
>>> row = aggregate(rows)[0]
>>> row["model"], row["n_seeds"], round(row["PER"], 2), round(row["PER_std"], 2)
('Surprisal-based controller', 3, 29.4, 0.2)
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from surprisal_cc.training.run_folder import BUILT_IN_CONTROLLERS, BUILT_IN_ENCODERS, Row, as_float
from surprisal_cc.experiments.run_labels import CONFIG_KEYS, POOLABLE_KEYS, config_of, model_name, setup_notes

__all__ = ["CONTROLLER_ORDER", "SORT_ORDER", "BASE_SELECTION", "mean_std", "aggregate", "ensure_aggregated",
           "pool_configurations", "pareto_front", "paired_difference", "interpolate_per", "matched_flops_difference",
           "select_rows", "sort_rows", "setup_of", "setup_groups", "common_notes", "without_notes"]


# tables list the built-in controllers and encoders in this order (the paper's Table 2's), new ones after them
CONTROLLER_ORDER = BUILT_IN_CONTROLLERS


SORT_ORDER: Dict[str, Sequence[Any]] = {
    "encoder": BUILT_IN_ENCODERS, "architecture": ("paper", "model1", "model2", "model3"),
    "controller": CONTROLLER_ORDER, "input_features": ("fbank", "apc"),
    "learned_estimator": ("both_networks", "routed"),
    **{flag: (False, True) for flag in ("controller_at_train", "controller_at_test", "train_stochastic",
                                        "test_stochastic")}}


def _metric(row: Row) -> Optional[float]:
    """The error rate of a row: PER, else TER."""
    return as_float(row.get("PER", row.get("TER")))


def mean_std(values: Iterable[Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
    """Mean and sample standard deviation (ddof=1); the deviation is None for fewer than 2 values."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None, None
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))


def aggregate(rows: Sequence[Row], by: Sequence[str] = CONFIG_KEYS) -> List[Row]:
    """One row per configuration (runs that differ only by seed), sorted by ``by`` (SORT_ORDER).

    Keys: the ``by`` keys, ``model``, ``n_seeds``, ``seeds``, ``PER``/``PER_std`` (mean and sample
    std, ddof=1, over seeds; std None for one seed), ``PER_by_seed`` (seed -> PER), ``flops_by_seed``, ``flops_per_frame`` (mean MACs), ``flops_M``, ``p_big_mean``, ``big_fraction``,
    ``mean_steps``, ``test_loss``/``test_loss_std``, ``train_loss``/``train_loss_std``, ``epochs``,
    ``run_dirs``. A seed found twice in one configuration counts once (the newest file).

    Arguments
    ---------
    rows : sequence of dict
        Results rows (:func:`~surprisal_cc.training.run_folder.collect_results`).
    by : sequence of str
        Configuration keys that define a configuration.

    Returns
    -------
    list of dict
        Aggregated rows.

    Example
    -------
    >>> rows = [{"controller": "surprisal", "seed": 1, "PER": 20.0, "flops_per_frame": 3e6},
    ...         {"controller": "surprisal", "seed": 2, "PER": 22.0, "flops_per_frame": 3e6},
    ...         {"controller": "big_only", "seed": 1, "PER": 19.0, "flops_per_frame": 6e6}]
    >>> agg = aggregate(rows)
    >>> [(r["model"], r["n_seeds"], r["PER"], r["flops_M"]) for r in agg]
    [('Surprisal-based controller', 2, 21.0, 3.0), ('Big network only', 1, 19.0, 6.0)]
    >>> round(agg[0]["PER_std"], 3), agg[1]["PER_std"]  # sample std (ddof=1); none for one seed
    (1.414, None)
    """
    groups: Dict[Tuple, Dict[Any, Row]] = {}
    for row in sorted(rows, key=lambda r: (str(r.get("date", "")), r.get("path", ""))):
        config = config_of(row)
        key = tuple(config.get(k, row.get(k)) for k in by)
        groups.setdefault(key, {})[row.get("seed", row.get("path"))] = {**row, **config}
    out = []
    for key, by_seed in groups.items():
        runs = list(by_seed.values())
        config = dict(zip(by, key))
        named = {**config_of(runs[0]), **config}
        agg: Row = {**config, "model": model_name(named), "notes": setup_notes(named), "n_seeds": len(runs),
                    "seeds": sorted((r.get("seed") for r in runs), key=str)}
        agg["PER_by_seed"] = {seed: per for seed, per in ((s, _metric(r)) for s, r in by_seed.items())
                              if per is not None}
        agg["PER"], agg["PER_std"] = mean_std(agg["PER_by_seed"].values())
        agg["flops_by_seed"] = {seed: as_float(r.get("flops_per_frame")) for seed, r in by_seed.items()
                                if r.get("flops_per_frame") is not None}
        for name in ("test_loss", "train_loss"):
            agg[name], agg[f"{name}_std"] = mean_std(r.get(name) for r in runs)
        # the development split decoded with the test set (results.json "dev": mfa-dev)
        dev = [r["dev"]["PER"] for r in runs if isinstance(r.get("dev"), dict) and r["dev"].get("PER") is not None]
        agg["dev_PER"], agg["dev_PER_std"] = mean_std(dev)
        agg["dev_n"] = len(dev)  # runs tested before the development split was staged have none
        for name in ("flops_per_frame", "p_big_mean", "big_fraction", "mean_steps"):
            agg[name] = mean_std(r.get(name) for r in runs)[0]
        agg["flops_M"] = agg["flops_per_frame"] / 1e6 if agg["flops_per_frame"] is not None else None
        epochs = [r.get("number_of_epochs") or r.get("epochs") for r in runs]
        agg["epochs"] = max((e for e in epochs if e is not None), default=None)
        agg["run_dirs"] = sorted({r.get("run_dir", "") for r in runs})
        out.append(agg)
    return sort_rows(out, *by, order=SORT_ORDER)


def pareto_front(rows: Sequence[Row], x: str = "flops_per_frame", y: str = "PER") -> Set[int]:
    """Indices of rows no other row beats on both ``x`` and ``y`` (lower is better for both).

    Rows lacking ``x`` or ``y``, or where either is not a finite number, are never on the front.

    Arguments
    ---------
    rows : sequence of dict
        The rows.
    x : str
        Cost key.
    y : str
        Error key.

    Returns
    -------
    set of int
        Indices of the Pareto-optimal rows.

    Example
    -------
    >>> rows = [{"flops_per_frame": 1, "PER": 30}, {"flops_per_frame": 2, "PER": 20},
    ...         {"flops_per_frame": 3, "PER": 25}, {"flops_per_frame": 4}, {"flops_per_frame": 0.5, "PER": float("nan")}]
    >>> sorted(pareto_front(rows))
    [0, 1]
    """
    values = {i: (as_float(r.get(x)), as_float(r.get(y))) for i, r in enumerate(rows)}
    points = {i: (xi, yi) for i, (xi, yi) in values.items()
              if xi is not None and yi is not None and math.isfinite(xi) and math.isfinite(yi)}
    return {i for i, (xi, yi) in points.items()
            if not any(xj <= xi and yj <= yi and (xj, yj) != (xi, yi) for xj, yj in points.values())}


def pool_configurations(rows: Sequence[Row], keys: Sequence[str]) -> List[Row]:
    """``rows`` with the configuration keys in ``keys`` no longer telling configurations apart: runs
    that agree on every other key become one configuration, whose value of each pooled key joins the
    values of its runs with ``+`` (so a table still shows what was pooled).

    For example, ``keys=["apc"]`` pools seeds trained with an APC file and with its fp16 copy. Values
    that one configuration's runs mix are one value from then on, in every configuration: a model
    trained only with the fp16 copy reads the same joined value as a reference pooled over both, so the
    two still share a training profile and pair by seed (values that no configuration mixes stay
    apart). Runs that do not record a pooled key (older results files) stay apart, and two runs of one
    seed with different values are a :class:`ValueError` (one would replace the other in the mean).

    Arguments
    ---------
    rows : sequence of dict
        Results rows (:func:`~surprisal_cc.training.run_folder.collect_results`).
    keys : sequence of str
        Configuration keys to pool over, of
        :data:`~surprisal_cc.experiments.run_labels.POOLABLE_KEYS` (keys whose values are names).

    Returns
    -------
    list of dict
        The rows, copied, with the pooled keys' joined values (where the runs of a configuration hold
        several); ``unpooled`` holds a row's own values of those.

    Example
    -------
    >>> rows = [{"controller": "surprisal", "seed": 1, "PER": 20.0, "apc": "27d287a179a6"},
    ...         {"controller": "surprisal", "seed": 2, "PER": 22.0, "apc": "75da3c37ee63"}]
    >>> rows.append({"controller": "random", "seed": 1, "PER": 23.0, "apc": "75da3c37ee63"})
    >>> [(r["model"], r["n_seeds"]) for r in aggregate(pool_configurations(rows, ["apc"]))]
    [('Random controller [APC 27d287a1+75da3c37]', 1), ('Surprisal-based controller [APC 27d287a1+75da3c37]', 2)]
    """
    unknown = [k for k in keys if k not in POOLABLE_KEYS]
    if unknown:
        raise ValueError(f"cannot pool over {', '.join(unknown)}: a report pools over {', '.join(POOLABLE_KEYS)}")
    if not keys:
        return [dict(r) for r in rows]
    kept = [k for k in CONFIG_KEYS if k not in keys]
    groups: Dict[Tuple, List[Tuple[Row, Row]]] = {}  # what still tells configurations apart -> (row, its config)
    for row in rows:
        config = config_of(row)  # a run without a value of a pooled key stays apart from those with one
        key = tuple(str(config[k]) for k in kept) + tuple(config[k] is None for k in keys)
        groups.setdefault(key, []).append((row, config))
    names = {k: _joined_names([{str(config[k]) for _, config in group if config[k] is not None}
                               for group in groups.values()]) for k in keys}
    pooled = []
    for group in groups.values():
        config = group[0][1]  # the values of a group are one component: its first run's names them all
        joined = {k: names[k][str(config[k])] for k in keys
                  if config[k] is not None and str(config[k]) in names[k]}  # a value no one mixed: kept
        if joined:
            _check_seeds_apart(group, joined)
        pooled += [{**row, **joined, "unpooled": {k: row.get(k) for k in joined}} for row, _ in group]
    return pooled


def _joined_names(value_sets: Sequence[Set[str]]) -> Dict[str, str]:
    """value -> the ``+``-joined name of every value it is mixed with, directly or through other values, in
    one of ``value_sets`` (the values of one pooled key that each configuration's runs hold); values mixed
    with none are left out.

    Example
    -------
    >>> _joined_names([{"a", "b"}, {"b"}, {"c"}, {"b", "d"}])
    {'a': 'a+b+d', 'b': 'a+b+d', 'd': 'a+b+d'}
    """
    component: Dict[str, Set[str]] = {}
    for values in value_sets:
        merged = set(values).union(*(component.get(v, set()) for v in values))
        for value in merged:
            component[value] = merged
    return {value: "+".join(sorted(members)) for value, members in sorted(component.items()) if len(members) > 1}


def _check_seeds_apart(group: Sequence[Tuple[Row, Row]], joined: Dict[str, str]) -> None:
    """:class:`ValueError` where two runs (``(row, config)`` pairs) of one pooled configuration share a
    seed (one would replace the other in its mean)."""
    seen: Dict[Any, Tuple[Row, Row]] = {}
    for row, config in group:
        seed = row.get("seed")
        if seed in seen and any(seen[seed][1][k] != config[k] for k in joined):
            name = model_name({**config, **dict.fromkeys(joined)})  # without the values pooled
            raise ValueError(f"cannot pool over {', '.join(joined)}: seed {seed} of {name} "
                             f"was run with each of {' and '.join(sorted(joined.values()))} "
                             f"({seen[seed][0].get('path', '?')}, {row.get('path', '?')}); pool runs of distinct seeds")
        seen.setdefault(seed, (row, config))


def ensure_aggregated(rows: Sequence[Row]) -> List[Row]:
    """``rows`` if they are all aggregated rows, else :func:`aggregate` of them."""
    return list(rows) if all("n_seeds" in r for r in rows) else aggregate(rows)


BASE_SELECTION: Row = {"encoder": "conditional", "architecture": "paper", "input_features": "apc",
                       "controller_at_train": True, "controller_at_test": True, "train_stochastic": True,
                       "test_stochastic": True, "test_bias_shift": 0.0,
                       "test_flops_fraction": (None,)}  # no test-time FLOPs budget


def select_rows(rows: Sequence[Row], dataset: Optional[str] = None, **criteria: Any) -> List[Row]:
    """Rows matching ``BASE_SELECTION`` (the paper's setup) updated with ``criteria``.

    A None criterion matches anything, a tuple/list/set criterion matches any of its values.

    Arguments
    ---------
    rows : sequence of dict
        Aggregated rows.
    dataset : str, optional
        Dataset of the rows; None: any.
    **criteria
        Key -> wanted value(s), overriding ``BASE_SELECTION``.

    Returns
    -------
    list of dict
        The matching rows, in their order.

    Example
    -------
    >>> agg = aggregate([{"controller": "surprisal", "seed": 1, "PER": 20.0},
    ...                  {"controller": "big_only", "seed": 1, "PER": 19.0},
    ...                  {"controller": "surprisal", "input_features": "fbank", "seed": 1, "PER": 22.0}])
    >>> [r["model"] for r in select_rows(agg, controller="surprisal")]
    ['Surprisal-based controller']
    >>> [r["model"] for r in select_rows(agg, controller="surprisal", input_features=None)]
    ['Surprisal-based controller [fbank features]', 'Surprisal-based controller']
    """
    wanted = {**BASE_SELECTION, **criteria, "dataset": dataset}
    def ok(row: Row) -> bool:
        for key, want in wanted.items():
            if want is None:
                continue
            if row.get(key) not in (want if isinstance(want, (tuple, list, set)) else (want,)):
                return False
        return True
    return [r for r in rows if ok(r)]


def sort_rows(rows: List[Row], *keys: str, order: Optional[Dict[str, Sequence[Any]]] = None) -> List[Row]:
    """Sort by ``keys``: in the given ``order`` of values where one is given, else numbers first."""
    order = order or {}
    def rank(key: str, value: Any) -> Tuple[int, Any]:
        if key in order:
            values = list(order[key])
            return (values.index(value), "") if value in values else (len(values), str(value))
        return (0, value) if isinstance(value, (int, float)) else (1, str(value))
    return sorted(rows, key=lambda row: tuple(rank(k, row.get(k)) for k in keys))


def paired_difference(a: Row, b: Row) -> Optional[Row]:
    """PER of ``a`` minus PER of ``b``, paired by seed, over the seeds both aggregated rows have.

    Returns None without a common seed, else ``delta_PER`` (mean, points), ``delta_PER_std``
    (sample std, ddof=1), ``ci95`` (half-width of the 95 % t interval of the mean), ``n_seeds``,
    ``seeds``, ``flops_change`` (FLOPs of ``a`` relative to ``b``, minus 1) and ``verdict``:
    ``within noise`` when the interval contains 0, else ``lower PER``/``higher PER``
    (``one seed`` when there is no spread to judge by).

    Example
    -------
    >>> a = {"PER_by_seed": {1: 33.5, 2: 33.0, 3: 34.1}, "flops_per_frame": 6.9e6}
    >>> b = {"PER_by_seed": {1: 32.6, 2: 33.2, 3: 33.0}, "flops_per_frame": 7.5e6}
    >>> d = paired_difference(a, b)
    >>> round(d["delta_PER"], 2), round(d["delta_PER_std"], 2), round(d["ci95"], 2), d["verdict"]
    (0.6, 0.7, 1.74, 'within noise')
    >>> round(d["flops_change"], 3)
    -0.08
    """
    pa, pb = a.get("PER_by_seed") or {}, b.get("PER_by_seed") or {}
    seeds = sorted(set(pa) & set(pb), key=str)
    if not seeds:
        return None
    fa, fb = a.get("flops_per_frame"), b.get("flops_per_frame")
    return {**_seed_statistics({seed: pa[seed] - pb[seed] for seed in seeds}),
            "flops_change": fa / fb - 1 if fa is not None and fb else None}


def _seed_statistics(deltas: Dict[Any, float]) -> Row:
    """Mean, sample std, 95 % t half-width and verdict of per-seed PER differences (see
    :func:`paired_difference`)."""
    seeds = sorted(deltas, key=str)
    mean, std = mean_std(deltas[seed] for seed in seeds)
    ci95 = None
    if std is not None:
        from scipy.stats import t

        ci95 = float(t.ppf(0.975, len(seeds) - 1)) * std / math.sqrt(len(seeds))
    if ci95 is None:
        verdict = "one seed"
    elif abs(mean) <= ci95:
        verdict = "within noise"
    else:
        verdict = "lower PER" if mean < 0 else "higher PER"
    return {"delta_PER": mean, "delta_PER_std": std, "ci95": ci95, "n_seeds": len(seeds), "seeds": seeds,
            "verdict": verdict}


def interpolate_per(points: Sequence[Tuple[float, float]], flops: float) -> Optional[float]:
    """PER at ``flops`` on the piecewise-linear curve through ``points`` ((FLOPs, PER) of one seed's
    operating points); None outside the points' FLOPs range (no extrapolation). Points at the same
    FLOPs are averaged.

    Example
    -------
    >>> interpolate_per([(6.0e6, 30.0), (7.0e6, 28.0)], 6.5e6)
    29.0
    >>> interpolate_per([(6.0e6, 30.0), (7.0e6, 28.0)], 7.5e6) is None
    True
    """
    merged: Dict[float, List[float]] = {}
    for x, y in points:
        merged.setdefault(float(x), []).append(float(y))
    curve = sorted((x, sum(ys) / len(ys)) for x, ys in merged.items())
    if not curve or not curve[0][0] <= flops <= curve[-1][0]:
        return None
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x0 <= flops <= x1:
            return y0 + (y1 - y0) * (flops - x0) / (x1 - x0)
    return curve[0][1]  # a single point, at exactly these FLOPs


def matched_flops_difference(a: Row, sweep: Sequence[Row]) -> Optional[Row]:
    """PER of ``a`` minus the PER of a reference model at ``a``'s FLOPs, paired by seed: for each seed of
    ``a``, the reference's PER is interpolated linearly along that seed's operating points in ``sweep``
    (aggregated rows of one trained configuration decoded at several bias shifts or FLOPs budgets),
    never extrapolated. Seeds whose FLOPs lie outside their sweep are left out (``seeds_outside``).

    Returns None where no seed can be matched, else :func:`paired_difference`'s keys (``flops_change``
    is 0: the FLOPs are matched) plus ``seeds_outside``.

    Example
    -------
    >>> act = {"PER_by_seed": {1: 30.0, 2: 30.4}, "flops_by_seed": {1: 6.5e6, 2: 6.6e6}}
    >>> sweep = [{"PER_by_seed": {1: 31.0, 2: 31.2}, "flops_by_seed": {1: 6.0e6, 2: 6.0e6}},
    ...          {"PER_by_seed": {1: 29.0, 2: 29.2}, "flops_by_seed": {1: 7.0e6, 2: 7.0e6}}]
    >>> d = matched_flops_difference(act, sweep)
    >>> round(d["delta_PER"], 2), d["n_seeds"], d["seeds_outside"]
    (0.2, 2, [])
    """
    deltas, outside = {}, []
    for seed, per in (a.get("PER_by_seed") or {}).items():
        flops = (a.get("flops_by_seed") or {}).get(seed)
        points = [(r["flops_by_seed"][seed], r["PER_by_seed"][seed]) for r in sweep
                  if seed in (r.get("PER_by_seed") or {}) and seed in (r.get("flops_by_seed") or {})]
        reference = interpolate_per(points, flops) if flops is not None else None
        if reference is None:
            outside.append(seed)
        else:
            deltas[seed] = per - reference
    if not deltas:
        return None
    return {**_seed_statistics(deltas), "flops_change": 0.0, "seeds_outside": sorted(outside, key=str)}


def setup_of(row: Row, swept: str) -> Tuple[Tuple[str, ...], Any]:
    """What sets a row's model apart, all but its ``swept`` key: its setup notes and epochs.

    Example
    -------
    >>> setup_of({"controller": "big_only", "precision": "fp32", "epochs": 30}, "test_bias_shift")
    (('fp32 training',), 30)
    """
    return tuple(setup_notes(row, omit=(swept,))), row.get("epochs")


def setup_groups(rows: Sequence[Row], swept: str) -> Dict[str, List[Row]]:
    """Rows grouped by setup (every setting but ``swept``), in order of first appearance.

    Each group is named by the notes (:func:`~surprisal_cc.experiments.run_labels.setup_notes`, epochs) that set it apart from the
    other groups: one line per model in a sweep's plot, labelled by what differs.

    Example
    -------
    >>> rows = [{"precision": p, "test_bias_shift": s, "epochs": 30} for p in ("fp32", None) for s in (0.0, 1.0)]
    >>> {name: [r["test_bias_shift"] for r in group] for name, group in setup_groups(rows, "test_bias_shift").items()}
    {'fp32 training': [0.0, 1.0], '': [0.0, 1.0]}
    """
    groups: Dict[Tuple, List[Row]] = {}
    for row in rows:
        groups.setdefault(setup_of(row, swept), []).append(row)
    def notes(setup: Tuple) -> List[str]:
        return [*setup[0], *([f"{setup[1]} epochs"] if setup[1] is not None else [])]
    common = set.intersection(*(set(notes(setup)) for setup in groups)) if groups else set()
    return {", ".join(n for n in notes(setup) if n not in common): group for setup, group in groups.items()}


def common_notes(rows: Sequence[Row]) -> List[str]:
    """The setup notes (a row's ``notes``, :func:`~surprisal_cc.experiments.run_labels.setup_notes`) that every row
    of two or more shares, which tables and plots say once instead of in every label
    (:func:`without_notes`).

    Example
    -------
    >>> rows = [{"model": "a [fp32 training, masked inputs]", "notes": ["fp32 training", "masked inputs"]},
    ...         {"model": "b [fp32 training]", "notes": ["fp32 training"]}]
    >>> common = common_notes(rows)
    >>> common, [without_notes(r, common)["model"] for r in rows]
    (['fp32 training'], ['a [masked inputs]', 'b'])
    """
    if len(rows) < 2 or any(not isinstance(r.get("notes"), list) for r in rows):
        return []
    return [note for note in rows[0]["notes"] if all(note in r["notes"] for r in rows[1:])]


def without_notes(row: Row, common: Sequence[str]) -> Row:
    """``row`` with the ``common`` notes taken out of the bracket that ends its label (``model``)."""
    notes = row.get("notes") or []
    full = f" [{', '.join(notes)}]"
    if not common or not notes or not str(row.get("model", "")).endswith(full):
        return row
    kept = [note for note in notes if note not in common]
    return {**row, "model": row["model"][:-len(full)] + (f" [{', '.join(kept)}]" if kept else "")}
