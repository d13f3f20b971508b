"""A stage's refusals name its keys as a user sets them: by the section the
pipeline file gives the stage (``--set oracle.episodes=N`` in
fewshot-omniglot-active's [oracle] section), not by the stage's registered name
(fewshot_oracle), and by a section of the user's own naming in a file of theirs."""
from pathlib import Path

import pytest

import graphseq
from graphseq.cli import main
from graphseq.errors import GraphseqError
from graphseq.runner.config import resolve_pipeline


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
    # And a training section of the user's naming, checked by another stage's precheck.
    plain = tmp_path / "plain.toml"
    plain.write_text(Path(resolve_pipeline("fewshot-omniglot-5w1s")).read_text(encoding="utf-8")
                     .replace("\n[test]\n", "\n[final_test]\n"), encoding="utf-8")
    assert main(["run", str(plain), "--quiet", "--out", str(out), "--set", 'final_test.queries=["random"]']) == 2
    assert capsys.readouterr().err.startswith(
        "graphseq: error: final_test.queries = ['random'] has no use when model.active = false")
    assert not out.exists()


def _renamed(tmp_path, pipeline: str, renames: dict) -> Path:
    """The shipped ``pipeline`` as a user's file, with sections renamed (``{"sample": "draw"}``)."""
    text = Path(resolve_pipeline(pipeline)).read_text(encoding="utf-8")
    for old, new in renames.items():
        assert text.count(f"\n[{old}]\n") == 1
        text = text.replace(f"\n[{old}]\n", f"\n[{new}]\n")
    path = tmp_path / "mine.toml"
    path.write_text(text, encoding="utf-8")
    return path


# Refusals named the shipped sections' names for a section's own keys, and for another section's keys, so the
# advice (``--set sample.prime=...``) failed for a file whose sections the user had named otherwise.
RENAMED = [
    ("charlm-lstm", {"sample": "draw"}, ['draw.prime="ROMEO\u20ac"'],
     "draw.prime 'ROMEO\u20ac': 1 symbol(s) not in the vocabulary"),
    ("active-cora", {"active": "loop"}, ["loop.budget=5", "loop.initial=14"],
     "loop.budget (5) is smaller than the initial labelled set (loop.initial = 14)"),
    ("active-polarity", {"active": "loop"}, ["loop.reference=true"], "loop.reference = true has no use here"),
    ("polarity-bilstm", {"data": "sentences"}, ["sentences.test_folds=[2, 10]"],
     "sentences.test_folds: fold(s) 10 out of range 0..9"),
    ("polarity-bilstm", {"data": "sentences"}, ["sentences.min_freq=1000000000", "sentences.test_folds=[0]"],
     "sentences.min_freq = 1000000000: no word occurs that often in the training sentences of fold 0, so its "
     "vocabulary would hold <unk> alone; lower sentences.min_freq"),
    ("caption-shapes-attention", {"model": "decoder"}, ["decoder.heads=3", "decoder.hidden_size=16"],
     "decoder.heads = 3 must divide decoder.hidden_size = 16"),
    ("caption-shapes-init", {"model": "net"}, ["evaluate.figure_images=2"],
     "evaluate.figure_images = 2 has no use when net.decoder = 'init'"),
    ("caption-shapes-attention", {"data": "shapes"}, ["evaluate.figure_images=2", "shapes.test=0"],
     "evaluate.figure_images = 2 has no use when shapes.test = 0: the figure is of test images, so it applies "
     "only with shapes.test > 0"),
    ("caption-shapes-attention", {"data": "shapes"}, ["train.eval_images=13", "shapes.val=12"],
     "train.eval_images = 13 is more than the 12 validation images (shapes.val = 12); lower it to 12 or less, "
     "or raise shapes.val"),
    ("caption-shapes-attention", {"data": "shapes"}, ["shapes.test=0"],
     "but shapes.test = 0 draws no test images; leave 'test' out of evaluate.splits, or set shapes.test above 0"),
    ("fewshot-omniglot-5w1s", {"model": "net"}, ['train.query="random"'],
     "train.query = 'random' has no use when net.active = false: the query applies only to an active model "
     "(net.active = true)"),
    ("fewshot-omniglot-5w1s", {"model": "net"}, ['test.queries=["random"]'],
     "test.queries = ['random'] has no use when net.active = false: the queries apply only to an active model "
     "(net.active = true)"),
    ("fewshot-omniglot-5w1s", {"data": "chars"}, ["chars.val_characters=0", "train.eval_every=2"],
     "train.eval_every = 2 has no use when chars.val_characters = 0: it applies only with validation characters "
     "(chars.val_characters > 0)"),
    ("fewshot-omniglot-active", {"model": "net"}, ["net.active=false", 'test.queries=["learned"]'],
     "oracle.training = '' trains a model without a query head; the oracle needs an active model "
     "(net.active = true)"),
    ("fewshot-omniglot-5w1s", {"data": "chars", "model": "net"}, ["net.active=true"],
     "net.active: an active model asks for the label of an unlabelled image, and chars.unlabelled = 0; set "
     "chars.unlabelled to at least 1"),
    ("bert-polarity", {"pretrain": "groups"}, ["groups.groups=11"], "groups.groups = 11 is more than the 10 folds"),
    ("bert-polarity", {"pretrain": "groups"}, ['groups.pretrain_set=["corpus.folds=5"]'],
     "groups.pretrain_set: corpus.folds is not allowed; bert-polarity sets corpus.exclude_folds, corpus.folds, "
     "corpus.fold_seed itself from its folds (set groups.folds and groups.fold_seed instead)"),
]


@pytest.mark.parametrize("pipeline,renames,settings,message", RENAMED)
def test_a_refusal_names_the_tables_as_the_users_file_names_them(tmp_path, capsys, data_root, mirror, pipeline,
                                                                  renames, settings, message):
    path = _renamed(tmp_path, pipeline, renames)
    out = tmp_path / "run"
    options = ["--oracle", "simulated"] if pipeline == "fewshot-omniglot-active" else []
    assert main(["run", str(path), "--quiet", "--threads", "1", "--out", str(out), "--data-root", str(data_root),
                 "--data-mirror", str(mirror), *options,
                 *(arg for setting in settings for arg in ("--set", setting))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphseq: error: ") and err.count("\n") == 1 and message in err
    assert not out.exists()


def test_a_stages_own_refusal_names_its_table_as_the_users_file_names_it(tmp_path, data_root, mirror):
    path = _renamed(tmp_path, "active-polarity", {"learner": "gcn"})
    with pytest.raises(GraphseqError, match="gcn.evaluate = 'val': this task has no val nodes"):
        graphseq.run(str(path), out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True,
                     overrides={"data.limit": 100, "gcn.evaluate": "val"})


def test_a_corpus_too_small_to_split_names_the_corpus_table_as_the_users_file_names_it(tmp_path, capsys, mirror):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for d in range(5):  # a held-out fifth of 5 documents is 1, and a part needs 2 for its false sentence pairs
        (folder / f"doc{d}.txt").write_text("the movie was good\nthe plot was dull\n", encoding="utf-8")
    path = _renamed(tmp_path, "bert-pretrain", {"corpus": "texts"})
    out = tmp_path / "run"
    assert main(["run", str(path), "--quiet", "--out", str(out), "--data-root", str(tmp_path / "data"),
                 "--data-mirror", str(mirror), "--set", f'texts.folder="{folder.as_posix()}"',
                 "--set", "texts.held_out=0.2"]) == 2
    assert capsys.readouterr().err.endswith("each part needs 2 or more (give more documents or raise "
                                            "texts.held_out)\n")
    assert not out.exists()
