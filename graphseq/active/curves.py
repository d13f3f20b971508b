"""Learning curves: accuracy on the evaluated nodes (``test``, or ``val``
with ``learner.evaluate = "val"``) against the number of labels, one line
per query strategy. With several seeds each line is the mean over seeds and
the band around it one standard deviation, so that a gap between two
strategies can be read against the seed-to-seed spread. A run whose
sections both record curves (metrics.json's ``SECTION.curves``) is drawn on one
set of axes, each line named by its section, so that the sections compare at a
glance.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from ..errors import GraphseqError
from ..io import check_file_place, check_output_file, check_run_folder, first_sentence, read_json, write_png

Curves = Dict[str, List[List[float]]]  # strategy -> [[num_labels, accuracy], ...]
PLOT_NAME = "learning_curves.png"
# The nodes the accuracy is measured on (curves.json and each seed's metrics
# name them; runs written before they did measured on the test nodes).
SPLIT_KEY = "evaluated_on"


def mean_curve(curves: Sequence[List[List[float]]]) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Mean and standard deviation over seeds at each number of labels:
    ``(num_labels, mean, std)``, when every seed has the same label counts.
    :obj:`None` when they differ (a skip at a person's prompt shifts one
    seed's counts by one; a seed stopped early has fewer): a mean over the
    counts they share would drop the others' points, and one over the i-th
    model of each seed would put points at label counts no seed had, so such
    seeds are drawn one by one (:func:`plot_learning_curves`)."""
    if not curves:
        raise ValueError("mean_curve needs the curve of at least one seed, got none")
    counts = [[int(n) for n, _ in c] for c in curves]
    if any(c != counts[0] for c in counts):
        return None
    values = np.array([[float(a) for _, a in c] for c in curves])
    return np.array(counts[0]), values.mean(axis=0), values.std(axis=0, ddof=1 if len(curves) > 1 else 0)


def final_accuracy(curves: Sequence[List[List[float]]]) -> tuple[float, float]:
    """Mean and standard deviation over seeds of each seed's last accuracy
    (its last model), whatever label count each seed stopped at."""
    last = np.array([float(c[-1][1]) for c in curves if c])
    if last.size == 0:
        raise ValueError("final_accuracy needs a seed with at least one point, got none")
    return float(last.mean()), float(last.std(ddof=1)) if last.size > 1 else 0.0


def plot_learning_curves(runs: Sequence[Curves], path: str | Path, title: str,
                         reference: Union[float, Mapping[str, float], None] = None, split: str = "test") -> Path:
    """Draws the curves of one or more seeds into a PNG at ``path``;
    ``reference`` (an accuracy, or several by name: one per section of a run
    whose sections both record curves) is drawn as a dashed line each,
    ``split`` names the nodes the accuracy was measured on. The file is
    written atomically, and a path that cannot be written is refused before
    anything is drawn.

    Seeds with the same label counts are drawn as their mean with a band of
    one standard deviation; seeds whose counts differ (skipped items) are
    drawn one by one, each point at its own label count. The legend's final
    accuracy is the mean (± std) of each seed's last point either way.
    Accuracies that are not a number leave a gap, and the legend counts them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = [{strategy: curve for strategy, curve in r.items() if curve} for r in runs]
    runs = [r for r in runs if r]  # A run stopped before its first model has no curve yet.
    if not runs:
        raise GraphseqError("no learning curves to plot")
    check_output_file(path, ".png")
    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=120)
    colours = plt.get_cmap("tab10")
    strategies = list(dict.fromkeys(strategy for r in runs for strategy in r))
    apart = 0  # strategies whose seeds are drawn one by one
    for i, strategy in enumerate(strategies):
        curves = [r[strategy] for r in runs if strategy in r]
        final, spread = final_accuracy(curves)
        label = f"{strategy} ({final:.3f}" + (f" ± {spread:.3f}" if len(curves) > 1 else "")
        missing = sum(not math.isfinite(float(a)) for c in curves for _, a in c)
        if missing:
            label += f"; {missing} not a number, not drawn"
        combined = mean_curve(curves)
        if combined is None:
            apart += 1
            for j, curve in enumerate(curves):
                points = np.array(curve, dtype=float)
                axes.plot(points[:, 0], points[:, 1], marker="o", markersize=2.5, color=colours(i % 10),
                          alpha=0.7, label=f"{label}; each seed, label counts differ)" if j == 0 else None)
            continue
        x, mean, std = combined
        axes.plot(x, mean, marker="o", markersize=2.5, color=colours(i % 10), label=label + ")")
        if len(curves) > 1:
            axes.fill_between(x, mean - std, mean + std, color=colours(i % 10), alpha=0.15)
    references = reference if isinstance(reference, Mapping) else \
        {"standard split": reference} if reference is not None else {}
    for k, (name, accuracy) in enumerate(references.items()):
        axes.axhline(accuracy, color="black", linestyle=("--", ":", "-.")[k % 3], linewidth=1,
                     label=f"{name} ({accuracy:.3f})")
    axes.set_xlabel("labelled items")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel(f"{split} accuracy")
    seeds = f"{len(runs)} seeds, mean ± std" if len(runs) > 1 else "1 seed"
    if apart:
        seeds = f"{len(runs)} seeds, " + ("each drawn" if apart == len(strategies) else
                                          "mean ± std where their label counts agree")
    axes.set_title(f"{title}: learning curves ({seeds})")
    axes.grid(True, alpha=0.3)
    axes.legend(title=f"strategy (final {split} accuracy)", fontsize=8, loc="best")
    figure.tight_layout()
    try:
        write_png(figure, path)
    finally:
        plt.close(figure)
    return Path(path)


def plot_run(run_dir: str | Path) -> Path:
    """Draws ``run_dir/learning_curves.png`` from the run's ``metrics.json``
    (every seed of that run: ``graphseq plot-curves DIR``). The folder of
    one seed of a run of several (``DIR/seed-N``) draws that seed's curves.
    Where several sections recorded curves, their lines share the axes, each
    strategy named ``SECTION: strategy``. A run stopped before its first model
    has no point to draw, and is refused in one line naming the file."""
    check_run_folder(run_dir, "give the --out folder of a run (or one of its seed-N folders)")
    metrics_path = Path(run_dir) / "metrics.json"
    check_file_place(metrics_path)
    if not metrics_path.is_file():
        raise GraphseqError(f"{run_dir} holds no metrics.json; is it the --out of a finished run?")
    metrics = read_json(metrics_path)
    try:  # Every point is read before anything is drawn.
        # A run's metrics list its seeds under "runs"; one seed's own (DIR/seed-N) hold its curves.
        one_seed = isinstance(metrics, dict) and "runs" not in metrics and bool(curve_sections(metrics))
        seeds = [metrics] if one_seed else metrics.get("runs", [])
        runs = [_seed_curves(r) for r in seeds]
        runs = [r for r in runs if any(r.values())]  # A seed stopped before its first model has no point.
        started = any(curve_sections(r) for r in seeds)
        splits = sorted({str(r.get(_named(section, SPLIT_KEY)) or r.get(SPLIT_KEY) or "test")
                         for r in seeds for section in curve_sections(r) if r[_named(section, "curves")]})
        sections = list(dict.fromkeys(section for r in seeds for section in curve_sections(r)))
        reference = _references(metrics if one_seed else metrics.get("mean", {}), sections)
    except (AttributeError, TypeError, ValueError) as error:
        raise GraphseqError(f"{metrics_path} is damaged ({first_sentence(error)}); "
                            f"it was left as it is") from None
    if not runs and started:
        raise GraphseqError(f"{metrics_path} holds no point of a learning curve: the run stopped before "
                            f"its first model")
    if not runs:
        raise GraphseqError(f"{metrics_path} holds no learning curves; was it an active-learning run?")
    title = str(metrics.get("pipeline") or (one_seed and _pipeline_of_seed(Path(run_dir))) or "active")
    if one_seed and "seed" in metrics:
        title += f", seed {metrics['seed']}"  # as the run drew it
    return plot_learning_curves(runs, Path(run_dir) / PLOT_NAME, title, reference, split="/".join(splits))


def curve_sections(metrics: Mapping[str, Any]) -> List[str]:
    """The sections whose learning curves one seed's ``metrics`` hold: ``[""]``
    for the ``curves`` of a run in which one section records them, else the
    section of each ``SECTION.curves``, as metrics.json names a metric that
    several sections record (:func:`graphseq.runner.run.section_metrics`)."""
    sections = [key[:-len(".curves")] for key in metrics if key.endswith(".curves")]
    return sections or ([""] if "curves" in metrics else [])


def _named(section: str, key: str) -> str:
    """The name metrics.json gives ``key`` of ``section`` ("" where one section records it)."""
    return f"{section}.{key}" if section else key


def _seed_curves(metrics: Mapping[str, Any]) -> Curves:
    """One seed's curves, every point read (a damaged one raises), each
    strategy named by its section where several sections recorded curves."""
    return {(f"{section}: {strategy}" if section else strategy): [[int(n), float(accuracy)] for n, accuracy in curve]
            for section in curve_sections(metrics) if metrics[_named(section, "curves")]
            for strategy, curve in metrics[_named(section, "curves")].items()}


def _references(metrics: Mapping[str, Any], sections: List[str]) -> Union[float, Dict[str, float], None]:
    """The standard split's accuracy among ``metrics``: one number for a run
    in which one section records curves, else each section's by name (a run
    whose sections record it under one name is one section's: it keeps that name)."""
    plain = metrics.get("standard_split_accuracy")
    if sections in ([], [""]):
        return None if plain is None else float(plain)
    named = {f"standard split, {section}": float(metrics[_named(section, "standard_split_accuracy")])
             for section in sections if _named(section, "standard_split_accuracy") in metrics}
    return {**({} if plain is None else {"standard split": float(plain)}), **named}


def _pipeline_of_seed(seed_dir: Path) -> Optional[str]:
    """The pipeline a seed's folder belongs to, from its run's ``metrics.json``
    (one seed's own metrics do not name it); None where that cannot be read."""
    try:
        name = read_json(seed_dir.parent / "metrics.json").get("pipeline")
    except (GraphseqError, AttributeError):
        return None
    return None if name is None else str(name)
