import re

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

from graphseq.graphs import chain, lengths_to_batch, reverse
from graphseq.nn import ChainGRU, ChainLSTM, ChainONLSTM, ChainRecurrence, ChainRNN
from graphseq.nn.chain_schedule import chain_schedule
from graphseq.nn.recurrent_cells import cumax

# Variable lengths, a length-1 sequence among them, not sorted.
LENGTHS = [3, 1, 5, 2, 5]
# Ours, torch's, and the options both take: every cell and option with a torch twin.
PAIRS = [
    (ChainRNN, torch.nn.RNN, {}),
    (ChainRNN, torch.nn.RNN, {"nonlinearity": "relu"}),
    (ChainLSTM, torch.nn.LSTM, {}),
    (ChainLSTM, torch.nn.LSTM, {"proj_size": 4}),
    (ChainGRU, torch.nn.GRU, {}),
]
PAIR_IDS = ["rnn", "rnn-relu", "lstm", "lstm-proj", "gru"]
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


def initial_state(layer, num_graphs, generator, dtype=torch.float64):
    """A random initial state of the shapes ``layer`` takes (h, then c)."""
    rows = layer.num_layers * layer.num_directions
    widths = [layer.output_size()] + ([layer.hidden_size] if layer.has_cell_state else [])
    return [torch.randn(rows, num_graphs, width, dtype=dtype, generator=generator) for width in widths]


@pytest.mark.parametrize("ours_class,theirs_class,options", PAIRS, ids=PAIR_IDS)
def test_equals_torch_with_copied_weights(ours_class, theirs_class, options):
    """Two bidirectional layers, variable lengths, shuffled nodes and a given
    initial state: outputs, final states and the gradients with respect to
    inputs, initial states and weights all equal torch's."""
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    ours = ours_class(4, 6, num_layers=2, bidirectional=True, **options).double()
    theirs = theirs_class(4, 6, num_layers=2, bidirectional=True, **options).double()
    theirs.load_state_dict(ours.state_dict())
    width = 2 * ours.output_size()

    sequences = [torch.randn(n, 4, dtype=torch.float64, generator=generator) for n in LENGTHS]
    state = initial_state(ours, len(LENGTHS), generator)

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

    assert out.shape == (sum(LENGTHS), width)
    assert torch.allclose(out, ref[permutation], atol=1e-10)
    for got, expected in zip(as_tuple(final), as_tuple(ref_final)):
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, atol=1e-10)

    weights = torch.randn(ref.shape, dtype=torch.float64, generator=generator)
    ((out * weights[permutation]).sum() + sum(s.square().sum() for s in as_tuple(final))).backward()
    ((ref * weights).sum() + sum(s.square().sum() for s in as_tuple(ref_final))).backward()
    assert torch.allclose(x.grad, torch.cat([s.grad for s in their_sequences]), atol=1e-10)
    for got, expected in zip(our_state, their_state):
        assert torch.allclose(got.grad, expected.grad, atol=1e-10)
    theirs_by_name = dict(theirs.named_parameters())
    for name, parameter in ours.named_parameters():
        assert torch.allclose(parameter.grad, theirs_by_name[name].grad, atol=1e-10), name


@pytest.mark.parametrize("ours_class,theirs_class,options", PAIRS, ids=PAIR_IDS)
def test_equals_torch_in_float32_with_zero_initial_state(ours_class, theirs_class, options):
    torch.manual_seed(1)
    ours = ours_class(3, 5, bias=False, **options)
    theirs = theirs_class(3, 5, bias=False, **options)
    theirs.load_state_dict(ours.state_dict())
    sequences = [torch.randn(n, 3) for n in LENGTHS]
    out, final = ours(torch.cat(sequences), chain(LENGTHS), lengths_to_batch(LENGTHS))
    ref, ref_final = theirs(pack_sequence(sequences, enforce_sorted=False))
    assert torch.allclose(out, packed_outputs(ref, LENGTHS), atol=1e-5)
    for got, expected in zip(as_tuple(final), as_tuple(ref_final)):
        assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("ours_class,theirs_class,options", PAIRS, ids=PAIR_IDS)
def test_state_dict_is_torchs(ours_class, theirs_class, options):
    ours = ours_class(7, 5, num_layers=3, bidirectional=True, **options)
    theirs = theirs_class(7, 5, num_layers=3, bidirectional=True, **options)
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == \
        [(k, v.shape) for k, v in theirs.state_dict().items()]
    ours.load_state_dict(theirs.state_dict())  # and loads torch's weights


def test_relu_rnn_differs_from_tanh_with_the_same_weights():
    """nn.RNN's relu and tanh state_dicts look alike; the option is what
    keeps a relu network's weights from running through tanh."""
    torch.manual_seed(2)
    relu, tanh = ChainRNN(3, 4, nonlinearity="relu"), ChainRNN(3, 4)
    tanh.load_state_dict(relu.state_dict())
    x = torch.randn(6, 3) * 3
    out, _ = relu(x, chain(6))
    assert (out >= 0).all()
    assert not torch.allclose(out, tanh(x, chain(6))[0])
    assert repr(relu) == "ChainRNN(3, 4, nonlinearity='relu')"


@pytest.mark.parametrize("layer_class,options", [(ChainLSTM, {}), (ChainLSTM, {"proj_size": 3}),
                                                  (ChainGRU, {}), (ChainGRU, {"bias": False})],
                         ids=["lstm", "lstm-proj", "gru", "gru-no-bias"])
def test_fused_step_equals_the_op_by_op_cell(layer_class, options):
    """The hand-fused steps of ChainLSTM and ChainGRU (the default) give the
    numbers of the op-by-op cell they replace (to rounding), and the same
    gradients, W_hh's included."""
    generator = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    fused = layer_class(4, 5, num_layers=2, bidirectional=True, **options).double()
    plain = layer_class(4, 5, num_layers=2, bidirectional=True, **options).double()
    plain.load_state_dict(fused.state_dict())
    plain.fused_step = None
    x = torch.randn(sum(LENGTHS), 4, dtype=torch.float64, generator=generator)
    edge_index, batch = chain(LENGTHS), lengths_to_batch(LENGTHS)
    results = []
    for layer in (fused, plain):
        inputs = x.clone().requires_grad_()
        out, final = layer(inputs, edge_index, batch)
        (out.sin().sum() + sum(s.square().sum() for s in as_tuple(final))).backward()
        results.append([out, *as_tuple(final), inputs.grad] + [p.grad for p in layer.parameters()])
    for got, expected in zip(*results):
        assert torch.allclose(got, expected, atol=1e-12)


class DoubledLSTM(ChainLSTM):
    """A subclass that rewrites the cell it inherits a fused step for."""

    def cell(self, inputs, state, weights):
        new, extra = super().cell(inputs, state, weights)
        return 2 * new, extra


def test_a_subclass_that_rewrites_the_cell_runs_its_own_not_the_fused_step():
    torch.manual_seed(5)
    layer = DoubledLSTM(3, 4)
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    out, _ = layer(x, edge_index, batch)
    layer.fused_step = None  # op by op, its own cell for sure
    assert torch.allclose(out, layer(x, edge_index, batch)[0], atol=1e-6)
    plain = ChainLSTM(3, 4)
    plain.load_state_dict(layer.state_dict())
    assert not torch.allclose(out, plain(x, edge_index, batch)[0], atol=1e-3)


def test_fused_lstm_gradients_repeat_with_retain_graph():
    """W_hh's gradient comes in one product after the steps; a second
    backward through the same graph must give it again, not twice over."""
    torch.manual_seed(4)
    layer = ChainLSTM(3, 4).double()
    x = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    out, _ = layer(x, chain([3, 4]), lengths_to_batch([3, 4]))
    loss = out.square().sum()
    first = torch.autograd.grad(loss, layer.weight_hh_l0, retain_graph=True)[0]
    torch.autograd.grad(loss, x, retain_graph=True)  # a backward that skips the weights
    second = torch.autograd.grad(loss, layer.weight_hh_l0)[0]
    assert torch.equal(first, second)



def onednn_products(run):
    """How many of oneDNN's matrix products ``run()`` calls."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run()
    return sum(event.count for event in profile.key_averages() if event.key == "mkldnn::_linear_pointwise")


@pytest.mark.parametrize("ours_class,theirs_class", [(ChainLSTM, torch.nn.LSTM), (ChainGRU, torch.nn.GRU)],
                         ids=["lstm", "gru"])
def test_large_float32_steps_multiply_through_onednn_and_equal_torch(ours_class, theirs_class):
    """Steps wide enough (here 48 chains of hidden size 128) multiply by
    W_hh through oneDNN, forward and backward, as torch.nn.LSTM does on a
    CPU: faster than torch.mm there, and the same numbers as torch's layer
    to float32 rounding, gradients included. With torch.backends.mkldnn
    disabled they go through torch.mm."""
    from graphseq.nn.compat import onednn_linear as _onednn_linear
    if _onednn_linear() is None:
        pytest.skip("this torch build has no oneDNN")
    torch.manual_seed(21)
    lengths = [3 + k % 4 for k in range(48)]
    ours = ours_class(8, 128)
    theirs = theirs_class(8, 128)
    theirs.load_state_dict(ours.state_dict())
    sequences = [torch.randn(n, 8) for n in lengths]
    edge_index, batch = chain(lengths), lengths_to_batch(lengths)
    results = []

    def run():
        ours.zero_grad()
        inputs = torch.cat(sequences).requires_grad_()
        out, final = ours(inputs, edge_index, batch)
        (out.sin().sum() + as_tuple(final)[0].square().sum()).backward()
        results.append([out, *as_tuple(final), inputs.grad] + [p.grad for p in ours.parameters()])

    assert onednn_products(run) > 0
    with torch.backends.mkldnn.flags(enabled=False):
        assert onednn_products(run) == 0
    their_sequences = leaves(sequences)
    out, final = theirs(pack_sequence(their_sequences, enforce_sorted=False))
    (packed_outputs(out, lengths).sin().sum() + as_tuple(final)[0].square().sum()).backward()
    expected = [packed_outputs(out, lengths), *as_tuple(final), torch.cat([s.grad for s in their_sequences])] \
        + [p.grad for p in theirs.parameters()]
    for fast, plain, reference in zip(*results, expected):
        assert torch.allclose(fast, reference, atol=1e-4) and torch.allclose(fast, plain, atol=1e-4)


def test_onednn_products_keep_to_the_layouts_it_runs_fast():
    """A transposed left factor (oneDNN's reference kernel: a thousand times
    slower) and products under autograd go through torch.mm; the numbers
    are the same to rounding either way."""
    from graphseq.nn.compat import onednn_linear as _onednn_linear
    from graphseq.nn.fused_recurrent import _matmul
    if _onednn_linear() is None:
        pytest.skip("this torch build has no oneDNN")
    torch.manual_seed(22)
    a, b, add = torch.randn(64, 256), torch.randn(256, 256), torch.randn(256)
    transposed = a.t().contiguous().t()
    with torch.no_grad():
        assert onednn_products(lambda: _matmul(a, b, add)) == 1
        assert onednn_products(lambda: _matmul(a, b.t().contiguous().t())) == 1  # weight stored either way
        assert onednn_products(lambda: _matmul(transposed, b)) == 0
        assert torch.allclose(_matmul(a, b, add), torch.addmm(add, a, b), atol=1e-4)
        assert torch.allclose(_matmul(transposed, b), a.mm(b), atol=1e-4)
    assert onednn_products(lambda: _matmul(a, b)) == 0

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


@pytest.mark.parametrize("layer_class", ALL)
def test_hooks_see_every_message_along_its_edge(layer_class):
    """Each step runs through propagate: a message hook sees one message
    per edge, layer and direction, and each is the whole state of the edge's
    source (h, then c for the LSTMs), as the propagate hook's edge ids tell."""
    torch.manual_seed(5)
    layer = layer_class(3, 4)
    x, edge_index, batch = torch.randn(9, 3), chain([4, 5]), lengths_to_batch([4, 5])
    messages, aggregated, edge_ids = [], [], []
    layer.register_message_forward_hook(lambda module, inputs, out: messages.append(out))
    layer.register_aggregate_forward_hook(lambda module, inputs, out: aggregated.append(out))
    layer.register_propagate_forward_hook(
        lambda module, inputs, out: edge_ids.append(inputs[2]["edge_id"]))
    out, _ = layer(x, edge_index, batch)
    messages, aggregated, edge_ids = torch.cat(messages), torch.cat(aggregated), torch.cat(edge_ids)
    assert messages.shape == (edge_index.size(1), layer.state_size())
    assert sorted(edge_ids.tolist()) == list(range(edge_index.size(1)))
    assert torch.equal(aggregated, messages)  # one message per node: the sum is the message
    assert torch.allclose(messages[:, :4], out[edge_index[0, edge_ids]])


def test_each_output_is_the_cell_applied_to_the_message_from_its_predecessor():
    """The per-node equation of the RNN with the messages a hook saw."""
    torch.manual_seed(5)
    layer = ChainRNN(3, 4)
    x, edge_index = torch.randn(9, 3), chain([4, 5])
    received = torch.zeros(9, 4)  # zeros where a chain starts

    def keep(module, inputs, out):  # (a hook that returns nothing changes nothing)
        received[edge_index[1, inputs[2]["edge_id"]]] = out.detach()

    layer.register_propagate_forward_hook(keep)
    out, _ = layer(x, edge_index, lengths_to_batch([4, 5]))
    expected = torch.tanh(x @ layer.weight_ih_l0.t() + layer.bias_ih_l0
                          + received @ layer.weight_hh_l0.t() + layer.bias_hh_l0)
    assert torch.allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("layer_class", ALL)
def test_a_hook_that_changes_messages_changes_the_outputs(layer_class):
    """Messages are what the cells read: a message hook returning zeros
    makes every node start afresh from a zero state."""
    torch.manual_seed(6)
    layer = layer_class(3, 4)
    x, edge_index = torch.randn(5, 3), chain(5)
    layer.register_message_forward_hook(lambda module, inputs, out: torch.zeros_like(out))
    out, _ = layer(x, edge_index)
    alone, _ = layer(x, torch.empty(2, 0, dtype=torch.long), torch.arange(5))  # five chains of one node
    assert torch.allclose(out, alone, atol=1e-6)


def test_an_explainer_mask_cuts_and_keeps_edges_in_the_users_edge_order():
    """PyG's explainers scale each message by the mask of its edge: a mask
    near one keeps the outputs, a mask near zero on one edge cuts the chain
    there, and the mask gets gradients."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    torch.manual_seed(7)
    layer = ChainLSTM(3, 4, bidirectional=True)
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    edge_index = edge_index[:, [4, 0, 2, 3, 1]]  # the user's edge order is any order
    out, _ = layer(x, edge_index, batch)

    mask = torch.full((5,), 30.0, requires_grad=True)  # sigmoid(30) is 1 in float32
    set_masks(layer, mask, edge_index, apply_sigmoid=True)
    kept, _ = layer(x, edge_index, batch)
    assert torch.allclose(kept, out, atol=1e-6)
    kept.sum().backward()
    assert mask.grad is not None

    cut = edge_index[:, 2].tolist()  # the edge 3 -> 4 of the second chain
    with torch.no_grad():
        mask[2] = -30.0
    cut_out, _ = layer(x, edge_index, batch)
    clear_masks(layer)
    keep = torch.ones(5, dtype=torch.bool)
    keep[2] = False
    apart, _ = layer(x, edge_index[:, keep], torch.tensor([0, 0, 0, 1, 2, 2, 2]))
    assert cut == [3, 4]
    assert torch.allclose(cut_out, apart, atol=1e-6)


def test_gnn_explainer_runs_on_a_chain_model():
    from torch_geometric.explain import Explainer, GNNExplainer

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = ChainGRU(3, 4)
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x, edge_index):
            return self.head(self.rnn(x, edge_index)[0])

    torch.manual_seed(8)
    explainer = Explainer(Tagger(), algorithm=GNNExplainer(epochs=3), explanation_type="model",
                          node_mask_type=None, edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node",
                                            return_type="raw"))
    x, edge_index = torch.randn(6, 3), chain(6)
    explanation = explainer(x, edge_index, index=4)
    mask = explanation.edge_mask
    assert mask.shape == (5,)
    # Node 4 hears only from the nodes before it: edges 4 -> 5 is not in its past.
    assert mask[4] == 0 and (mask[:4] > 0).all()


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
    with pytest.warns(UserWarning, match="has no effect"):
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


def test_learned_initial_state_with_a_projection_has_proj_size_columns():
    layer = ChainLSTM(3, 5, proj_size=2, learn_initial_state=True)
    assert layer.initial_h.shape == (1, 1, 2) and layer.initial_c.shape == (1, 1, 5)
    out, (h_n, c_n) = layer(torch.randn(4, 3), chain(4))
    assert out.shape == (4, 2) and h_n.shape == (1, 1, 2) and c_n.shape == (1, 1, 5)


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


@pytest.mark.parametrize("layer_class", ALL)
def test_no_nodes_give_empty_outputs_that_stay_in_the_graph(layer_class):
    layer = layer_class(3, 4, num_layers=2, bidirectional=True)
    x = torch.randn(0, 3, requires_grad=True)
    out, final = layer(x, torch.empty(2, 0, dtype=torch.long))
    assert out.shape == (0, 8) and out.grad_fn is not None
    for tensor in as_tuple(final):
        assert tensor.shape == (4, 1, 4)
    out.sum().backward()
    assert x.grad.shape == (0, 3)


def test_step_order_is_packed_layout():
    """Chains longest first, step after step: the predecessors of a step are
    the first rows of the previous step."""
    schedule = chain_schedule(chain([2, 3, 1]), 6, lengths_to_batch([2, 3, 1]))
    assert schedule.sizes == [3, 2, 1]
    assert schedule.orders[0].tolist() == [2, 0, 5, 3, 1, 4]
    assert schedule.orders[1].tolist() == [4, 1, 5, 3, 0, 2]
    assert schedule.chain_graph.tolist() == [1, 0, 2]
    assert [ids.tolist() for ids in schedule.edge_ids[0]] == [[1, 0], [2]]  # into nodes 3, 1; 4
    assert [ids.tolist() for ids in schedule.edge_ids[1]] == [[2, 0], [1]]  # out of nodes 3, 0; 2
    assert [edges.tolist() for edges in schedule.step_edges] == [[[0, 1], [0, 1]], [[0], [0]]]


def test_a_given_schedule_gives_the_same_results_and_is_checked():
    torch.manual_seed(9)
    layer = ChainLSTM(3, 4)
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    schedule = chain_schedule(edge_index, 7, batch)
    out, (h_n, _) = layer(x, edge_index, batch, schedule=schedule)
    ref, (ref_h, _) = layer(x, edge_index, batch)
    assert torch.equal(out, ref) and torch.equal(h_n, ref_h)
    with pytest.raises(ValueError, match="schedule is for 7 nodes and 5 edges, but x has 6 nodes"):
        layer(x[:6], edge_index[:, :4], batch[:6], schedule=schedule)
    with pytest.raises(TypeError, match="expects schedule from graphseq.nn.chain_schedule"):
        layer(x, edge_index, batch, schedule=[3, 2])
    # A schedule made on one device and given with inputs on another (meta stands in for CUDA).
    with pytest.raises(ValueError, match=r"ChainLSTM: the schedule is on meta, but x is on cpu; move it with "
                                         r"schedule\.to\(x\.device\)"):
        layer(x, edge_index, batch, schedule=schedule.to("meta"))
    # Other chains of the same sizes (lengths 4, 3 instead of 3, 4) would give other numbers silently.
    with pytest.raises(ValueError, match="the schedule was made for other chains"):
        layer(x, chain([4, 3]), lengths_to_batch([4, 3]), schedule=schedule)
    one = chain_schedule(chain(7), 7)  # batch None is one graph, as all zeros
    assert torch.equal(layer(x, chain(7), torch.zeros(7, dtype=torch.long), schedule=one)[0], layer(x, chain(7))[0])


def test_a_given_schedule_checks_edge_index_and_batch_as_without_one():
    """With a schedule too, what is not an edge_index or a batch is named
    (not an AttributeError from deep inside the reuse check)."""
    layer = ChainLSTM(3, 4)
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    schedule = chain_schedule(edge_index, 7, batch)
    for given, match in ((edge_index.tolist(), "ChainLSTM expects edge_index to be a tensor, got list"),
                         (None, "ChainLSTM expects edge_index to be a tensor, got NoneType")):
        with pytest.raises(TypeError, match=match):
            layer(x, given, batch, schedule=schedule)
    with pytest.raises(TypeError, match="ChainLSTM expects batch to be a tensor, got list"):
        layer(x, edge_index, batch.tolist(), schedule=schedule)
    with pytest.raises(ValueError, match=r"ChainLSTM expects edge_index of shape \[2, num_edges\], got \[5, 2\]"):
        layer(x, edge_index.t(), batch, schedule=schedule)
    with pytest.raises(ValueError, match=r"ChainLSTM expects batch of shape \[7\]"):
        layer(x, edge_index, batch[:6], schedule=schedule)


def test_a_schedule_for_the_same_edges_in_another_order_says_so():
    """The edge ids a schedule hands to hooks and explainers are those of
    the edge_index it was made for, so the same edges reordered are refused,
    by what differs."""
    layer = ChainGRU(3, 4)
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    schedule = chain_schedule(edge_index, 7, batch)
    with pytest.raises(ValueError, match=r"ChainGRU: the schedule was made for the same edges in another order "
                                         r"\(edge ids differ\); make a schedule for this edge_index"):
        layer(x, edge_index[:, [3, 0, 2, 1, 4]], batch, schedule=schedule)
    with pytest.raises(ValueError, match="the schedule was made for other chains"):  # same edges, other graphs
        layer(x, edge_index[:, [3, 0, 2, 1, 4]], lengths_to_batch([2, 5]), schedule=schedule)


def test_a_schedule_refuses_its_chains_edited_in_place():
    """The schedule keeps the caller's tensors, not copies: an in-place edit
    would give the old chains' numbers silently."""
    layer = ChainGRU(3, 4)
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    schedule = chain_schedule(edge_index, 7, batch)
    assert layer(x, edge_index, batch, schedule=schedule.to("cpu"))[0].shape == (7, 4)
    edge_index.copy_(chain([4, 3]))
    with pytest.raises(ValueError, match="ChainGRU: edge_index was edited in place after its schedule was made"):
        layer(x, edge_index, batch, schedule=schedule)
    batch.copy_(lengths_to_batch([4, 3]))
    schedule = chain_schedule(edge_index, 7, batch)
    batch.copy_(lengths_to_batch([3, 4]))
    with pytest.raises(ValueError, match="ChainGRU: batch was edited in place"):
        layer(x, edge_index, batch, schedule=schedule)
    batch.copy_(lengths_to_batch([4, 3]))
    assert layer(x, edge_index, batch, schedule=chain_schedule(edge_index, 7, batch))[0].shape == (7, 4)


def test_a_schedule_for_several_graphs_without_batch_names_the_missing_batch():
    """Without batch, x is one chain; a schedule made for two is refused for
    that, not for an initial state the caller never passed."""
    x, edge_index, batch = torch.randn(6, 3), chain([4, 2]), lengths_to_batch([4, 2])
    schedule = chain_schedule(edge_index, 6, batch)
    with pytest.raises(ValueError, match=r"ChainLSTM: the schedule was made for 2 graphs, but no batch is given, "
                                         r"so x is one graph \(one chain\); pass the batch"):
        ChainLSTM(3, 4)(x, edge_index, schedule=schedule)


def test_too_few_graphs_are_named_by_what_gave_their_number():
    """A layer's number of graphs comes from its initial state, a direct
    call's from num_graphs, which must be a whole number."""
    edge_index, batch = chain([1, 1, 1]), lengths_to_batch([1, 1, 1])
    with pytest.raises(ValueError, match="ChainRecurrence: batch holds 3 graphs, but num_graphs is 2"):
        chain_schedule(edge_index, 3, batch, num_graphs=2)
    with pytest.raises(ValueError, match="ChainLSTM: batch holds 3 graphs, but the initial state has 2"):
        ChainLSTM(3, 4)(torch.randn(3, 3), edge_index, batch, (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4)))
    for bad in (3.0, True, 0):
        with pytest.raises(ValueError, match=f"needs num_graphs to be a whole number >= 1, got {bad}"):
            chain_schedule(edge_index, 3, batch, num_graphs=bad)
    assert chain_schedule(edge_index, 3, batch, num_graphs=4).num_graphs == 4


def test_chain_schedule_takes_whole_numbers_of_nodes_only():
    """num_nodes may be any integer (numpy's, a 0-d tensor) >= 0; a float,
    a bool or a negative count is named, not met as an unpacking error."""
    edge_index, batch = chain([1, 2]), lengths_to_batch([1, 2])
    for good in (np.int64(3), torch.tensor(3)):
        assert chain_schedule(edge_index, good, batch).num_nodes == 3
    assert chain_schedule(torch.empty(2, 0, dtype=torch.long), 0).sizes == []
    for bad in (3.0, True, -1, torch.tensor(3.0)):
        with pytest.raises(ValueError, match=r"ChainRecurrence needs num_nodes to be a whole number >= 0, "
                                             rf"got {re.escape(repr(bad))}$"):
            chain_schedule(edge_index, bad, batch)


def test_lists_where_tensors_belong_are_named():
    with pytest.raises(TypeError, match="ChainLSTM expects edge_index to be a tensor, got list"):
        ChainLSTM(3, 4)(torch.randn(5, 3), chain(5).tolist())
    with pytest.raises(TypeError, match="ChainGRU expects batch to be a tensor, got list"):
        ChainGRU(3, 4)(torch.randn(5, 3), chain(5), [0] * 5)


@pytest.mark.parametrize("argument", ["x", "edge_index", "batch", "h_0", "c_0"])
def test_inputs_on_another_device_than_the_weights_are_named(argument):
    """As torch.nn.LSTM names the device, not an error inside a gather or
    the host copy of edge_index (meta stands in for another device)."""
    inputs = dict(x=torch.randn(5, 3), edge_index=chain(5), batch=torch.zeros(5, dtype=torch.long),
                  h_0=torch.zeros(1, 1, 4), c_0=torch.zeros(1, 1, 4))
    inputs[argument] = inputs[argument].to("meta")
    with pytest.raises(ValueError, match=rf"ChainLSTM expects {argument} on cpu, like its weights, got meta; "
                                         rf"move {argument} \({argument}\.to\('cpu'\)\)"):
        ChainLSTM(3, 4)(inputs["x"], inputs["edge_index"], inputs["batch"], (inputs["h_0"], inputs["c_0"]))


def test_the_shared_engine_called_as_a_layer_says_what_to_use():
    with pytest.raises(NotImplementedError, match="ChainRecurrence is the engine the recurrent layers share.*"
                                                  "subclass it with a cell\\(\\).*or use ChainRNN, ChainLSTM, "
                                                  "ChainGRU or ChainONLSTM"):
        ChainRecurrence(3, 4)(torch.randn(3, 3), chain(3))


def test_dropout_with_one_layer_warns_as_torch_does():
    with pytest.warns(UserWarning, match="dropout=0.5 with num_layers=1 has no effect"):
        ChainRNN(3, 4, dropout=0.5)


@pytest.mark.parametrize("build,match", [
    (lambda l: l(torch.randn(5), chain(5)), r"x of shape \[num_nodes, 3\], got \[5\]"),
    (lambda l: l(torch.randn(5, 2), chain(5)), r"x of shape \[num_nodes, 3\], got \[5, 2\]"),
    (lambda l: l(torch.randn(5, 3), chain(5).t()), r"edge_index of shape \[2, num_edges\]"),
    (lambda l: l(torch.randn(5, 3), chain(6)), "refers to node 5"),
    (lambda l: l(torch.randn(5, 3), -chain(5)), "negative node index"),
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
    (lambda l: l(torch.randn(5, 3, dtype=torch.float64), chain(5)),
     r"x of dtype torch.float32, like its weights, got torch.float64; convert x"),
    (lambda l: l(torch.randn(5, 3), chain(5), state=(torch.zeros(1, 1, 4), None)), "c_0 to be a tensor, got NoneType"),
    (lambda l: l(torch.randn(5, 3), chain(5), state=[1, 2]), "h_0 to be a tensor, got int"),
    (lambda l: l(torch.randn(5, 3), chain(5), state=(torch.zeros(1, 1, 4, dtype=torch.float64),
                                                     torch.zeros(1, 1, 4))), "h_0 of dtype torch.float32, like x"),
])
def test_bad_inputs_raise_clear_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build(ChainLSTM(3, 4))


@pytest.mark.parametrize("build,error,match", [
    (lambda: ChainLSTM(3, 4, heads=2), TypeError, "ChainLSTM got unexpected keyword argument.*'heads'"),
    (lambda: ChainGRU(3, 4, proj_size=2), TypeError, "ChainGRU got unexpected keyword argument.*'proj_size'"),
    (lambda: ChainONLSTM(3, 4, proj_size=2), TypeError, "ChainONLSTM got .*'proj_size'"),
    (lambda: ChainLSTM(3, 4, nonlinearity="relu"), TypeError, "ChainLSTM got .*'nonlinearity'"),
    (lambda: ChainRNN(3, 4, aggr="mean"), TypeError, "ChainRNN got .*'aggr'"),
    (lambda: ChainRNN(3, 4, nonlinearity="sigmoid"), ValueError, "'tanh' or 'relu', got 'sigmoid'"),
    (lambda: ChainLSTM(3, 4, proj_size=4), ValueError, "0 <= proj_size < hidden_size"),
    (lambda: ChainGRU(3, 4, batch_first=True), ValueError, "ChainGRU does not implement batch_first=True"),
    (lambda: ChainLSTM(3, 4, num_layers=0), ValueError, "num_layers to be a whole number >= 1, got 0"),
    (lambda: ChainRNN(3, 4.0), ValueError, "ChainRNN needs hidden_size to be a whole number >= 1, got 4.0"),
])
def test_unknown_or_unimplemented_options_are_refused_by_name(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_torch_factory_options_are_taken():
    layer = ChainLSTM(3, 4, batch_first=False, dtype=torch.float64, device="cpu")
    assert layer.weight_hh_l0.dtype == torch.float64


def test_repr():
    assert repr(ChainLSTM(64, 256)) == "ChainLSTM(64, 256)"
    assert repr(ChainGRU(3, 4, num_layers=2, dropout=0.1, bidirectional=True)) == \
        "ChainGRU(3, 4, num_layers=2, dropout=0.1, bidirectional=True)"
    assert repr(ChainONLSTM(3, 8, chunk_size=4)) == "ChainONLSTM(3, 8, chunk_size=4)"
    assert repr(ChainLSTM(3, 8, proj_size=2)) == "ChainLSTM(3, 8, proj_size=2)"


# --------------------------------------------------------------------------- #
# Precision, higher-order gradients, compilation
# --------------------------------------------------------------------------- #

def layer_and_twin(layer_class, dtype, **options):
    torch.manual_seed(10)
    reference = layer_class(4, 8, num_layers=2, bidirectional=True, **options)
    layer = layer_class(4, 8, num_layers=2, bidirectional=True, **options).to(dtype)
    layer.load_state_dict(reference.state_dict())
    return layer, reference


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layer_class", ALL)
def test_half_precision_runs_and_stays_close_to_float32(layer_class, dtype):
    layer, reference = layer_and_twin(layer_class, dtype)
    x, edge_index, batch = torch.randn(sum(LENGTHS), 4), chain(LENGTHS), lengths_to_batch(LENGTHS)
    ref, _ = reference(x, edge_index, batch)
    low = x.to(dtype).requires_grad_()
    out, final = layer(low, edge_index, batch)
    assert out.dtype == dtype and all(t.dtype == dtype for t in as_tuple(final))
    assert torch.allclose(out.float(), ref, atol=2e-2)
    out.float().square().sum().backward()
    assert low.grad.dtype == dtype and torch.isfinite(low.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


@pytest.mark.parametrize("layer_class", ALL)
def test_cpu_autocast_in_bfloat16_stays_close_to_float32(layer_class):
    torch.manual_seed(11)
    layer = layer_class(4, 8, bidirectional=True)
    x, edge_index, batch = torch.randn(sum(LENGTHS), 4), chain(LENGTHS), lengths_to_batch(LENGTHS)
    ref, _ = layer(x, edge_index, batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = layer(x, edge_index, batch)
    assert torch.allclose(out.float(), ref, atol=2e-2)
    out.float().sum().backward()


def functional(layer, edge_index, batch):
    """``layer`` as a function of its input and parameters, for gradcheck."""
    names = [name for name, _ in layer.named_parameters()]

    def run(x, *parameters):
        out, final = torch.func.functional_call(layer, dict(zip(names, parameters)),
                                                (x, edge_index, batch))
        return (out,) + as_tuple(final)
    return run, [p.detach().clone().requires_grad_() for p in layer.parameters()]


@pytest.mark.parametrize("ours,theirs,options", PAIRS, ids=PAIR_IDS)
def test_gradients_taken_with_create_graph_equal_torchs_and_so_do_second_derivatives(ours, theirs, options):
    """gradgradcheck differentiates the create_graph gradients but does not
    compare them with the plain ones: W_hh's once counted earlier steps twice."""
    torch.manual_seed(3)
    layer = ours(3, 5, num_layers=2, bidirectional=True, **options).double()
    peer = theirs(3, 5, num_layers=2, bidirectional=True, **options).double()
    peer.load_state_dict(layer.state_dict())
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    peer_x = x.detach().clone().requires_grad_()
    grads = torch.autograd.grad(layer(x, chain(5))[0].pow(2).sum(), [x, *layer.parameters()], create_graph=True)
    expected = torch.autograd.grad(peer(peer_x[:, None])[0].pow(2).sum(), [peer_x, *peer.parameters()],
                                   create_graph=True)
    for grad, want in zip(grads, expected):
        assert torch.allclose(grad, want, atol=1e-10)
    directions = [torch.randn_like(g) for g in grads[1:]]
    hvp = torch.autograd.grad(sum((g * d).sum() for g, d in zip(grads[1:], directions)), x)[0]
    want = torch.autograd.grad(sum((g * d).sum() for g, d in zip(expected[1:], directions)), peer_x)[0]
    assert torch.allclose(hvp, want, atol=1e-10)


@pytest.mark.parametrize("layer_class,options", [
    (ChainRNN, {"nonlinearity": "relu"}), (ChainLSTM, {}), (ChainLSTM, {"proj_size": 2}),
    (ChainGRU, {}), (ChainONLSTM, {}),
], ids=["rnn-relu", "lstm", "lstm-proj", "gru", "onlstm"])
def test_gradients_and_double_backward_match_finite_differences(layer_class, options):
    """gradcheck and gradgradcheck over the input and every weight: the
    fused LSTM step's first-order shortcut must leave every order exact.
    (Fast mode: finite differences along random directions, not per entry.)"""
    torch.manual_seed(12)
    layer = layer_class(2, 3, num_layers=2, bidirectional=True, **options).double()
    edge_index, batch = chain([3, 1, 2]), lengths_to_batch([3, 1, 2])
    run, parameters = functional(layer, edge_index, batch)
    x = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    assert gradcheck(run, (x, *parameters), atol=1e-6, fast_mode=True)
    assert gradgradcheck(run, (x, *parameters), atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("layer_class,options", [
    (ChainRNN, {"nonlinearity": "relu"}), (ChainLSTM, {"proj_size": 2}), (ChainGRU, {}), (ChainONLSTM, {}),
], ids=["rnn-relu", "lstm-proj", "gru", "onlstm"])
def test_compiles_in_one_graph_with_a_given_schedule(layer_class, options):
    """torch.compile(fullgraph=True) traces the whole layer, every step's
    propagate included, without a host read; outputs and gradients equal
    eager ones. (aot_eager: the graph and its backward as inductor gets them,
    without a C++ compiler.)"""
    torch.manual_seed(13)
    layer = layer_class(3, 4, bidirectional=True, **options)
    x, edge_index, batch = torch.randn(5, 3), chain([3, 2]), lengths_to_batch([3, 2])
    schedule = chain_schedule(edge_index, 5, batch)
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    results = []
    for run in (compiled, layer):
        inputs = x.clone().requires_grad_()
        out, final = run(inputs, edge_index, batch, schedule=schedule)
        (out.sin().sum() + as_tuple(final)[0].sum()).backward()
        results.append((out, inputs.grad, [p.grad.clone() for p in layer.parameters()]))
        layer.zero_grad()
    (out, x_grad, grads), (ref, ref_x_grad, ref_grads) = results
    assert torch.allclose(out, ref, atol=1e-6) and torch.allclose(x_grad, ref_x_grad, atol=1e-6)
    for got, expected in zip(grads, ref_grads):
        assert torch.allclose(got, expected, atol=1e-5)


def test_compiles_with_one_graph_break_without_a_schedule():
    """Without a schedule, the steps are found on the host (one break), and
    the rest is one graph that later calls with the same lengths reuse."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(14)
    layer = ChainLSTM(3, 4)
    x, edge_index, batch = torch.randn(5, 3), chain([3, 2]), lengths_to_batch([3, 2])
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(layer, backend=counter)
    out, _ = compiled(x, edge_index, batch)
    compiled(x, edge_index, batch)
    assert counter.frame_count == 1
    assert torch.allclose(out, layer(x, edge_index, batch)[0], atol=1e-6)
    explanation = torch._dynamo.explain(layer)(x, edge_index, batch)
    assert explanation.graph_break_count <= 1


# --------------------------------------------------------------------------- #
# ON-LSTM
# --------------------------------------------------------------------------- #

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
    out, (h_n, c_n), distances = layer(x, torch.empty(2, 0, dtype=torch.long), torch.arange(4),
                                       (h_0, c_0), return_distances=True)
    h, c, distance = onlstm_step_from_the_paper(x, h_0[0], c_0[0], layer, 2)
    assert torch.allclose(out, h) and torch.allclose(h_n[0], h) and torch.allclose(c_n[0], c)
    assert distances.shape == (4, 1)
    assert torch.allclose(distances[:, 0], distance)


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


def test_onlstm_returns_distances_per_node_layer_and_direction_and_keeps_no_state():
    torch.manual_seed(11)
    layer = ChainONLSTM(3, 8, num_layers=2, bidirectional=True, chunk_size=2)
    x, edge_index, batch = torch.randn(7, 3), chain([3, 4]), lengths_to_batch([3, 4])
    out, _, distances = layer(x, edge_index, batch, return_distances=True)
    assert distances.shape == (7, 4)
    assert ((distances >= 0) & (distances <= 4)).all()
    assert not hasattr(layer, "last_distances")
    # In node order: a shuffled copy of the nodes gives the shuffled distances.
    moved_x, moved_edges, moved_batch, permutation = shuffled(
        x, edge_index, batch, torch.Generator().manual_seed(1))
    _, _, moved = layer(moved_x, moved_edges, moved_batch, return_distances=True)
    assert torch.allclose(moved, distances[permutation], atol=1e-6)
    assert len(layer(x, edge_index, batch)) == 2  # without the flag, what every layer returns


def test_onlstm_chunk_size_must_divide_hidden_size():
    with pytest.raises(ValueError, match="chunk_size to divide hidden_size"):
        ChainONLSTM(3, 6, chunk_size=4)


@pytest.mark.parametrize("layer_class", ALL)
@pytest.mark.parametrize("sizes,name,value", [
    ((3.0, 4), "input_size", "3.0"), ((3, 4.0), "hidden_size", "4.0"), ((3, 4, 2.0), "num_layers", "2.0"),
    ((3, True), "hidden_size", "True"), ((3, 0), "hidden_size", "0"), ((3, -1), "hidden_size", "-1"),
])
def test_sizes_that_are_not_whole_numbers_from_one_are_refused_by_name(layer_class, sizes, name, value):
    """Each cell's own checks (proj_size, chunk_size) come after the shared
    ones, so ChainLSTM(3, 0) names hidden_size (torch.nn.LSTM refuses it
    too), and a float never reaches torch.empty."""
    with pytest.raises(ValueError, match=f"{layer_class.__name__} needs {name} to be a whole number >= 1, "
                                         f"got {value}$"):
        layer_class(*sizes)


@pytest.mark.parametrize("build,match", [
    (lambda: ChainONLSTM(3, 4, chunk_size=2.0), "ChainONLSTM needs chunk_size to be a whole number >= 1, got 2.0"),
    (lambda: ChainONLSTM(3, 4, chunk_size=True), "ChainONLSTM needs chunk_size to be a whole number >= 1, got True"),
    (lambda: ChainONLSTM(3, 4, chunk_size=0), "ChainONLSTM needs chunk_size to be a whole number >= 1, got 0"),
    (lambda: ChainLSTM(3, 4, proj_size=2.0), r"ChainLSTM needs proj_size to be a whole number >= 0 .*got 2.0"),
    (lambda: ChainLSTM(3, 4, proj_size=True), r"ChainLSTM needs proj_size to be a whole number >= 0 .*got True"),
    (lambda: ChainLSTM(3, 4, proj_size=-1), r"ChainLSTM needs proj_size to be a whole number >= 0 .*got -1"),
])
def test_cell_sizes_that_are_not_whole_numbers_are_refused_by_name(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_onlstm_chunks_follow_hidden_and_chunk_size():
    layer = ChainONLSTM(3, 8, chunk_size=2)
    assert layer.num_chunks == 4 and layer.weight_ih_l0.shape == (4 * 8 + 2 * 4, 3)
