"""The captioning figures: corpus BLEU against several references, and the
object scores a generated set allows; the evaluation's splits against the
data's."""
import pytest

from graphseq import GraphseqError
from graphseq.cli import main
from graphseq.data.shapes import Scene, ShapeObject
from graphseq.runner.config import checked_config, precheck
from graphseq.stages.captioning import attribute_targets, bleu, object_scores

REFERENCES = [[["a", "small", "red", "circle"], ["there", "is", "a", "small", "red", "circle"]],
              [["a", "large", "blue", "square", "left", "of", "a", "small", "green", "diamond"]]]


def test_bleu_of_captions_equal_to_a_reference_is_one():
    figures = bleu(REFERENCES, [REFERENCES[0][1], REFERENCES[1][0]])
    assert figures == pytest.approx({"bleu1": 1.0, "bleu2": 1.0, "bleu3": 1.0, "bleu4": 1.0})


def test_bleu_without_a_matching_word_is_zero():
    assert bleu(REFERENCES, [["dog"], ["cat", "sat"]]) == {"bleu1": 0.0, "bleu2": 0.0, "bleu3": 0.0, "bleu4": 0.0}


def test_bleu_counts_clipped_ngrams_and_the_brevity_penalty():
    # One wrong word of ten, the ninth: 9/10 unigrams, 7/9 bigrams, 6/8
    # trigrams, 5/7 4-grams match; the lengths are equal, so no brevity penalty.
    hypothesis = ["a", "large", "blue", "square", "left", "of", "a", "small", "red", "diamond"]
    figures = bleu(REFERENCES[1:], [hypothesis])
    assert figures["bleu1"] == pytest.approx(0.9)
    assert figures["bleu2"] == pytest.approx((0.9 * 7 / 9) ** 0.5)
    assert figures["bleu4"] == pytest.approx((0.9 * 7 / 9 * 6 / 8 * 5 / 7) ** 0.25)
    # A caption half as long as its reference is penalised by exp(1 - 10/5).
    short = bleu(REFERENCES[1:], [["a", "large", "blue", "square", "left"]])
    assert short["bleu1"] == pytest.approx(2.718281828 ** (1 - 2))


def test_object_scores_count_objects_named_right_over_all_captions():
    scenes = [Scene((ShapeObject("small", "red", "circle", 30, 30),), "horizontal"),
              Scene((ShapeObject("large", "blue", "square", 10, 30), ShapeObject("small", "green", "diamond", 40, 30)),
                    "horizontal")]
    hypotheses = [REFERENCES[0][0], ["a", "large", "blue", "square", "left", "of", "a", "small", "red", "diamond"]]
    assert object_scores(hypotheses, scenes) == pytest.approx(
        {"objects": 2 / 3, "object_precision": 2 / 3, "exact": 0.5})


def test_attribute_targets_are_multi_hot_over_the_named_attributes():
    targets = attribute_targets([["red", "circle"], ["blue"], ["unknown"]], ["circle", "red", "blue"])
    assert targets.tolist() == [[1, 1, 0], [0, 0, 1], [0, 0, 0]]


def test_a_split_the_data_sets_to_no_images_is_refused_before_writing(tmp_path, capsys):
    # caption-coco with data.test = 0 used to train for hours, then only log that it had no test split.
    out = tmp_path / "run"
    assert main(["run", "caption-coco", "--quiet", "--out", str(out), "--data-root", str(tmp_path / "data"),
                 "--data-mirror", str(tmp_path / "mirror"), "--set", "data.download=false",
                 "--set", "data.test=0"]) == 2
    assert capsys.readouterr().err == ("graphseq: error: evaluate.splits = ['val', 'test'] names 'test', but "
                                       "data.test = 0 draws no test images; leave 'test' out of evaluate.splits, "
                                       "or set data.test above 0\n")
    assert not out.exists()
    with pytest.raises(GraphseqError, match=r"^evaluate.splits = \['val', 'test', 'test_unseen'\] names "
                                            r"'test_unseen', but data.test_unseen = 0 draws no test_unseen images"):
        precheck(checked_config("caption-shapes-attention", {"data.test_unseen": 0}))


def test_the_splits_the_data_has_pass_the_checks(tmp_path):
    precheck(checked_config("caption-coco"))
    # A run started before such splits were refused still continues.
    precheck(checked_config("caption-coco", {"data.test": 0}), resumed=[tmp_path])
    precheck(checked_config("caption-coco", {"data.test": 0, "evaluate.splits": ["val"]}))
    # COCO has no test_unseen split to set to 0: asked for, it is said in the log (not refused).
    precheck(checked_config("caption-coco", {"evaluate.splits": ["val", "test", "test_unseen"]}))
    for name in ("caption-shapes-attention", "caption-shapes-init", "caption-shapes-input"):
        precheck(checked_config(name))
