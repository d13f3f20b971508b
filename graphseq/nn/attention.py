"""Attention as message passing. Every attention layer here does the same
three things along the edges of a graph: score each edge ``j -> i``, take a
softmax over the scores of each target's incoming edges, and sum the values
of the sources weighted by that softmax. Only the score differs: GAT's is
additive, ``LeakyReLU(a_s . W x_j + a_d . W x_i)``; the Transformer's is the
scaled dot product ``q_i . k_j / sqrt(d)``. Only the graph differs too: a
node's neighbours for GAT, every node of its graph for self-attention.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.index import index2ptr, ptr2index
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.nn.inits import glorot, zeros
from torch_geometric.utils import (add_self_loops, index_sort, remove_self_loops, segment, softmax,
                                   to_dense_batch)

from .. import graphs
from . import checks
from .sparse import sparse_dense_mm


class _AttentionAggregate(torch.autograd.Function):
    """``out[i, h] = sum over edges j -> i of alpha[e, h] * value[j, h]`` for
    edges in CSR order (grouped by target): a sparse product per head forward;
    backward, the value gradient is a product with the transposed adjacency
    and the alpha gradient a dot product per edge."""

    @staticmethod
    def forward(ctx, ptr: Tensor, source: Tensor, alpha: Tensor, value: Tensor) -> Tensor:
        ctx.save_for_backward(ptr, source, alpha, value)
        num_targets, num_sources = ptr.numel() - 1, value.size(0)
        out = value.new_empty(num_targets, value.size(1), value.size(2))
        for head in range(value.size(1)):
            adj_t = torch.sparse_csr_tensor(ptr, source, alpha[:, head].contiguous(),
                                            (num_targets, num_sources), check_invariants=False)
            out[:, head] = adj_t @ value[:, head]
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        ptr, source, alpha, value = ctx.saved_tensors
        num_targets, num_sources = ptr.numel() - 1, value.size(0)
        target = ptr2index(ptr, output_size=source.numel())
        grad_alpha = grad_value = None
        if ctx.needs_input_grad[2]:
            grad_alpha = (grad_out.index_select(0, target) * value.index_select(0, source)).sum(-1)
        if ctx.needs_input_grad[3]:
            source_sorted, perm = torch.sort(source, stable=True)
            source_ptr, target_sorted = index2ptr(source_sorted, num_sources), target[perm]
            grad_value = torch.empty_like(value)
            for head in range(value.size(1)):
                adj = torch.sparse_csr_tensor(source_ptr, target_sorted, alpha[perm, head].contiguous(),
                                              (num_sources, num_targets), check_invariants=False)
                grad_value[:, head] = adj @ grad_out[:, head].contiguous()
        return None, None, grad_alpha, grad_value


def attention_aggregate(ptr: Tensor, source: Tensor, alpha: Tensor, value: Tensor) -> Tensor:
    """Attention-weighted sum of ``value`` ``[num_sources, heads, channels]``
    over edges given in CSR form (``ptr`` over targets, ``source`` per edge)
    with coefficients ``alpha`` ``[num_edges, heads]``."""
    return _AttentionAggregate.apply(ptr, source, alpha, value)


class AttentionConv(MessagePassing):
    r"""The machinery shared by every attention layer: given a score for each
    edge, normalise it over each target's incoming edges and aggregate.

    .. math::
        \alpha_{ij} = \frac{\exp(e_{ij})}{\sum_{k \in \mathcal{N}(i)} \exp(e_{ik})},
        \qquad \mathbf{h}_i = \sum_{j \in \mathcal{N}(i)} \alpha_{ij} \mathbf{v}_j

    Subclasses compute the score :math:`e_{ij}` and the values and call
    :meth:`attend`. A node with no incoming edge receives a zero vector.

    Args:
        heads (int): number of attention heads.
        dropout (float): dropout probability of the normalised attention
            coefficients during training. (default: :obj:`0.`)
    """

    def __init__(self, heads: int, dropout: float = 0.0, **kwargs):
        kwargs.setdefault("aggr", "add")
        super().__init__(node_dim=0, **kwargs)
        self.heads = heads
        self.dropout = dropout

    def attend(self, edge_index: Tensor, value: Tensor, score: Tensor,
               num_nodes: int) -> Tuple[Tensor, Tensor]:
        """Softmax of ``score`` ``[num_edges, heads]`` over each target's edges,
        then the weighted sum of ``value`` ``[num_nodes, heads, channels]``.
        Returns the aggregated ``[num_nodes, heads, channels]`` and the
        attention coefficients ``[num_edges, heads]`` in the order of
        ``edge_index``.

        Edges are grouped by target (a CSR layout) so that the softmax and the
        sum run as segment reductions, which on CPU are several times faster
        than scatters. Callers that pass edges already sorted by target (see
        :meth:`sort_by_target`) skip the sort.
        """
        edge_index, perm = self.sort_by_target(edge_index)
        if perm is not None:
            score = score[perm]
        ptr = index2ptr(edge_index[1], num_nodes)
        alpha = softmax(score, ptr=ptr, num_nodes=num_nodes)  # [num_edges, heads]
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        # The graph as a transposed CSR adjacency (row = target), so that
        # propagate fuses message and aggregation into sparse products.
        adj_t = torch.sparse_csr_tensor(ptr, edge_index[0], alpha.new_ones(alpha.size(0)),
                                        (num_nodes, value.size(0)), check_invariants=False)
        out = self.propagate(adj_t, value=value, alpha=alpha)
        if perm is not None:
            alpha = torch.empty_like(alpha).index_copy_(0, perm, alpha)
        return out, alpha

    @staticmethod
    def sort_by_target(edge_index: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """Edges ordered by target (stable) and the permutation that did it,
        or ``None`` when they already were."""
        target = edge_index[1]
        if target.numel() < 2 or not bool((target[1:] < target[:-1]).any()):
            return edge_index, None
        _, perm = index_sort(target, stable=True)
        return edge_index[:, perm], perm

    def message(self, value_j: Tensor, alpha: Tensor) -> Tensor:
        return value_j * alpha.unsqueeze(-1)  # [num_edges, heads, channels]

    def message_and_aggregate(self, adj_t: Tensor, value: Tensor, alpha: Tensor) -> Tensor:
        # The sum over each target's edges of message(value_j, alpha), as one
        # sparse-dense product per head: no [num_edges, heads, channels]
        # tensor is built in the forward pass.
        return attention_aggregate(adj_t.crow_indices(), adj_t.col_indices(), alpha, value)


class GATConv(AttentionConv):
    r"""The graph attentional operator from `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_ (Veličković et al., ICLR 2018).

    .. math::
        \mathbf{x}^{\prime}_i = \big\Vert_{h=1}^{H} \sum_{j \in \mathcal{N}(i) \cup \{ i \}}
        \alpha^{h}_{i,j}\mathbf{\Theta}^{h}\mathbf{x}_{j},
        \qquad
        \alpha^{h}_{i,j} = \mathrm{softmax}_j\Big(\mathrm{LeakyReLU}\big(
        \mathbf{a}^{h\top}_{s}\mathbf{\Theta}^{h}\mathbf{x}_j +
        \mathbf{a}^{h\top}_{d}\mathbf{\Theta}^{h}\mathbf{x}_i\big)\Big)

    A drop-in for :class:`torch_geometric.nn.GATConv` with the options below:
    the same arguments, ``state_dict`` keys and outputs. ``x`` may also be a
    sparse COO tensor (bag-of-words features), which is multiplied sparsely.

    Args:
        in_channels (int): size of each input sample.
        out_channels (int): size of each output sample per head.
        heads (int): number of attention heads. (default: :obj:`1`)
        concat (bool): concatenate the heads if :obj:`True`, else average
            them. (default: :obj:`True`)
        negative_slope (float): LeakyReLU angle of the negative slope.
            (default: :obj:`0.2`)
        dropout (float): dropout probability of the normalised attention
            coefficients. (default: :obj:`0.`)
        add_self_loops (bool): add a self-loop to every node (after removing
            existing ones). (default: :obj:`True`)
        bias (bool): learn an additive bias. (default: :obj:`True`)
        value_dropout (float): dropout of the transformed features that are
            summed (not of those that are scored), as the authors' TensorFlow
            code does; PyG's layer has no such option. (default: :obj:`0.`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\mathcal{E}|)`
        - **output:** node features :math:`(|\mathcal{V}|, H * F_{out})` or
          :math:`(|\mathcal{V}|, F_{out})` if :obj:`concat=False`; with
          ``return_attention_weights``, also ``(edge_index, alpha)`` with
          alpha :math:`(|\mathcal{E}|, H)`, self-loops included.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True,
                 bias: bool = True, value_dropout: float = 0.0, **kwargs):
        super().__init__(heads=heads, dropout=dropout, **kwargs)
        self.value_dropout = value_dropout
        if not isinstance(in_channels, int):
            raise TypeError("graphseq.nn.GATConv takes an int in_channels (bipartite inputs are not supported)")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.concat = concat
        self.negative_slope = negative_slope
        self.add_self_loops = add_self_loops

        self.lin = Linear(in_channels, heads * out_channels, bias=False, weight_initializer="glorot")
        self.att_src = Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = Parameter(torch.empty(1, heads, out_channels))
        if bias:
            self.bias = Parameter(torch.empty(heads * out_channels if concat else out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        super().reset_parameters()
        self.lin.reset_parameters()
        glorot(self.att_src)
        glorot(self.att_dst)
        zeros(self.bias)

    def forward(self, x: Tensor, edge_index: Tensor,
                return_attention_weights: Optional[bool] = None
                ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]]]:
        H, C = self.heads, self.out_channels
        checks.check_features(self, x, self.in_channels)
        num_nodes = x.size(0)
        checks.check_edge_index(self, edge_index, num_nodes)

        if x.layout != torch.strided:  # Multiply only the non-zero features.
            h = sparse_dense_mm(x, self.lin.weight.t()).view(-1, H, C)
        else:
            h = self.lin(x).view(-1, H, C)  # [num_nodes, heads, channels]
        alpha_src = (h * self.att_src).sum(dim=-1)  # [num_nodes, heads]
        alpha_dst = (h * self.att_dst).sum(dim=-1)

        if self.add_self_loops:
            edge_index, _ = remove_self_loops(edge_index)
            edge_index, _ = add_self_loops(edge_index, num_nodes=num_nodes)
        returned_edges = edge_index
        edge_index, perm = self.sort_by_target(edge_index)

        source, target = edge_index
        score = F.leaky_relu(alpha_src[source] + alpha_dst[target], self.negative_slope)  # [num_edges, heads]
        value = F.dropout(h, p=self.value_dropout, training=self.training)
        out, alpha = self.attend(edge_index, value, score, num_nodes)

        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            if perm is not None:  # Back to PyG's edge order.
                alpha = torch.empty_like(alpha).index_copy_(0, perm, alpha)
            return out, (returned_edges, alpha)
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class DotProductAlongEdges(torch.autograd.Function):
    """``q_i . k_j`` for every edge ``j -> i`` of edges sorted by target:
    ``[num_nodes, heads, channels]`` queries and keys in, ``[num_edges, heads]``
    scores out.

    Left to autograd, the two ``[num_edges, heads, channels]`` gathers behind
    the scores would be the largest tensors kept for the backward pass. Here
    only the node-sized queries and keys are kept. On CPU the edges are a
    sparse CSR matrix per head: the scores are torch's sampled dense-dense
    product (``torch.sparse.sampled_addmm``) and the gradients two sparse-dense
    products, so no ``[num_edges, heads, channels]`` tensor exists at all.
    Elsewhere the gathers are computed (and redone in the backward pass).
    """

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, edge_index: Tensor, target_ptr: Tensor) -> Tensor:
        ctx.save_for_backward(query, key, edge_index, target_ptr)
        source, target = edge_index
        if not _use_sparse_kernels(query, edge_index):
            return (query.index_select(0, target) * key.index_select(0, source)).sum(dim=-1)
        num_nodes, heads = query.shape[:2]
        # Zero values, not empty ones: sampled_addmm adds beta * values even
        # for beta = 0, and 0 * NaN is NaN.
        pattern = torch.sparse_csr_tensor(target_ptr.expand(heads, -1).contiguous(),
                                          source.expand(heads, -1).contiguous(),
                                          query.new_zeros(heads, source.numel()),
                                          (heads, num_nodes, key.size(0)), check_invariants=False)
        score = torch.sparse.sampled_addmm(pattern, query.transpose(0, 1), key.permute(1, 2, 0),
                                           beta=0.0)  # [heads, num_nodes, num_nodes], sparse
        return score.values().t()  # [num_edges, heads]

    @staticmethod
    def backward(ctx, grad_score: Tensor):
        query, key, edge_index, target_ptr = ctx.saved_tensors
        source, target = edge_index
        grad_query = grad_key = None
        if not _use_sparse_kernels(query, edge_index):
            grad = grad_score.unsqueeze(-1)  # [num_edges, heads, 1]
            if ctx.needs_input_grad[0]:
                grad_query = segment(key.index_select(0, source) * grad, target_ptr, reduce="sum")
            if ctx.needs_input_grad[1]:
                grad_key = torch.zeros_like(key).index_add_(0, source, query.index_select(0, target) * grad)
            return grad_query, grad_key, None, None

        # Per head, the gradient is a sparse [target, source] matrix G:
        # grad_query = G @ key and grad_key = G^T @ query, G^T being the same
        # arrays read as a CSC matrix.
        grad = grad_score.t().contiguous()  # [heads, num_edges]
        shape = (query.size(0), key.size(0))
        if ctx.needs_input_grad[0]:
            grad_query = torch.stack([
                torch.sparse_csr_tensor(target_ptr, source, g, shape, check_invariants=False) @ key[:, h]
                for h, g in enumerate(grad)], dim=1)
        if ctx.needs_input_grad[1]:
            grad_key = torch.stack([
                torch.sparse_csc_tensor(target_ptr, source, g, shape[::-1], check_invariants=False) @ query[:, h]
                for h, g in enumerate(grad)], dim=1)
        return grad_query, grad_key, None, None


def _use_sparse_kernels(query: Tensor, edge_index: Tensor) -> bool:
    return (query.device.type == "cpu" and query.dtype in (torch.float32, torch.float64)
            and edge_index.size(1) > 0)


class SelfAttentionConv(AttentionConv):
    r"""Multi-head scaled dot-product self-attention from `"Attention Is All
    You Need" <https://arxiv.org/abs/1706.03762>`_ (Vaswani et al., NeurIPS
    2017), as message passing along a graph.

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_O \big\Vert_{h=1}^{H}
        \sum_{j \in \mathcal{N}(i)} \alpha^{h}_{i,j} \mathbf{W}^{h}_V \mathbf{x}_j,
        \qquad
        \alpha^{h}_{i,j} = \mathrm{softmax}_j\Big(
        \frac{(\mathbf{W}^{h}_Q \mathbf{x}_i)^{\top} \mathbf{W}^{h}_K \mathbf{x}_j}{\sqrt{d}}\Big)

    (biases omitted), where :math:`d` is ``embed_dim / num_heads``. Without
    ``edge_index``, :math:`\mathcal{N}(i)` is every node of :math:`i`'s graph,
    itself included: the Transformer's self-attention. With ``edge_index`` it
    is :math:`i`'s in-neighbours, and a mask of :class:`torch.nn.MultiheadAttention`
    becomes a graph (``graphs.causal`` for a decoder's causal mask).

    Fully connected graphs are computed densely, graph by graph, with
    :func:`torch.nn.functional.scaled_dot_product_attention` (graphs of unequal
    sizes are padded and the padding masked out). Any other graph takes the
    edge-wise softmax of :meth:`AttentionConv.attend`, whose memory grows with
    the number of edges times heads, not with the square of the nodes. Both
    give the same numbers.

    Parameters and ``state_dict`` keys are those of
    ``torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias,
    batch_first=True)`` (``in_proj_weight``, ``in_proj_bias``,
    ``out_proj.weight``, ``out_proj.bias``), so weights load both ways.

    A node with no incoming edge attends to nothing: its attention output
    (the sum of weighted values, before ``out_proj``) is a zero vector, so its
    output is ``out_proj.bias`` (zero when ``bias=False``), never NaN.
    :class:`torch.nn.MultiheadAttention` returns NaN for a fully masked row.

    Args:
        embed_dim (int): size of each input and output sample.
        num_heads (int): number of attention heads; must divide ``embed_dim``.
        dropout (float): dropout probability of the attention coefficients
            during training. (default: :obj:`0.`)
        bias (bool): learn biases of the input and output projections.
            (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, E)`, optional edge
          indices :math:`(2, |\mathcal{E}|)` (source row 0, target row 1),
          optional sorted batch vector :math:`(|\mathcal{V}|)`
        - **output:** node features :math:`(|\mathcal{V}|, E)`; with
          ``return_attention_weights``, also ``(edge_index, alpha)`` with
          alpha :math:`(|\mathcal{E}|, H)` (the fully connected edges
          when no ``edge_index`` was given).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 **kwargs):
        super().__init__(heads=num_heads, dropout=dropout, **kwargs)
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.bias = bias

        # The names and shapes of torch.nn.MultiheadAttention, so weights load both ways.
        self.in_proj_weight = Parameter(torch.empty(3 * embed_dim, embed_dim))
        if bias:
            self.in_proj_bias = Parameter(torch.empty(3 * embed_dim))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = torch.nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self):
        # torch.nn.MultiheadAttention's initialisation.
        super().reset_parameters()
        torch.nn.init.xavier_uniform_(self.in_proj_weight)
        self.out_proj.reset_parameters()
        if self.in_proj_bias is not None:
            torch.nn.init.zeros_(self.in_proj_bias)
            torch.nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: Tensor, edge_index: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                return_attention_weights: bool = False
                ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]]]:
        H, D = self.num_heads, self.head_dim
        checks.check_features(self, x, self.embed_dim)
        num_nodes = x.size(0)
        checks.check_batch(self, batch, num_nodes)
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias).view(-1, 3, H, D)  # [num_nodes, 3, heads, head_dim]

        if edge_index is None and not return_attention_weights:
            out = self.attend_fully_connected(qkv, batch)
        else:
            if edge_index is None:  # The weights are wanted edge by edge: build the edges.
                edge_index = graphs.fully_connected(self.graph_sizes(batch, num_nodes)).to(x.device)
            checks.check_edge_index(self, edge_index, num_nodes)
            out, alpha = self.attend_edges(qkv, edge_index)

        out = self.out_proj(out.reshape(-1, H * D))  # [num_nodes, embed_dim]
        if return_attention_weights:
            return out, (edge_index, alpha)
        return out

    def attend_fully_connected(self, qkv: Tensor, batch: Optional[Tensor]) -> Tensor:
        """Dense attention inside each graph of ``batch``: ``qkv`` ``[num_nodes,
        3, heads, head_dim]`` in, the attention output ``[num_nodes, heads,
        head_dim]`` out. Graphs of equal size are a plain reshape; unequal ones
        are padded to the largest and the padded keys masked out."""
        num_nodes = qkv.size(0)
        sizes = self.graph_sizes(batch, num_nodes)
        num_graphs, longest = sizes.numel(), int(sizes.max()) if sizes.numel() else 0
        if num_nodes == 0:
            return qkv.new_zeros(0, self.num_heads, self.head_dim)
        if bool((sizes == longest).all()):
            dense, mask, real = qkv.view(num_graphs, longest, *qkv.shape[1:]), None, None
        else:
            dense, real = to_dense_batch(qkv, batch, batch_size=num_graphs, max_num_nodes=longest)  # [graphs, longest, 3, heads, head_dim]
            # An empty graph (a gap in batch) would leave its padded queries with
            # no key at all; letting them see the padding keeps NaN out of the
            # backward pass. Padded queries are dropped afterwards either way.
            empty = (sizes == 0).to(real.device)
            mask = (real | empty.unsqueeze(1)).view(num_graphs, 1, 1, longest)
        query, key, value = dense.permute(2, 0, 3, 1, 4)  # [graphs, heads, longest, head_dim] each
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                             dropout_p=self.dropout if self.training else 0.0)
        out = out.transpose(1, 2)  # [graphs, longest, heads, head_dim]
        return out.reshape(num_nodes, self.num_heads, self.head_dim) if real is None else out[real]

    def attend_edges(self, qkv: Tensor, edge_index: Tensor) -> Tuple[Tensor, Tensor]:
        """The edge-wise path: scores ``q_i . k_j / sqrt(d)`` along the edges,
        then :meth:`AttentionConv.attend`. Returns the attention output
        ``[num_nodes, heads, head_dim]`` and alpha ``[num_edges, heads]`` in
        the order of ``edge_index``."""
        # One copy makes each of query, key and value contiguous, which the
        # edge gathers below read several times faster than strided views.
        query, key, value = qkv.transpose(0, 1).contiguous()  # [num_nodes, heads, head_dim] each
        # Sorted by target, the queries are gathered in memory order and
        # attend need not sort again.
        edge_index, perm = self.sort_by_target(edge_index)
        target_ptr = index2ptr(edge_index[1], qkv.size(0))
        score = DotProductAlongEdges.apply(query, key, edge_index, target_ptr)
        score = score / math.sqrt(self.head_dim)  # [num_edges, heads]
        out, alpha = self.attend(edge_index, value, score, qkv.size(0))
        if perm is not None:
            alpha = torch.empty_like(alpha).index_copy_(0, perm, alpha)
        return out, alpha

    @staticmethod
    def graph_sizes(batch: Optional[Tensor], num_nodes: int) -> Tensor:
        """The number of nodes of each graph of a sorted ``batch`` vector (one
        graph of every node when there is none)."""
        if batch is None:
            return torch.tensor([num_nodes])
        if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
            raise ValueError("SelfAttentionConv expects a sorted batch vector (nodes numbered "
                             "graph after graph, as PyG's loaders make them)")
        return graphs.batch_to_lengths(batch)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.embed_dim}, num_heads={self.num_heads})"
