import pytest
import torch

from graphseq.data.episodes import EpisodeSampler, FewShotClasses, distinct_draws
from graphseq.errors import GraphseqError


def numbered_classes(num_classes=30, per_class=20):
    """Images whose first pixel is their class and whose second is their
    index, so that a test can read back which image a node holds."""
    images = torch.zeros(num_classes, per_class, 1, 2, 2, dtype=torch.uint8)
    images[:, :, 0, 0, 0] = torch.arange(num_classes).view(-1, 1)
    images[:, :, 0, 0, 1] = torch.arange(per_class).view(1, -1)
    return FewShotClasses(images, [f"c{i}" for i in range(num_classes)])


def pixels(batch):
    """The (class, index) each node's image came from, read from its pixels."""
    values = torch.round((batch.x[:, 0, 0, :2] * 0.5 + 0.5) * 255).long()
    return values


def assert_each_episode_is_valid(batch, num, sampler, num_classes):
    """The invariants of every episode of a batch, one at a time."""
    ways, shots, unlabelled, size = sampler.ways, sampler.shots, sampler.unlabelled, sampler.episode_size
    assert torch.equal(pixels(batch), batch.image)  # the right images were gathered
    for e in range(num):
        nodes = batch.batch == e
        classes_e = batch.classes[e]
        assert len(set(classes_e.tolist())) == ways                   # distinct classes
        assert bool((classes_e < num_classes).all())
        images = batch.image[nodes]
        assert len({tuple(i) for i in images.tolist()}) == size        # no image twice
        y, labelled, query = batch.y[nodes], batch.labelled[nodes], batch.query[nodes]
        assert torch.equal(images[:, 0], classes_e[y])                 # y is the class's position
        assert int(query.sum()) == 1 and int(y[query]) == int(batch.target[e])
        for way in range(ways):
            assert int((labelled & (y == way)).sum()) == shots
            assert int((~labelled & ~query & (y == way)).sum()) == unlabelled


@pytest.mark.parametrize("ways,shots,unlabelled", [(5, 1, 0), (5, 5, 0), (20, 1, 0), (5, 1, 4), (3, 2, 3)])
def test_episode_invariants(ways, shots, unlabelled):
    classes = numbered_classes()
    sampler = EpisodeSampler(classes, ways, shots, unlabelled)
    num = 50
    batch = sampler.sample(num, torch.Generator().manual_seed(0))
    size = ways * (shots + unlabelled) + 1
    assert sampler.episode_size == size and batch.num_nodes == num * size
    assert_each_episode_is_valid(batch, num, sampler, classes.num_classes)
    edges = batch.edge_index
    assert edges.size(1) == num * size * (size - 1)
    assert bool((batch.batch[edges[0]] == batch.batch[edges[1]]).all()) and bool((edges[0] != edges[1]).all())


def test_sampling_is_seeded_and_queries_are_uniform():
    sampler = EpisodeSampler(numbered_classes(), 5, 1)
    a = sampler.sample(400, torch.Generator().manual_seed(3))
    b = sampler.sample(400, torch.Generator().manual_seed(3))
    assert torch.equal(a.x, b.x) and torch.equal(a.target, b.target)
    counts = torch.bincount(a.target, minlength=5)
    assert int(counts.min()) > 50  # each of the 5 positions about 80 times


def test_labelled_only_is_the_same_draw_without_the_unlabelled_nodes():
    classes = numbered_classes()
    semi = EpisodeSampler(classes, 5, 1, 4).sample(20, torch.Generator().manual_seed(1))
    plain = EpisodeSampler(classes, 5, 1, 0).sample(20, torch.Generator().manual_seed(1))
    keep = semi.labelled | semi.query
    assert torch.equal(semi.image[keep], plain.image)
    assert torch.equal(semi.target, plain.target)


def test_distinct_draws_both_ways():
    generator = torch.Generator().manual_seed(0)
    for n in (10, 5000):
        draws = distinct_draws(300, 8, n, generator)
        assert draws.shape == (300, 8) and int(draws.max()) < n
        assert all(len(set(row)) == 8 for row in draws.tolist())


def test_impossible_episodes_are_refused():
    classes = numbered_classes(num_classes=4, per_class=5)
    with pytest.raises(GraphseqError, match="5-way episodes need 5 classes"):
        EpisodeSampler(classes, 5, 1)
    with pytest.raises(GraphseqError, match="need 6 images of a class"):
        EpisodeSampler(classes, 3, 2, 3)
    with pytest.raises(GraphseqError, match="at least 2 classes"):
        EpisodeSampler(classes, 1, 1)


@pytest.mark.parametrize("ways,shots,unlabelled,per_support", [(5, 1, 0, 4), (5, 5, 0, 5), (20, 1, 0, 10),
                                                               (3, 2, 3, 3)])
def test_episodes_that_share_a_support_set_differ_only_in_the_query(ways, shots, unlabelled, per_support):
    classes = numbered_classes()
    sampler = EpisodeSampler(classes, ways, shots, unlabelled)
    num = 6 * per_support
    batch = sampler.sample(num, torch.Generator().manual_seed(0), per_support=per_support)
    size = sampler.episode_size
    # Each episode alone keeps every invariant of an ordinary draw.
    assert_each_episode_is_valid(batch, num, sampler, classes.num_classes)
    image = batch.image.view(num, size, 2)
    targets = torch.bincount(batch.target, minlength=ways)
    assert int((targets > 0).sum()) > 1  # queries of several classes
    for group in range(num // per_support):
        rows = slice(group * per_support, (group + 1) * per_support)
        support = image[rows, :-1]
        assert bool((support == support[:1]).all())                      # the same support in the group
        assert bool((batch.classes[rows] == batch.classes[rows][:1]).all())
        queries = {tuple(q) for q in image[rows, -1].tolist()}
        assert len(queries) == per_support                             # distinct queries
        assert not queries & {tuple(s) for s in support[0].tolist()}   # none of them in the support
    # The distinct images, and where each node's image is among them.
    first = batch.unique_nodes
    assert len({tuple(i) for i in batch.image[first].tolist()}) == first.numel()
    assert torch.equal(batch.image[first][batch.node_image], batch.image)
    # (two support sets may hold the same image by chance: it is embedded once)
    assert first.numel() == len({tuple(i) for i in batch.image.tolist()}) <= num // per_support * (size - 1) + num


def test_one_episode_per_support_set_is_the_ordinary_draw():
    sampler = EpisodeSampler(numbered_classes(), 5, 1, 2)
    a = sampler.sample(12, torch.Generator().manual_seed(4))
    b = sampler.sample(12, torch.Generator().manual_seed(4), per_support=1)
    assert torch.equal(a.image, b.image) and torch.equal(a.target, b.target)
    assert "unique_nodes" not in b and "node_image" not in b


def test_impossible_shared_support_sets_are_refused():
    sampler = EpisodeSampler(numbered_classes(per_class=8), 5, 2, 1)
    with pytest.raises(GraphseqError, match=r"episodes per support set \(3\) .* divide the number of episodes \(10\)"):
        sampler.sample(10, per_support=3)
    with pytest.raises(GraphseqError, match="need 2 labelled \\+ 1 unlabelled \\+ 6 query images of a class, 9; "
                                            "there are 8"):
        sampler.sample(12, per_support=6)


def test_sampler_refuses_counts_that_are_not_whole_numbers():
    classes = numbered_classes()
    for kwargs in ({"ways": 2.0, "shots": 1}, {"ways": 2, "shots": 1.5}, {"ways": 2, "shots": 1, "unlabelled": 1.0},
                   {"ways": True, "shots": 1}):
        name = next(k for k, v in kwargs.items() if type(v) is not int)
        with pytest.raises(GraphseqError, match=f"EpisodeSampler needs a whole number for {name}"):
            EpisodeSampler(classes, **kwargs)
    sampler = EpisodeSampler(classes, 2, 1)
    with pytest.raises(GraphseqError, match="needs a whole number of episodes >= 0, got -1"):
        sampler.sample(-1)
    with pytest.raises(GraphseqError, match="needs a whole number of episodes >= 0, got 2.0"):
        sampler.sample(2.0)
    with pytest.raises(GraphseqError, match="needs a whole number for per_support, got 1.0"):
        sampler.sample(2, per_support=1.0)
    assert sampler.sample(0).num_nodes == 0
    assert sampler.sample(0, per_support=2).num_nodes == 0


def test_each_batch_has_its_own_edges():
    """Editing one batch's edge_index (or reusing it under inference mode)
    leaves the next batch's alone."""
    sampler = EpisodeSampler(numbered_classes(), 2, 1)
    first = sampler.sample(3, torch.Generator().manual_seed(0))
    expected = first.edge_index.clone()
    first.edge_index[0, 0] = 5
    assert torch.equal(sampler.sample(3, torch.Generator().manual_seed(0)).edge_index, expected)


def test_classes_refuse_float_images_and_mean_of_other_channels():
    images = torch.zeros(3, 4, 1, 2, 2)
    with pytest.raises(ValueError, match="FewShotClasses needs uint8 images .*torch.float32"):
        FewShotClasses(images, list("abc"))
    images = images.to(torch.uint8)
    with pytest.raises(ValueError, match=r"FewShotClasses mean needs one value or one per channel \(1\)"):
        FewShotClasses(images, list("abc"), mean=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match=r"FewShotClasses std needs one value or one per channel \(3\)"):
        FewShotClasses(torch.zeros(3, 4, 3, 2, 2, dtype=torch.uint8), list("abc"), std=(0.2, 0.2))
    FewShotClasses(images, list("abc"), mean=(0.5,), std=0.5)
    FewShotClasses(torch.zeros(3, 4, 3, 2, 2, dtype=torch.uint8), list("abc"), (0.5, 0.4, 0.3), 0.2)
