"""start_run: a pipeline that builds the run it starts from, in its own run
folder, reuses it once finished, and is refused before anything is written
where the run it names could not run."""
import pytest

import graphseq
from graphseq.checks import at_least
from graphseq.stages import stage

CALLS = []


@stage("test_inner_training", checks={"steps": at_least(1)})
def inner_training(ctx, *, steps: int = 1):
    """A training that stores its checkpoint and counts its runs."""
    CALLS.append(ctx.out)
    (ctx.out / "checkpoint.pt").write_text(f"{steps} steps")
    ctx.metrics["steps"] = steps


@stage("test_reads_the_start", resumes="read.txt", needs={"start": "a finished run"})
def reads_the_start(ctx, *, interrupted: bool = False):
    """Reads the start's checkpoint, or is interrupted (Ctrl-C) before it stores its own file."""
    if interrupted:
        raise KeyboardInterrupt
    ctx.metrics["start"] = (ctx.start / "checkpoint.pt").read_text()
    (ctx.out / "read.txt").write_text("read")


@pytest.fixture
def pipelines(tmp_path):
    inner = tmp_path / "inner.toml"
    inner.write_text('[train]\nstage = "test_inner_training"\n')
    outer = tmp_path / "outer.toml"
    outer.write_text(f'[start]\nstage = "start_run"\npipeline = "{inner}"\noverrides = ["train.steps=3"]\n\n'
                     f'[read]\nstage = "test_reads_the_start"\n')
    CALLS.clear()
    return outer


def test_the_run_it_starts_from_is_built_in_its_folder_with_its_overrides(pipelines, tmp_path):
    summary = graphseq.run(pipelines, out=tmp_path / "run", quiet=True)
    assert summary["runs"][0]["start"] == "3 steps"
    assert CALLS == [tmp_path / "run" / "start"]
    assert (tmp_path / "run" / "start" / "config.toml").is_file()


def test_a_run_interrupted_after_its_start_finished_reuses_it_when_started_again(pipelines, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        graphseq.run(pipelines, out=tmp_path / "run", quiet=True, overrides={"read.interrupted": True})
    assert (tmp_path / "run" / "start" / "metrics.json").is_file()
    # Nothing of its own to continue from: the same command starts it again in its folder.
    summary = graphseq.run(pipelines, out=tmp_path / "run", quiet=True)
    assert summary["runs"][0]["start"] == "3 steps" and CALLS == [tmp_path / "run" / "start"]


@pytest.mark.parametrize("setting, message", [
    ('pipeline = "no-such-pipeline"', "start.pipeline = 'no-such-pipeline': unknown pipeline 'no-such-pipeline'"),
    ('overrides = ["train.nosuch=1"]', "unknown key 'nosuch'"),
])
def test_a_start_that_could_not_run_is_refused_before_anything_is_written(pipelines, tmp_path, setting, message):
    text = pipelines.read_text()
    key = setting.split(" = ")[0]
    pipelines.write_text("\n".join(setting if line.startswith(f"{key} = ") else line for line in text.splitlines()))
    with pytest.raises(graphseq.GraphseqError, match=message):
        graphseq.run(pipelines, out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists() and CALLS == []
