"""Learning-curve figures from a run's metrics.json: ``graphseq plot-curves``
draws them, and refuses a damaged file in one line without touching it."""
import json

import pytest

from graphseq import run
from graphseq.active.curves import PLOT_NAME, SPLIT_KEY
from graphseq.checks import finite
from graphseq.cli import main
from graphseq.stages import stage

METRICS = {"pipeline": "active-cora", "mean": {"standard_split_accuracy": 0.8},
           "runs": [{"curves": {"random": [[2, 0.3], [4, 0.5]], "entropy": [[2, 0.3], [4, 0.6]]}},
                    {"curves": {"random": [[2, 0.35], [4, 0.45]], "entropy": [[2, 0.3], [4, 0.7]]}}]}


def test_plot_curves_draws_every_seed_of_a_run(tmp_path, capsys):
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    assert main(["plot-curves", str(tmp_path)]) == 0
    assert (tmp_path / PLOT_NAME).read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out == f"{tmp_path / PLOT_NAME}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learning_curves.png", "metrics.json"]


def test_plot_curves_draws_the_folder_of_one_seed(tmp_path, capsys):
    """``--runs N`` keeps each seed's metrics (its curves at the top level) in OUT/seed-N."""
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    seed = tmp_path / "seed-1"
    seed.mkdir()
    (seed / "metrics.json").write_text(json.dumps({"seed": 1, "standard_split_accuracy": 0.8,
                                                   **METRICS["runs"][1]}))
    assert main(["plot-curves", str(seed)]) == 0
    assert capsys.readouterr().out == f"{seed / PLOT_NAME}\n"
    assert (seed / PLOT_NAME).read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / PLOT_NAME).exists()


def test_one_seeds_figure_is_titled_with_its_run_and_seed(tmp_path, monkeypatch):
    import graphseq.active.curves as curves

    drawn = {}
    monkeypatch.setattr(curves, "plot_learning_curves",
                        lambda runs, path, title, reference, split="test": drawn.update(runs=runs, title=title, reference=reference))
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    seed = tmp_path / "seed-0"
    seed.mkdir()
    (seed / "metrics.json").write_text(json.dumps({"seed": 0, "standard_split_accuracy": 0.7, **METRICS["runs"][0]}))
    curves.plot_run(seed)
    assert drawn == {"runs": [METRICS["runs"][0]["curves"]], "title": "active-cora, seed 0", "reference": 0.7}


DAMAGED = {
    "truncated": (json.dumps(METRICS)[:40].encode(), "Unterminated string starting at: line 1 column 38"),
    "empty": (b"", "Expecting value: line 1 column 1 (char 0)"),
    "not UTF-8": (b'{"pipeline": "\xff"}', "'utf-8' codec can't decode byte 0xff in position 14"),
    "a list": (b"[1, 2]", "'list' object has no attribute 'get'"),
    "a point of one number": (json.dumps({"runs": [{"curves": {"random": [[2]]}}]}).encode(),
                              "not enough values to unpack"),
    "a point of words": (json.dumps({"runs": [{"curves": {"random": [["two", 0.3]]}}]}).encode(),
                         "invalid literal for int()"),
    "curves as a list": (json.dumps({"runs": [{"curves": [[2, 0.3]]}]}).encode(),
                         "'list' object has no attribute 'items'"),
}


@pytest.mark.parametrize("content, reason", DAMAGED.values(), ids=DAMAGED.keys())
def test_plot_curves_names_a_damaged_metrics_file_and_leaves_it(tmp_path, capsys, content, reason):
    (tmp_path / "metrics.json").write_bytes(content)
    assert main(["plot-curves", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"graphseq: error: {tmp_path / 'metrics.json'} is damaged (")
    assert reason in err and err.endswith("); it was left as it is\n") and err.count("\n") == 1
    assert (tmp_path / "metrics.json").read_bytes() == content
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


@pytest.mark.parametrize("given, what", [("gone", "does not exist"), ("metrics.json", "is not a folder")])
def test_plot_curves_says_a_run_folder_is_missing_or_a_file(tmp_path, capsys, given, what):
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    assert main(["plot-curves", str(tmp_path / given)]) == 2
    assert capsys.readouterr().err == (f"graphseq: error: {tmp_path / given} {what}; give the --out folder of a "
                                       f"run (or one of its seed-N folders)\n")
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_plot_curves_replaces_the_figure_atomically(tmp_path, capsys):
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    (tmp_path / PLOT_NAME).write_bytes(b"an older figure")
    inode = (tmp_path / PLOT_NAME).stat().st_ino
    assert main(["plot-curves", str(tmp_path)]) == 0
    # A new file renamed over the old one: a reader never sees half a figure.
    assert (tmp_path / PLOT_NAME).stat().st_ino != inode
    assert (tmp_path / PLOT_NAME).read_bytes()[:4] == b"\x89PNG"


def test_plot_curves_refuses_a_figure_path_it_cannot_write(tmp_path, capsys):
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    (tmp_path / PLOT_NAME).mkdir()
    assert main(["plot-curves", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"graphseq: error: cannot write {tmp_path / PLOT_NAME}: Is a directory\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["learning_curves.png", "metrics.json"]


def test_seeds_that_share_no_label_count_are_drawn_each_on_its_own(tmp_path):
    from graphseq.active.curves import mean_curve, plot_learning_curves

    assert mean_curve([[[1, 0.5]], [[2, 0.6]]]) is None  # drawn seed by seed
    path = plot_learning_curves([{"m": [[1, 0.5]]}, {"m": [[2, 0.6]]}], tmp_path / "c.png", "t")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_mean_curve_of_no_seeds_is_refused():
    from graphseq.active.curves import mean_curve

    with pytest.raises(ValueError, match="mean_curve needs the curve of at least one seed, got none"):
        mean_curve([])


def _drawn(monkeypatch, tmp_path, runs, **options):
    """The Axes plot_learning_curves drew (caught where the figure is written)."""
    import graphseq.active.curves as curves

    caught = {}
    monkeypatch.setattr(curves, "write_png", lambda figure, path: caught.update(figure=figure))
    curves.plot_learning_curves(runs, tmp_path / "c.png", "t", **options)
    return caught["figure"].axes[0]


def test_seeds_whose_label_counts_differ_are_drawn_point_by_point(tmp_path, monkeypatch):
    """A skip at a person's prompt shifts one seed's label counts: no point
    is dropped, and the final accuracy is each seed's last."""
    runs = [{"margin": [[13, 0.1], [27, 0.2], [41, 0.3], [42, 0.4]]},
            {"margin": [[14, 0.15], [28, 0.25], [42, 0.5]]}]
    axes = _drawn(monkeypatch, tmp_path, runs)
    lines = [line for line in axes.get_lines() if line.get_label() and not line.get_label().startswith("_")]
    drawn = sorted((float(x), float(y)) for line in axes.get_lines() for x, y in zip(line.get_xdata(),
                                                                                      line.get_ydata()))
    assert drawn == sorted((float(n), a) for r in runs for n, a in r["margin"])
    (label,) = [line.get_label() for line in lines]
    assert label.startswith("margin (0.450 ± 0.071")  # mean and std of 0.4 and 0.5
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [label]
    assert axes.get_title() == "t: learning curves (2 seeds, each drawn)"


def test_seeds_with_the_same_label_counts_are_drawn_as_their_mean(tmp_path, monkeypatch):
    runs = [{"m": [[2, 0.2], [4, 0.4]]}, {"m": [[2, 0.4], [4, 0.6]]}]
    axes = _drawn(monkeypatch, tmp_path, runs)
    (line,) = axes.get_lines()
    assert list(line.get_xdata()) == [2, 4] and list(line.get_ydata()) == pytest.approx([0.3, 0.5])
    assert line.get_label() == "m (0.500 ± 0.141)"


def test_the_legend_is_placed_where_it_covers_least(tmp_path, monkeypatch):
    axes = _drawn(monkeypatch, tmp_path, [{"m": [[2, 0.2], [4, 0.9]]}])
    assert axes.get_legend()._loc in (0, "best")  # matplotlib keeps "best" as 0


def test_label_counts_are_ticked_in_whole_numbers(tmp_path, monkeypatch):
    axes = _drawn(monkeypatch, tmp_path, [{"m": [[2, 0.2], [3, 0.9]]}])
    ticks = [t for t in axes.get_xticks() if axes.get_xlim()[0] <= t <= axes.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_the_axis_and_legend_name_the_nodes_measured(tmp_path, monkeypatch):
    axes = _drawn(monkeypatch, tmp_path, [{"m": [[2, 0.2], [4, 0.9]]}], split="val")
    assert axes.get_ylabel() == "val accuracy"
    assert axes.get_legend().get_title().get_text() == "strategy (final val accuracy)"


def test_plot_curves_names_the_split_a_run_measured_and_old_runs_measured_test(tmp_path, monkeypatch):
    import graphseq.active.curves as curves

    drawn = {}
    monkeypatch.setattr(curves, "plot_learning_curves",
                        lambda runs, path, title, reference, split="test": drawn.update(split=split))
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))  # written before the split was kept
    curves.plot_run(tmp_path)
    assert drawn == {"split": "test"}
    (tmp_path / "metrics.json").write_text(json.dumps(
        {**METRICS, "runs": [{**r, "evaluated_on": "val"} for r in METRICS["runs"]]}))
    curves.plot_run(tmp_path)
    assert drawn == {"split": "val"}


def test_a_run_stopped_before_its_first_model_is_named_and_said_so(tmp_path, capsys):
    metrics = {"pipeline": "active-cora", "runs": [{"seed": 0, "labels_margin": 0, "curves": {"margin": []}}]}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    assert main(["plot-curves", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"graphseq: error: {tmp_path / 'metrics.json'} holds no point of a "
                                       f"learning curve: the run stopped before its first model\n")


def test_an_accuracy_that_is_not_a_number_is_said_in_the_legend(tmp_path, monkeypatch):
    axes = _drawn(monkeypatch, tmp_path, [{"m": [[2, 0.2], [4, float("nan")], [6, 0.5]]}])
    (text,) = [t.get_text() for t in axes.get_legend().get_texts()]
    assert text == "m (0.500; 1 not a number, not drawn)"


@stage("test_records_curves", checks={"lift": finite})
def records_curves(ctx, *, lift: float = 0.0):
    """Records what the active_learning stage records (each strategy's curve,
    the nodes measured, the standard split's accuracy), ``lift`` higher."""
    ctx.metrics["curves"] = {"random": [[2, 0.3 + lift], [4, 0.5 + lift]],
                             "margin": [[2, 0.3 + lift], [4, 0.6 + lift + ctx.seed / 100]]}
    ctx.metrics[SPLIT_KEY] = "val"
    ctx.metrics["standard_split_accuracy"] = 0.8 + lift


def _two_tables_of_curves(tmp_path, runs):
    """A run whose two sections both record curves: its metrics.json names them ``SECTION.curves``."""
    pipeline = tmp_path / "two curves.toml"
    pipeline.write_text('[first]\nstage = "test_records_curves"\n\n'
                        '[second]\nstage = "test_records_curves"\nlift = 0.125\n')
    out = tmp_path / "run"
    run(pipeline, runs=runs, out=out, quiet=True)
    return out


def _legend(monkeypatch, run_dir):
    """The legend plot_run drew for ``run_dir`` (the figure caught where it is written)."""
    import graphseq.active.curves as curves

    caught = {}
    monkeypatch.setattr(curves, "write_png", lambda figure, path: caught.update(figure=figure))
    curves.plot_run(run_dir)
    axes = caught["figure"].axes[0]
    return [t.get_text() for t in axes.get_legend().get_texts()], axes


def test_plot_curves_draws_the_curves_of_every_table_that_recorded_them(tmp_path, capsys, monkeypatch):
    out = _two_tables_of_curves(tmp_path, runs=2)
    assert "curves" not in json.loads((out / "metrics.json").read_text())["runs"][0]  # first.curves, second.curves
    assert not (out / PLOT_NAME).exists()  # drawn by no stage of this pipeline: plot-curves draws it
    assert main(["plot-curves", str(out)]) == 0
    assert capsys.readouterr().out == f"{out / PLOT_NAME}\n"
    assert (out / PLOT_NAME).read_bytes()[:4] == b"\x89PNG"
    legend, axes = _legend(monkeypatch, out)
    # Each line is named by its section; each section's standard split is drawn, named the same way.
    assert legend == ["first: random (0.500 ± 0.000)", "first: margin (0.605 ± 0.007)",
                      "second: random (0.625 ± 0.000)", "second: margin (0.730 ± 0.007)",
                      "standard split, first (0.800)", "standard split, second (0.925)"]
    assert axes.get_ylabel() == "val accuracy"
    assert axes.get_title() == "two curves: learning curves (2 seeds, mean ± std)"


def test_plot_curves_draws_every_table_of_one_seeds_folder(tmp_path, monkeypatch):
    out = _two_tables_of_curves(tmp_path, runs=2)
    legend, axes = _legend(monkeypatch, out / "seed-1")
    assert legend == ["first: random (0.500)", "first: margin (0.610)", "second: random (0.625)",
                      "second: margin (0.735)", "standard split, first (0.800)", "standard split, second (0.925)"]
    assert axes.get_title() == "two curves, seed 1: learning curves (1 seed)"


def test_plot_curves_names_a_damaged_curve_of_one_table_of_several(tmp_path, capsys):
    metrics = {"runs": [{"first.curves": {"random": [[2, 0.3]]}, "second.curves": {"random": [["two", 0.3]]}}]}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    assert main(["plot-curves", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"graphseq: error: {tmp_path / 'metrics.json'} is damaged (invalid literal for int()")
    assert err.endswith("); it was left as it is\n") and err.count("\n") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]
