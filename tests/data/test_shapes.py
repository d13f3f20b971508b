"""The generated shapes set: the same seed draws the same images and
captions, every caption parses back to its scene, the unseen split holds
exactly the held-out colour-shape pairs, and the object score counts what a
caption gets right."""
import numpy as np
import pytest
import torch

from graphseq.data import shapes
from graphseq.data.shapes import (COLOURS, SEEN_PAIRS, SIZES, UNSEEN_PAIRS, CaptionParseError, Scene,
                                  ShapeObject, captions, draw, generate_split, load_shapes, parse_caption,
                                  scene_attributes, score_objects)
from graphseq.errors import GraphseqError


def test_the_same_seed_draws_the_same_split():
    one, two = generate_split("train", 40, seed=3), generate_split("train", 40, seed=3)
    assert torch.equal(one.images, two.images)
    assert one.captions == two.captions and one.scenes == two.scenes
    other = generate_split("train", 40, seed=4)
    assert not torch.equal(one.images, other.images)


def test_splits_of_one_seed_are_drawn_apart():
    train, test = generate_split("train", 20, seed=0), generate_split("test", 20, seed=0)
    assert train.scenes != test.scenes


def test_a_split_is_a_prefix_of_a_larger_one():
    # Asking for more images keeps the first ones, so a smaller smoke run
    # sees the same data as the full one.
    small, large = generate_split("val", 5, seed=1), generate_split("val", 12, seed=1)
    assert small.scenes == large.scenes[:5]
    assert torch.equal(small.images, large.images[:5])


def test_images_are_uint8_squares_of_the_asked_size():
    data = generate_split("train", 3, image_size=32)
    assert data.images.dtype == torch.uint8 and data.images.shape == (3, 3, 32, 32)


def test_every_caption_parses_back_to_its_scene():
    data = generate_split("train", 300, seed=5)
    for scene, texts in zip(data.scenes, data.captions):
        assert len(texts) == (2 if len(scene.objects) == 1 else 4)
        assert len(set(texts)) == len(texts)
        for text in texts:
            axis, objects = parse_caption(text).along_axis()
            assert list(objects) == scene.describe()
            assert axis == (None if len(scene.objects) == 1 else scene.axis)


def test_scenes_hold_one_to_three_distinct_objects_along_their_axis():
    data = generate_split("train", 300, seed=6)
    assert {len(s.objects) for s in data.scenes} == {1, 2, 3}
    for scene in data.scenes:
        assert len(set(scene.describe())) == len(scene.objects)
        along = [o.x if scene.axis == "horizontal" else o.y for o in scene.objects]
        assert along == sorted(along)


def test_objects_are_drawn_in_their_colour_without_overlapping():
    data = generate_split("train", 50, seed=7)
    for image, scene in zip(data.images, data.scenes):
        masks = [shapes.shape_mask(o.shape, o.x, o.y, SIZES[o.size], 64) for o in scene.objects]
        assert sum(m.astype(int) for m in masks).max() <= 1
        for obj, mask in zip(scene.objects, masks):
            colour = image[:, torch.from_numpy(mask)].float().mean(dim=1)
            assert (colour - torch.tensor(COLOURS[obj.colour], dtype=torch.float)).abs().max() < 30


def test_training_splits_never_show_the_held_out_pairs_and_the_unseen_split_always_does():
    for split in ("train", "val", "test"):
        for scene in generate_split(split, 200, seed=0).scenes:
            assert all((o.colour, o.shape) in SEEN_PAIRS for o in scene.objects)
    for scene in generate_split("test_unseen", 200, seed=0).scenes:
        assert any((o.colour, o.shape) in UNSEEN_PAIRS for o in scene.objects)
    # One held-out pair per colour and per shape.
    assert len({c for c, _ in UNSEEN_PAIRS}) == len({s for _, s in UNSEEN_PAIRS}) == 4


def test_parse_refuses_captions_outside_the_grammar():
    for text in ["a small red", "a tiny red circle", "a small red circle beside a large blue square",
                 "a small red circle left of", "there a small red circle"]:
        with pytest.raises(CaptionParseError):
            parse_caption(text)
    with pytest.raises(CaptionParseError, match="mix"):
        parse_caption("a small red circle left of a large blue square above a small green diamond").along_axis()


def _scene():
    return Scene((ShapeObject("small", "red", "circle", 10, 30), ShapeObject("large", "blue", "square", 40, 30)),
                 "horizontal")


def test_a_right_caption_scores_every_object_and_exact():
    scene = _scene()
    for text in captions(scene):
        assert score_objects(text.split(), scene) == (2, 2, True)


def test_a_caption_with_one_wrong_word_scores_the_other_object():
    scene = _scene()
    assert score_objects("a small red circle left of a large green square".split(), scene) == (1, 2, False)
    # The right objects in the wrong order, or on the wrong axis, are not exact.
    assert score_objects("a large blue square left of a small red circle".split(), scene) == (2, 2, False)
    assert score_objects("a small red circle above a large blue square".split(), scene) == (2, 2, False)
    # An object named twice counts once; a caption that is not a sentence
    # still gets credit for the objects it names.
    assert score_objects("a small red circle left of a small red circle".split(), scene) == (1, 2, False)
    assert score_objects("small red circle large blue square".split(), scene) == (2, 2, False)
    assert score_objects([], scene) == (0, 0, False)


def test_attributes_name_what_the_scene_holds():
    assert scene_attributes(_scene()) == sorted(
        ["circle", "square", "red", "blue", "small", "large", "red circle", "blue square", "2 objects"])


def test_load_shapes_keeps_scenes_and_attribute_labels():
    data = load_shapes("test", 6, seed=2)
    assert len(data) == 6 and data.scenes is not None
    assert data.labels[0] == scene_attributes(data.scenes[0])
    images = data.load_images([0, 5])
    assert images.shape == (2, 3, 64, 64) and 0.0 <= float(images.min()) and float(images.max()) <= 1.0
    assert data.tokens[0][0] == data.captions[0][0].split()


def test_bad_arguments_are_refused():
    with pytest.raises(GraphseqError, match="unknown shapes split"):
        generate_split("training", 3)
    with pytest.raises(GraphseqError, match="image_size"):
        generate_split("train", 3, image_size=8)


def test_draw_is_deterministic_for_a_generator_state():
    scene = _scene()
    one = draw(scene, rng=np.random.default_rng(1))
    assert np.array_equal(one, draw(scene, rng=np.random.default_rng(1)))


def test_random_scene_refuses_objects_it_cannot_draw():
    rng = np.random.default_rng(0)
    with pytest.raises(GraphseqError, match="1 <= max_objects <= 3, got 8"):
        shapes.random_scene(rng, SEEN_PAIRS, max_objects=8)
    with pytest.raises(GraphseqError, match="cannot draw 3 distinct objects"):
        shapes.random_scene(rng, [])
    # Two sizes of one pair make two objects; a third from must_include makes three.
    assert len(shapes.random_scene(rng, [("red", "circle")], max_objects=2).objects) <= 2
    scene = shapes.random_scene(np.random.default_rng(0), [("red", "circle")], [("blue", "square")])
    assert ("blue", "square") in {(o.colour, o.shape) for o in scene.objects}
    assert len({o.words for o in scene.objects}) == len(scene.objects)
    # Last, as the old code never returned here.
    with pytest.raises(GraphseqError, match=r"cannot draw 3 distinct objects from the colour-shape pairs \[\('red'"):
        shapes.random_scene(rng, [("red", "circle")], max_objects=3)


def test_a_caption_string_scores_as_its_words():
    scene = _scene()
    text = "a small red circle left of a large blue square"
    assert shapes.mentioned_objects(text) == shapes.mentioned_objects(text.split())
    assert score_objects(text, scene) == score_objects(text.split(), scene) == (2, 2, True)
    one = Scene((ShapeObject("large", "red", "circle", 1, 1),), "horizontal")
    assert score_objects("a large red circle", one) == (1, 1, True)
