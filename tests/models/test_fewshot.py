import io
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import Terminal
from graphseq.data.episodes import EpisodeSampler, FewShotClasses
from graphseq.models.fewshot import FewShotConfig, FewShotGNN, FewShotModel, omniglot_code_embedding
from graphseq.models.fewshot_dense import DenseFewShotGNN
from graphseq.nn import MetricAttentionConv


def random_classes(num_classes=12, per_class=8, size=28, seed=0):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (num_classes, per_class, 1, size, size), dtype=torch.uint8,
                           generator=generator)
    return FewShotClasses(images, [f"class{i}" for i in range(num_classes)])


def episodes(ways=5, shots=1, unlabelled=0, num=4, seed=0):
    sampler = EpisodeSampler(random_classes(), ways, shots, unlabelled)
    return sampler.sample(num, torch.Generator().manual_seed(seed))


def trained_statistics(model, batch, passes=3):
    """Running BatchNorm statistics that differ from their initial values."""
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(batch)


def test_gnn_equals_dense_reference_outputs_and_gradients():
    torch.manual_seed(0)
    batch_size, n, features = 3, 6, 10
    gnn = FewShotGNN(features, 5, last_dropout=0.0).double()
    dense = DenseFewShotGNN(gnn).double()
    from graphseq import graphs
    edge_index = graphs.fully_connected([n] * batch_size, self_loops=False)
    x = torch.randn(batch_size * n, features, dtype=torch.float64, requires_grad=True)
    for training in (True, False):
        gnn.train(training), dense.train(training)
        dense.load_from(gnn)  # the same running statistics
        ours = gnn(x, edge_index)
        reference = dense(x.view(batch_size, n, features)).reshape(batch_size * n, -1)
        assert torch.allclose(ours, reference, atol=1e-10)
        target = torch.randn_like(ours)
        ours_loss, reference_loss = (ours * target).sum(), (reference * target).sum()
        gnn.zero_grad(), dense.zero_grad()
        grad_x, = torch.autograd.grad(ours_loss, x, retain_graph=True)
        ours_loss.backward()
        reference_grad_x, = torch.autograd.grad(reference_loss, x, retain_graph=True)
        reference_loss.backward()
        assert torch.allclose(grad_x, reference_grad_x, atol=1e-10)
        for dense_weight, weight in dense.weight_pairs(gnn):
            if weight.requires_grad:
                assert torch.allclose(dense_weight.grad, weight.grad.view_as(dense_weight), atol=1e-10)
    # Training mode updated both networks' running statistics alike.
    for dense_weight, weight in dense.weight_pairs(gnn):
        if not weight.requires_grad:
            assert torch.allclose(dense_weight.double(), weight.double().view_as(dense_weight))


def test_whole_model_equals_dense_reference():
    torch.manual_seed(0)
    model = FewShotModel(FewShotConfig(num_ways=5, last_dropout=0.0)).double()
    batch = episodes(num=3)
    batch.x = batch.x.double()
    dense = DenseFewShotGNN(model.gnn).double()
    ours = model(batch)
    features = model.node_features(batch)
    reference = dense(features.view(3, 6, -1))[:, -1]  # the query is the last node of each episode
    assert torch.allclose(ours, reference, atol=1e-10)
    grads = torch.autograd.grad(ours.logsumexp(1).sum(), list(model.embedding.parameters()))
    reference_grads = torch.autograd.grad(reference.logsumexp(1).sum(), list(model.embedding.parameters()))
    for a, b in zip(grads, reference_grads):
        assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("active", [False, True])
def test_evaluation_does_not_depend_on_the_other_episodes_of_a_batch(active):
    torch.manual_seed(0)
    model = FewShotModel(FewShotConfig(num_ways=5, active=active))
    batch = episodes(shots=1, unlabelled=2 if active else 0, num=6)
    trained_statistics(model, batch)
    model.eval()
    with torch.no_grad():
        together = model(batch)
        asked_together = model.asked
        sampler = EpisodeSampler(random_classes(), 5, 1, 2 if active else 0)
        for e in range(6):
            alone = sampler.sample(6, torch.Generator().manual_seed(0))
            keep = alone.batch == e
            single = episode_subset(alone, keep)
            assert torch.allclose(model(single), together[e:e + 1], atol=1e-5)
            if active:
                assert int(model.asked[0]) == int(asked_together[e]) - int(batch.ptr[e])
    # In training BatchNorm uses the batch's statistics: there it does depend.
    model.train()
    with torch.no_grad():
        torch.manual_seed(1)
        first = model(batch)[:1]
        torch.manual_seed(1)
        single = episode_subset(batch, batch.batch == 0)
        assert not torch.allclose(model(single), first, atol=1e-5)


def episode_subset(batch, keep):
    """One episode of a batch as a batch of its own."""
    from torch_geometric.data import Data
    from graphseq import graphs
    n = int(keep.sum())
    return Data(x=batch.x[keep], y=batch.y[keep], labelled=batch.labelled[keep], query=batch.query[keep],
                edge_index=graphs.fully_connected([n], self_loops=False), batch=torch.zeros(n, dtype=torch.long),
                ptr=torch.tensor([0, n]), target=batch.target[:1], num_nodes=n)


def test_node_features_hold_the_known_labels():
    batch = episodes(shots=2, unlabelled=1, num=2)
    for unknown, value in (("zeros", 0.0), ("uniform", 0.2)):
        model = FewShotModel(FewShotConfig(num_ways=5, unknown_label=unknown))
        labels = model.node_features(batch)[:, 64:]
        assert torch.equal(labels[batch.labelled], F.one_hot(batch.y[batch.labelled], 5).float())
        assert torch.allclose(labels[~batch.labelled], torch.full((int((~batch.labelled).sum()), 5), value))


@pytest.mark.slow
def test_active_model_asks_about_an_unlabelled_node_and_learns_whom_to_ask():
    torch.manual_seed(0)
    model = FewShotModel(FewShotConfig(num_ways=5, active=True))
    batch = episodes(shots=1, unlabelled=2, num=4)
    written = {}

    def capture(module, inputs, output):
        written["x"] = inputs[0]
    model.gnn.convs[1].register_forward_hook(capture)

    for query in ("learned", "random"):
        model.train()
        logits = model(batch, query=query)
        asked = model.asked
        assert logits.shape == (4, 5)
        assert not bool(batch.labelled[asked].any()) and not bool(batch.query[asked].any())
        assert torch.equal(batch.batch[asked], torch.arange(4))
        # The chosen node now carries its true label; the other hidden ones do not.
        slots = written["x"][:, 64:69]
        assert torch.allclose(slots[asked], F.one_hot(batch.y[asked], 5).float())
        others = ~batch.labelled & ~batch.query
        others[asked] = False
        assert float(slots[others].detach().abs().sum()) == 0.0
        model.zero_grad()
        F.cross_entropy(logits, batch.target).backward()
        head_grad = sum(float(p.grad.abs().sum()) for p in model.gnn.query_head.parameters() if p.grad is not None)
        if query == "learned":
            assert head_grad > 0  # Gumbel-softmax, straight through
        else:
            assert head_grad == 0

    model.eval()
    with torch.no_grad():
        model(batch)
        first = model.asked.clone()
        model(batch)
        assert torch.equal(model.asked, first)  # the best, not a draw
        nothing = model(batch, query="none")
        answers = torch.tensor([0, 1, -1, 2])
        model(batch, answers=answers)
        slots = written["x"][:, 64:69]
        assert torch.allclose(slots[first[0]], F.one_hot(torch.tensor(0), 5).float())
        assert float(slots[first[2]].abs().sum()) == 0.0  # no answer, nothing written
        assert nothing.shape == (4, 5)


def test_config_is_checked():
    with pytest.raises(ValueError, match="unknown embedding"):
        FewShotModel(FewShotConfig(num_ways=5, embedding="mnist"))
    with pytest.raises(ValueError, match="unknown_label"):
        FewShotModel(FewShotConfig(num_ways=5, unknown_label="ones"))


def test_omniglot_code_embedding_is_the_authors_network():
    """Written as the authors' EmbeddingOmniglot.forward, with our modules'
    weights: pooling after the first two blocks only, a 3x3 map into the
    linear layer."""
    torch.manual_seed(0)
    net = omniglot_code_embedding()
    images = torch.randn(7, 1, 28, 28)
    net.train()
    net(images)  # running statistics that differ from their initial values
    net.eval()
    convs = [m for m in net if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in net if isinstance(m, torch.nn.BatchNorm2d)]
    linear, norm_last = net[-3], net[-2]
    x = images
    for k in range(4):
        x = norms[k](convs[k](x))
        x = F.leaky_relu(F.max_pool2d(x, 2) if k < 2 else x, 0.1)
    assert x.shape == (7, 64, 3, 3)
    reference = F.leaky_relu(norm_last(linear(x.reshape(-1, 3 * 3 * 64))))
    torch.testing.assert_close(net(images), reference)


@pytest.mark.parametrize("embedding", ["omniglot", "omniglot_code", "miniimagenet"])
def test_channels_last_embedding_gives_the_same_numbers(embedding):
    """The model keeps its convolution weights channels-last (oneDNN's fast
    path); a copy in the default layout gives the same scores and gradients,
    and checkpoints move between the two."""
    torch.manual_seed(0)
    size, channels = (84, 3) if embedding == "miniimagenet" else (28, 1)
    classes = FewShotClasses(torch.randint(0, 256, (6, 3, channels, size, size), dtype=torch.uint8), list("abcdef"))
    batch = EpisodeSampler(classes, 3, 1).sample(4, torch.Generator().manual_seed(0))
    model = FewShotModel(FewShotConfig(3, embedding=embedding)).double()
    convs = [m for m in model.embedding if isinstance(m, torch.nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    plain = FewShotModel(FewShotConfig(3, embedding=embedding)).double()
    plain.embedding.to(memory_format=torch.contiguous_format)
    plain.load_state_dict(model.state_dict())
    plain_convs = [m for m in plain.embedding if isinstance(m, torch.nn.Conv2d)]
    assert not convs[1].weight.is_contiguous() and plain_convs[1].weight.is_contiguous()
    model.eval()
    plain.eval()
    batch.x = batch.x.double()
    scores, reference = model(batch), plain(batch)
    torch.testing.assert_close(scores, reference)
    scores.square().sum().backward()
    reference.square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_miniimagenet_network_shapes():
    model = FewShotModel(FewShotConfig(num_ways=5, embedding="miniimagenet", metric_ratios=[2, 2, 1, 1],
                                       metric_width=96, last_norm=False))
    images = torch.randint(0, 256, (6, 4, 3, 84, 84), dtype=torch.uint8)
    classes = FewShotClasses(images, [str(i) for i in range(6)], (0.5, 0.5, 0.5), (0.2, 0.2, 0.2))
    batch = EpisodeSampler(classes, 5, 1).sample(2, torch.Generator().manual_seed(0))
    assert model(batch).shape == (2, 5)
    assert isinstance(model.gnn.last, MetricAttentionConv)
    assert model.gnn.convs[0].hidden_channels == [192, 192, 96, 96]


@pytest.mark.parametrize("active", [False, True])
def test_evaluation_embeds_each_image_once_with_the_same_answers(active):
    from graphseq.stages.fewshot import accuracy_on, embed_images
    torch.manual_seed(0)
    classes = random_classes()
    sampler = EpisodeSampler(classes, 5, 1, 2 if active else 0)
    model = FewShotModel(FewShotConfig(5, active=active))
    trained_statistics(model, sampler.sample(4, torch.Generator().manual_seed(1)))
    model.eval()
    batch = sampler.sample(6, torch.Generator().manual_seed(2))
    table = embed_images(model, classes, torch.device("cpu"))
    assert table.shape == (12, 8, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(batch, embedding=table[batch.image[:, 0], batch.image[:, 1]]),
                                   model(batch), rtol=1e-5, atol=1e-5)
    # 40 episodes hold more images than the split's 96: the section is used,
    # and the count equals that of a loop that embeds every episode's images.
    correct, total = accuracy_on(model, sampler, 40, 7, seed=3, device=torch.device("cpu"))
    generator, expected = torch.Generator().manual_seed(3), 0
    with torch.no_grad():
        for size in (7, 7, 7, 7, 7, 5):
            batch = sampler.sample(size, generator)
            expected += int((model(batch).argmax(dim=1) == batch.target).sum())
    assert (correct, total) == (expected, 40)


@pytest.mark.parametrize("active", [False, True])
def test_shared_support_sets_embed_each_image_once(active):
    torch.manual_seed(0)
    sampler = EpisodeSampler(random_classes(per_class=8), 5, 1, 2 if active else 0)
    model = FewShotModel(FewShotConfig(5, active=active))
    batch = sampler.sample(8, torch.Generator().manual_seed(1), per_support=4)
    seen = []
    model.embedding.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0].size(0)))
    # Training: the CNN sees each distinct image once (2 support sets of 5
    # labelled and, active, 10 unlabelled images, and 8 queries; fewer where
    # two support sets share an image by chance), and every parameter gets a
    # gradient.
    model.train()
    F.cross_entropy(model(batch), batch.target).backward()
    distinct = len({tuple(i) for i in batch.image.tolist()})
    assert seen == [distinct] and distinct <= 2 * 5 * (1 + (2 if active else 0)) + 8 < batch.num_nodes
    assert all(p.grad is not None for name, p in model.named_parameters() if not name.startswith("gnn.query"))
    # Evaluation: the same scores as embedding every node's image.
    model.eval()
    plain = batch.clone()
    del plain.unique_nodes, plain.node_image
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model(plain), rtol=1e-5, atol=1e-5)
    assert seen[-2:] == [distinct, batch.num_nodes]


def test_model_refuses_episodes_of_another_number_of_ways():
    model = FewShotModel(FewShotConfig(5, embedding_dim=8, growth=4, num_layers=1)).eval()
    with pytest.raises(ValueError, match="FewShotModel is 5-way, but the episodes are 2-way"):
        model(episodes(ways=2, num=2))
    model = FewShotModel(FewShotConfig(3, embedding_dim=8, growth=4, num_layers=1)).eval()
    with pytest.raises(ValueError, match="FewShotModel is 3-way, but the episodes are 5-way"):
        model(episodes(ways=5, num=2))
    assert model(episodes(ways=3, num=2)).shape == (2, 3)


def test_active_model_refuses_answers_of_the_wrong_length():
    torch.manual_seed(0)
    model = FewShotModel(FewShotConfig(5, embedding_dim=8, growth=4, num_layers=1, active=True)).eval()
    batch = episodes(unlabelled=1, num=2)
    for answers in (torch.tensor([1]), torch.tensor([1, 2, 3]), torch.tensor([[1, 2]])):
        with pytest.raises(ValueError, match=r"FewShotModel.ask needs one answer per episode \(2\)"):
            model(batch, answers=answers)
    assert model(batch, answers=torch.tensor([1, -1])).shape == (2, 5)


def test_config_and_gnn_refuse_zero_blocks():
    with pytest.raises(ValueError, match="FewShotConfig needs num_layers >= 1.*got 0"):
        FewShotConfig(5, num_layers=0)
    with pytest.raises(ValueError, match="FewShotGNN needs num_layers >= 1.*got 0"):
        FewShotGNN(10, 5, num_layers=0)


@pytest.mark.parametrize("terminal", [True, False])
def test_the_test_episodes_bar_is_drawn_on_a_terminal_only(monkeypatch, terminal):
    # A stderr redirected to a file (`2> run.log`) would fill with the bar's \r redraws.
    from graphseq.stages.fewshot import accuracy_on
    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    sampler = EpisodeSampler(random_classes(), 5, 1)
    accuracy_on(FewShotModel(FewShotConfig(5)).eval(), sampler, 4, 2, seed=0, device=torch.device("cpu"),
                progress="test")
    assert ("test: " in stderr.getvalue()) == terminal
