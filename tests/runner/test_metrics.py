"""How a run's metrics.json names the metrics of its sections: two sections of
one stage keep both their metrics, under names that tell them apart."""
import json

from graphseq import run
from graphseq.checks import finite
from graphseq.stages import stage


@stage("test_scores", checks={"value": finite})
def scores(ctx, *, value: float = 0.0, label: str = ""):
    """Records a metric of its own and one that every section of this stage records."""
    ctx.metrics["score"] = value
    if label:
        ctx.metrics[f"score_{label}"] = value


@stage("test_reads_score")
def reads_score(ctx):
    """Reads the metric an earlier section recorded, as the few-shot oracle reads its training's steps."""
    ctx.metrics["score_seen"] = ctx.metrics["score"]


def test_two_tables_of_one_stage_keep_both_figures_named_by_table(tmp_path):
    pipeline = tmp_path / "two tests.toml"
    pipeline.write_text('[first]\nstage = "test_scores"\nvalue = 1.0\nlabel = "a"\n\n'
                        '[second]\nstage = "test_scores"\nvalue = 2.0\nlabel = "b"\n\n'
                        '[read]\nstage = "test_reads_score"\n')
    summary = run(pipeline, out=tmp_path / "run", quiet=True)
    # The metric both sections record is named by each section; the others keep their names.
    assert summary["runs"][0] == {"seed": 0, "first.score": 1.0, "score_a": 1.0, "second.score": 2.0,
                                  "score_b": 2.0, "score_seen": 2.0}
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == summary
    assert summary["mean"]["first.score"] == 1.0 and summary["mean"]["second.score"] == 2.0


def test_figures_that_one_table_records_keep_their_names(tmp_path):
    pipeline = tmp_path / "one test.toml"
    pipeline.write_text('[first]\nstage = "test_scores"\nvalue = 1.0\n\n[read]\nstage = "test_reads_score"\n')
    summary = run(pipeline, seed=3, runs=2, out=tmp_path / "run", quiet=True)
    assert [figures for figures in summary["runs"]] == [{"seed": 3, "score": 1.0, "score_seen": 1.0},
                                                        {"seed": 4, "score": 1.0, "score_seen": 1.0}]
    assert json.loads((tmp_path / "run" / "seed-4" / "metrics.json").read_text()) == summary["runs"][1]
