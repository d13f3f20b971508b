"""A stage's refusals name its keys as a user sets them: by the table the
pipeline file gives the stage (``--set oracle.episodes=N`` in
fewshot-omniglot-active's [oracle] table), not by the stage's registered name
(fewshot_oracle), and by a table of the user's own naming in a file of theirs."""
from pathlib import Path

from graphseq.cli import main
from graphseq.pipeline import resolve_pipeline


def test_an_unknown_training_is_refused_under_the_key_the_user_sets(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "fewshot-omniglot-active", "--quiet", "--out", str(out), "--oracle", "simulated",
                 "--set", "oracle.training=nosuch"]) == 2
    assert capsys.readouterr().err == ("graphseq: error: oracle.training = 'nosuch': no earlier training of that "
                                       "name; the trainings of this pipeline: '', 'random_trained'\n")
    assert not out.exists()


def test_a_table_of_the_users_naming_is_the_one_a_refusal_names(tmp_path, capsys):
    text = Path(resolve_pipeline("fewshot-omniglot-active")).read_text(encoding="utf-8")
    assert text.count("\n[oracle]\n") == 1 and text.count("\n[test]\n") == 1
    mine = tmp_path / "mine.toml"
    mine.write_text(text.replace("\n[oracle]\n", "\n[ask]\n"), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["run", str(mine), "--quiet", "--out", str(out), "--oracle", "simulated",
                 "--set", "ask.training=nosuch"]) == 2
    assert capsys.readouterr().err.startswith("graphseq: error: ask.training = 'nosuch': no earlier training")
    # And a training table of the user's naming, checked by another stage's precheck.
    plain = tmp_path / "plain.toml"
    plain.write_text(Path(resolve_pipeline("fewshot-omniglot-5w1s")).read_text(encoding="utf-8")
                     .replace("\n[test]\n", "\n[final_test]\n"), encoding="utf-8")
    assert main(["run", str(plain), "--quiet", "--out", str(out), "--set", 'final_test.queries=["random"]']) == 2
    assert capsys.readouterr().err.startswith(
        "graphseq: error: final_test.queries = ['random'] has no use when model.active = false")
    assert not out.exists()
