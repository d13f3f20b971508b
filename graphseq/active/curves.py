"""Learning curves: test accuracy against the number of labels, one line
per query strategy. With several seeds each line is the mean over seeds and
the band around it one standard deviation, so that a gap between two
strategies can be read against the seed-to-seed spread.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..errors import GraphseqError
from ..io import check_file_place, check_output_file, first_sentence, read_json, write_png

Curves = Dict[str, List[List[float]]]  # strategy -> [[num_labels, accuracy], ...]
PLOT_NAME = "learning_curves.png"


def mean_curve(curves: Sequence[List[List[float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and standard deviation over seeds at every number of labels that
    every seed reached: ``(num_labels, mean, std)``, empty if they share none."""
    if not curves:
        raise ValueError("mean_curve needs the curve of at least one seed, got none")
    shared = sorted(set.intersection(*(set(int(n) for n, _ in c) for c in curves)))
    values = np.array([[dict((int(n), a) for n, a in c)[x] for x in shared] for c in curves])
    return np.array(shared), values.mean(axis=0), values.std(axis=0, ddof=1 if len(curves) > 1 else 0)


def plot_learning_curves(runs: Sequence[Curves], path: str | Path, title: str,
                         reference: Optional[float] = None) -> Path:
    """Draws the curves of one or more seeds into a PNG at ``path``;
    ``reference`` (an accuracy) is drawn as a dashed line. The file is
    written atomically, and a path that cannot be written is refused before
    anything is drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [{strategy: curve for strategy, curve in r.items() if curve} for r in runs]
    runs = [r for r in runs if r]  # A run stopped before its first model has no curve yet.
    if not runs:
        raise GraphseqError("no learning curves to plot")
    check_output_file(path, ".png")
    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=120)
    colours = plt.get_cmap("tab10")
    strategies = list(dict.fromkeys(strategy for r in runs for strategy in r))
    for i, strategy in enumerate(strategies):
        curves = [r[strategy] for r in runs if strategy in r]
        x, mean, std = mean_curve(curves)
        if x.size == 0:
            # Seeds with skipped items may share no label count: each seed's own curve, no mean.
            for j, curve in enumerate(curves):
                points = np.array(curve, dtype=float)
                axes.plot(points[:, 0], points[:, 1], marker="o", markersize=2.5, color=colours(i % 10),
                          alpha=0.6, label=f"{strategy} (seeds share no label count)" if j == 0 else None)
            continue
        label = f"{strategy} ({mean[-1]:.3f}" + (f" ± {std[-1]:.3f})" if len(curves) > 1 else ")")
        axes.plot(x, mean, marker="o", markersize=2.5, color=colours(i % 10), label=label)
        if len(curves) > 1:
            axes.fill_between(x, mean - std, mean + std, color=colours(i % 10), alpha=0.15)
    if reference is not None:
        axes.axhline(reference, color="black", linestyle="--", linewidth=1,
                     label=f"standard split ({reference:.3f})")
    axes.set_xlabel("labelled items")
    axes.set_ylabel("test accuracy")
    seeds = f"{len(runs)} seeds, mean ± std" if len(runs) > 1 else "1 seed"
    axes.set_title(f"{title}: learning curves ({seeds})")
    axes.grid(True, alpha=0.3)
    axes.legend(title="strategy (final accuracy)", fontsize=8, loc="lower right")
    figure.tight_layout()
    try:
        write_png(figure, path)
    finally:
        plt.close(figure)
    return Path(path)


def plot_run(run_dir: str | Path) -> Path:
    """Draws ``run_dir/learning_curves.png`` from the run's ``metrics.json``
    (every seed of that run: ``graphseq plot-curves DIR``). The folder of
    one seed of a run of several (``DIR/seed-N``) draws that seed's curves."""
    metrics_path = Path(run_dir) / "metrics.json"
    check_file_place(metrics_path)
    if not metrics_path.is_file():
        raise GraphseqError(f"{run_dir} holds no metrics.json; is it the --out of a finished run?")
    metrics = read_json(metrics_path)
    try:  # Every point is read before anything is drawn.
        # A run's metrics list its seeds under "runs"; one seed's own (DIR/seed-N) hold its curves.
        one_seed = isinstance(metrics, dict) and "runs" not in metrics and "curves" in metrics
        seeds = [metrics] if one_seed else metrics.get("runs", [])
        runs = [{strategy: [[int(n), float(accuracy)] for n, accuracy in curve]
                 for strategy, curve in r["curves"].items()}
                for r in seeds if r.get("curves")]
        reference = (metrics if one_seed else metrics.get("mean", {})).get("standard_split_accuracy")
        reference = None if reference is None else float(reference)
    except (AttributeError, TypeError, ValueError) as error:
        raise GraphseqError(f"{metrics_path} is damaged ({first_sentence(error)}); "
                            f"it was left as it is") from None
    if not runs:
        raise GraphseqError(f"{metrics_path} holds no learning curves; was it an active-learning run?")
    title = str(metrics.get("pipeline") or (one_seed and _pipeline_of_seed(Path(run_dir))) or "active")
    if one_seed and "seed" in metrics:
        title += f", seed {metrics['seed']}"  # as the run drew it
    return plot_learning_curves(runs, Path(run_dir) / PLOT_NAME, title, reference)


def _pipeline_of_seed(seed_dir: Path) -> Optional[str]:
    """The pipeline a seed's folder belongs to, from its run's ``metrics.json``
    (one seed's own metrics do not name it); None where that cannot be read."""
    try:
        name = read_json(seed_dir.parent / "metrics.json").get("pipeline")
    except (GraphseqError, AttributeError):
        return None
    return None if name is None else str(name)
