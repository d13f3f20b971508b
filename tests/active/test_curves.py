"""Learning-curve figures from a run's metrics.json: ``graphseq plot-curves``
draws them, and refuses a damaged file in one line without touching it."""
import json

import pytest

from graphseq.active.curves import PLOT_NAME
from graphseq.cli import main

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
                        lambda runs, path, title, reference: drawn.update(runs=runs, title=title, reference=reference))
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

    x, mean, std = mean_curve([[[1, 0.5]], [[2, 0.6]]])
    assert x.size == mean.size == std.size == 0
    path = plot_learning_curves([{"m": [[1, 0.5]]}, {"m": [[2, 0.6]]}], tmp_path / "c.png", "t")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_mean_curve_of_no_seeds_is_refused():
    from graphseq.active.curves import mean_curve

    with pytest.raises(ValueError, match="mean_curve needs the curve of at least one seed, got none"):
        mean_curve([])
