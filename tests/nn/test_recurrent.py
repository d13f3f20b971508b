import pytest
import torch
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

from graphseq.graphs import chain, lengths_to_batch, reverse
from graphseq.nn import ChainGRU, ChainLSTM, ChainONLSTM, ChainRNN
from graphseq.nn.recurrent import chain_schedule, cumax

# Variable lengths, a length-1 sequence among them, not sorted.
LENGTHS = [3, 1, 5, 2, 5]
PAIRS = [(ChainRNN, torch.nn.RNN), (ChainLSTM, torch.nn.LSTM), (ChainGRU, torch.nn.GRU)]
ALL = [ChainRNN, ChainLSTM, ChainGRU, ChainONLSTM]


@pytest.fixture(autouse=True)
def one_thread():
    """These tensors are tiny: on a busy machine, waiting for a second thread
    costs far more than it saves."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def shuffled(x, edge_index, batch, generator):
    """The same graphs with the nodes stored in a random order. Row ``k`` of
    the result is node ``permutation[k]`` of the input."""
    permutation = torch.randperm(x.size(0), generator=generator)
    new_id = torch.empty_like(permutation)
    new_id[permutation] = torch.arange(x.size(0))
    return x[permutation], new_id[edge_index], batch[permutation], permutation


def packed_outputs(output, lengths):
    """torch's packed output as one row per node, sequence after sequence."""
    padded, _ = pad_packed_sequence(output, batch_first=True)
    return torch.cat([padded[i, :n] for i, n in enumerate(lengths)])


def as_tuple(state):
    return state if isinstance(state, tuple) else (state,)


def leaves(tensors):
    return tuple(t.detach().clone().requires_grad_() for t in tensors)


@pytest.mark.parametrize("ours_class,theirs_class", PAIRS)
def test_equals_torch_with_copied_weights(ours_class, theirs_class):
    """Two bidirectional layers, variable lengths, shuffled nodes and a given
    initial state: outputs, final states and the gradients with respect to
    inputs, initial states and weights all equal torch's."""
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    ours = ours_class(4, 6, num_layers=2, bidirectional=True).double()
    theirs = theirs_class(4, 6, num_layers=2, bidirectional=True).double()
    theirs.load_state_dict(ours.state_dict())

    sequences = [torch.randn(n, 4, dtype=torch.float64, generator=generator) for n in LENGTHS]
    state = [torch.randn(4, len(LENGTHS), 6, dtype=torch.float64, generator=generator)
             for _ in range(2 if ours.has_cell_state else 1)]

    x = torch.cat(sequences).requires_grad_()
    x_shuffled, edge_index, batch, permutation = shuffled(
        x, chain(LENGTHS), lengths_to_batch(LENGTHS), generator)
    our_state = leaves(state)
    out, final = ours(x_shuffled, edge_index, batch,
                      our_state if ours.has_cell_state else our_state[0])

    their_sequences, their_state = leaves(sequences), leaves(state)
    ref, ref_final = theirs(pack_sequence(list(their_sequences), enforce_sorted=False),
                            their_state if ours.has_cell_state else their_state[0])
    ref = packed_outputs(ref, LENGTHS)

    assert out.shape == (sum(LENGTHS), 12)
    assert torch.allclose(out, ref[permutation], atol=1e-10)
    for got, expected in zip(as_tuple(final), as_tuple(ref_final)):
        assert got.shape == (4, len(LENGTHS), 6)
        assert torch.allclose(got, expected, atol=1e-10)

    weights = torch.randn(ref.shape, dtype=torch.float64, generator=generator)
    ((out * weights[permutation]).sum() + sum(s.square().sum() for s in as_tuple(final))).backward()
    ((ref * weights).sum() + sum(s.square().sum() for s in as_tuple(ref_final))).backward()
    assert torch.allclose(x.grad, torch.cat([s.grad for s in their_sequences]), atol=1e-10)
    for got, expected in zip(our_state, their_state):
        assert torch.allclose(got.grad, expected.grad, atol=1e-10)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-10), name


@pytest.mark.parametrize("ours_class,theirs_class", PAIRS)
def test_equals_torch_in_float32_with_zero_initial_state(ours_class, theirs_class):
    torch.manual_seed(1)
    ours = ours_class(3, 5, bias=False)
    theirs = theirs_class(3, 5, bias=False)
    theirs.load_state_dict(ours.state_dict())
    sequences = [torch.randn(n, 3) for n in LENGTHS]
    out, final = ours(torch.cat(sequences), chain(LENGTHS), lengths_to_batch(LENGTHS))
    ref, ref_final = theirs(pack_sequence(sequences, enforce_sorted=False))
    assert torch.allclose(out, packed_outputs(ref, LENGTHS), atol=1e-5)
    for got, expected in zip(as_tuple(final), as_tuple(ref_final)):
        assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("ours_class,theirs_class", PAIRS)
def test_state_dict_is_torchs(ours_class, theirs_class):
    ours = ours_class(7, 3, num_layers=3, bidirectional=True)
    theirs = theirs_class(7, 3, num_layers=3, bidirectional=True)
    assert {k: v.shape for k, v in ours.state_dict().items()} == \
        {k: v.shape for k, v in theirs.state_dict().items()}
    ours.load_state_dict(theirs.state_dict())  # and loads torch's weights


def test_one_chain_without_batch_equals_an_unbatched_sequence():
    torch.manual_seed(2)
    ours = ChainLSTM(3, 4)
    theirs = torch.nn.LSTM(3, 4)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(6, 3)
    out, (h_n, c_n) = ours(x, chain(6))
    ref, (ref_h, ref_c) = theirs(x)
    assert torch.allclose(out, ref, atol=1e-6)
    assert h_n.shape == (1, 1, 4)
    assert torch.allclose(h_n[:, 0], ref_h, atol=1e-6)
    assert torch.allclose(c_n[:, 0], ref_c, atol=1e-6)


@pytest.mark.parametrize("layer_class", ALL)
def test_shuffled_node_order_gives_the_same_outputs(layer_class):
    generator = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    layer = layer_class(4, 6, num_layers=2, bidirectional=True)
    x, edge_index, batch = torch.randn(sum(LENGTHS), 4), chain(LENGTHS), lengths_to_batch(LENGTHS)
    out, final = layer(x, edge_index, batch)
    out_shuffled, final_shuffled = layer(*shuffled(x, edge_index, batch, generator)[:3])
    permutation = shuffled(x, edge_index, batch, torch.Generator().manual_seed(3))[3]
    assert torch.allclose(out_shuffled, out[permutation], atol=1e-6)
    for got, expected in zip(as_tuple(final_shuffled), as_tuple(final)):
        assert torch.allclose(got, expected, atol=1e-6)


def test_graphs_are_ordered_by_batch_not_by_memory():
    """Graph 0 stored last: its final state is still row 0."""
    torch.manual_seed(4)
    layer = ChainGRU(2, 3)
    a, b = torch.randn(2, 2), torch.randn(3, 2)
    _, h_ab = layer(torch.cat([a, b]), chain([2, 3]), torch.tensor([0, 0, 1, 1, 1]))
    _, h_ba = layer(torch.cat([b, a]), chain([3, 2]), torch.tensor([1, 1, 1, 0, 0]))
    assert torch.allclose(h_ab, h_ba, atol=1e-6)


def test_each_output_is_the_cell_applied_to_the_message_from_the_predecessor():
    """The MessagePassing view: propagating the outputs along the chain edges
    gives every node its predecessor's state, and the cell of that message
    and the node's input is the node's output."""
    torch.manual_seed(5)
    layer = ChainRNN(3, 4)
    x, edge_index = torch.randn(9, 3), chain([4, 5])
    out, _ = layer(x, edge_index, lengths_to_batch([4, 5]))
    message = layer.predecessor_states(out, edge_index)  # zeros where a chain starts
    expected = torch.tanh(x @ layer.weight_ih_l0.t() + layer.bias_ih_l0
                          + message @ layer.weight_hh_l0.t() + layer.bias_hh_l0)
    assert torch.allclose(out, expected, atol=1e-6)


def test_bidirectional_second_half_runs_along_the_reversed_chain():
    torch.manual_seed(6)
    layer = ChainLSTM(3, 4, bidirectional=True)
    forward_only = ChainLSTM(3, 4)
    forward_only.load_state_dict({k.replace("_reverse", ""): v for k, v in layer.state_dict().items()
                                  if k.endswith("_reverse")})
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    out, (h_n, _) = layer(x, edge_index, batch)
    backward, (h_back, _) = forward_only(x, reverse(edge_index), batch)
    assert torch.allclose(out[:, 4:], backward, atol=1e-6)
    assert torch.allclose(h_n[1], h_back[0], atol=1e-6)
    assert torch.allclose(h_n[1], out[[0, 3], 4:], atol=1e-6)  # the chain starts


def test_dropout_acts_between_layers_only_in_training():
    torch.manual_seed(7)
    layer = ChainGRU(3, 4, num_layers=2, dropout=0.5)
    plain = ChainGRU(3, 4, num_layers=2)
    plain.load_state_dict(layer.state_dict())
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    assert torch.allclose(layer.eval()(x, edge_index, batch)[0], plain(x, edge_index, batch)[0])
    assert not torch.allclose(layer.train()(x, edge_index, batch)[0], plain(x, edge_index, batch)[0])
    one_layer = ChainGRU(3, 4, dropout=0.5).train()
    assert torch.equal(one_layer(x, edge_index, batch)[0], one_layer(x, edge_index, batch)[0])


@pytest.mark.parametrize("layer_class", ALL)
def test_learned_initial_state_has_per_layer_rows_and_gets_gradients(layer_class):
    torch.manual_seed(8)
    layer = layer_class(3, 4, num_layers=2, bidirectional=True, learn_initial_state=True)
    assert layer.initial_h.shape == (4, 1, 4)
    assert "initial_h" in layer.state_dict()
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    out, final = layer(x, edge_index, batch)
    for tensor in as_tuple(final):
        assert tensor.shape == (4, 2, 4)
    with torch.no_grad():  # A learned state other than zeros changes the outputs.
        layer.initial_h.fill_(0.5)
    out_moved, _ = layer(x, edge_index, batch)
    assert not torch.allclose(out, out_moved)
    out_moved.sum().backward()
    assert layer.initial_h.grad is not None and layer.initial_h.grad.abs().sum() > 0
    if layer.has_cell_state:
        assert layer.initial_c.shape == (4, 1, 4)
        assert layer.initial_c.grad.abs().sum() > 0


def test_given_state_overrides_the_learned_one():
    layer = ChainRNN(2, 3, learn_initial_state=True)
    with torch.no_grad():
        layer.initial_h.fill_(1.0)
    x, edge_index = torch.randn(3, 2), chain(3)
    zeros = ChainRNN(2, 3)
    zeros.load_state_dict({k: v for k, v in layer.state_dict().items() if k != "initial_h"})
    assert torch.allclose(layer(x, edge_index, state=torch.zeros(1, 1, 3))[0], zeros(x, edge_index)[0])


def test_a_graph_without_nodes_keeps_its_initial_state():
    layer = ChainLSTM(2, 3)
    h_0, c_0 = torch.randn(1, 3, 3), torch.randn(1, 3, 3)
    _, (h_n, c_n) = layer(torch.randn(4, 2), chain([2, 2]), torch.tensor([0, 0, 2, 2]), (h_0, c_0))
    assert torch.equal(h_n[:, 1], h_0[:, 1]) and torch.equal(c_n[:, 1], c_0[:, 1])
    assert not torch.allclose(h_n[:, 0], h_0[:, 0])


def test_step_order_is_packed_layout():
    """Chains longest first, step after step: the predecessors of a step are
    the first rows of the previous step."""
    schedule = chain_schedule(chain([2, 3, 1]), 6, lengths_to_batch([2, 3, 1]))
    assert schedule.sizes == [3, 2, 1]
    assert schedule.orders[0].tolist() == [2, 0, 5, 3, 1, 4]
    assert schedule.orders[1].tolist() == [4, 1, 5, 3, 0, 2]
    assert schedule.chain_graph.tolist() == [1, 0, 2]


@pytest.mark.parametrize("build,match", [
    (lambda l: l(torch.randn(5), chain(5)), r"x of shape \[num_nodes, 3\], got \[5\]"),
    (lambda l: l(torch.randn(5, 2), chain(5)), r"x of shape \[num_nodes, 3\], got \[5, 2\]"),
    (lambda l: l(torch.randn(5, 3), chain(5).t()), r"edge_index of shape \[2, num_edges\]"),
    (lambda l: l(torch.randn(5, 3), chain(6)), "refers to node 5"),
    (lambda l: l(torch.randn(5, 3), chain(5), torch.zeros(4, dtype=torch.long)), r"batch of shape \[5\]"),
    (lambda l: l(torch.randn(5, 3), chain(5), state=torch.zeros(1, 1, 4)),
     r"expects state as a pair"),
    (lambda l: l(torch.randn(5, 3), chain(5), state=(torch.zeros(2, 1, 4), torch.zeros(2, 1, 4))),
     r"h_0 of shape \[1, 1, 4\]"),
    (lambda l: l(torch.randn(5, 3), chain(5), state=(torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))),
     r"h_0 of shape \[1, 1, 4\]"),  # no batch: one graph
    (lambda l: l(torch.randn(2, 3), chain([1, 1]), torch.tensor([0, 2]),
                 (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))), "batch holds 3 graphs"),
    (lambda l: l(torch.randn(5, 3), chain([2, 3])), "graph 0 holds 2 chains.*pass `batch`"),
    (lambda l: l(torch.randn(3, 3), torch.tensor([[0, 1], [2, 2]])), "node 2 has 2 predecessors"),
    (lambda l: l(torch.randn(3, 3), torch.tensor([[0, 0], [1, 2]])), "node 0 has 2 successors"),
    (lambda l: l(torch.randn(3, 3), torch.tensor([[0, 1, 2], [1, 2, 0]])), "cycle"),
    (lambda l: l(torch.randn(4, 3), chain(4), torch.tensor([0, 0, 1, 1])), "joins two graphs"),
])
def test_bad_inputs_raise_clear_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build(ChainLSTM(3, 4))


def test_repr():
    assert repr(ChainLSTM(64, 256)) == "ChainLSTM(64, 256)"
    assert repr(ChainGRU(3, 4, num_layers=2, dropout=0.1, bidirectional=True)) == \
        "ChainGRU(3, 4, num_layers=2, dropout=0.1, bidirectional=True)"
    assert repr(ChainONLSTM(3, 8, chunk_size=4)) == "ChainONLSTM(3, 8, chunk_size=4)"


def test_cumax_is_non_decreasing_in_the_unit_interval_and_ends_at_one():
    values = cumax(torch.randn(50, 10) * 5)
    assert (values.diff(dim=-1) >= 0).all()
    assert ((values >= 0) & (values <= 1 + 1e-6)).all()
    assert torch.allclose(values[:, -1], torch.ones(50))


def onlstm_step_from_the_paper(x, h, c, layer, chunk_size):
    """One ON-LSTM step written from Eqs. (9)-(14) of Shen et al. (2019),
    one neuron-chunk at a time, no shared code with the layer."""
    hidden = h.size(1)
    chunks = hidden // chunk_size
    pre = x @ layer.weight_ih_l0.t() + layer.bias_ih_l0 + h @ layer.weight_hh_l0.t() + layer.bias_hh_l0
    softmax = torch.softmax
    master_f = torch.cumsum(softmax(pre[:, :chunks], -1), -1)
    master_i = 1 - torch.cumsum(softmax(pre[:, chunks:2 * chunks], -1), -1)
    gates = pre[:, 2 * chunks:]
    i = torch.sigmoid(gates[:, :hidden])
    f = torch.sigmoid(gates[:, hidden:2 * hidden])
    candidate = torch.tanh(gates[:, 2 * hidden:3 * hidden])
    o = torch.sigmoid(gates[:, 3 * hidden:])
    c_new = torch.empty_like(c)
    for neuron in range(hidden):
        k = neuron // chunk_size
        omega = master_f[:, k] * master_i[:, k]
        f_hat = f[:, neuron] * omega + (master_f[:, k] - omega)
        i_hat = i[:, neuron] * omega + (master_i[:, k] - omega)
        c_new[:, neuron] = f_hat * c[:, neuron] + i_hat * candidate[:, neuron]
    distance = chunks - master_f.sum(-1)
    return o * torch.tanh(c_new), c_new, distance


def test_onlstm_step_equals_the_papers_equations():
    torch.manual_seed(9)
    layer = ChainONLSTM(3, 6, chunk_size=2).double()
    assert layer.weight_ih_l0.shape == (4 * 6 + 2 * 3, 3)
    x = torch.randn(4, 3, dtype=torch.float64)  # four chains of one node each
    h_0, c_0 = torch.randn(1, 4, 6, dtype=torch.float64), torch.randn(1, 4, 6, dtype=torch.float64)
    out, (h_n, c_n) = layer(x, torch.empty(2, 0, dtype=torch.long), torch.arange(4), (h_0, c_0))
    h, c, distance = onlstm_step_from_the_paper(x, h_0[0], c_0[0], layer, 2)
    assert torch.allclose(out, h) and torch.allclose(h_n[0], h) and torch.allclose(c_n[0], c)
    assert layer.last_distances.shape == (4, 1)
    assert torch.allclose(layer.last_distances[:, 0], distance)


def test_onlstm_runs_the_paper_step_along_a_chain():
    torch.manual_seed(10)
    layer = ChainONLSTM(3, 4, chunk_size=2)
    x = torch.randn(3, 3)
    out, (h_n, c_n) = layer(x, chain(3))
    h, c = torch.zeros(1, 4), torch.zeros(1, 4)
    for t in range(3):
        h, c, _ = onlstm_step_from_the_paper(x[t:t + 1], h, c, layer, 2)
        assert torch.allclose(out[t], h[0], atol=1e-6)
    assert torch.allclose(c_n[0], c, atol=1e-6)


def test_onlstm_distances_per_node_layer_and_direction():
    layer = ChainONLSTM(3, 8, num_layers=2, bidirectional=True, chunk_size=2)
    layer(torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4]))
    distances = layer.last_distances
    assert distances.shape == (7, 4) and not distances.requires_grad
    assert ((distances >= 0) & (distances <= 4)).all()


def test_onlstm_chunk_size_must_divide_hidden_size():
    with pytest.raises(ValueError, match="chunk_size to divide hidden_size"):
        ChainONLSTM(3, 6, chunk_size=4)
