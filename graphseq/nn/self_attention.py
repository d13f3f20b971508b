"""Multi-head scaled dot-product attention as an :class:`AttentionConv`
whose score is the dot product of a query and a key, along the edges of a
graph or, without edges, densely within each graph of a batch: the
Transformer's attention, with :class:`torch.nn.MultiheadAttention`'s weights.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

from .. import graphs
from . import checks
from .attention import AttentionConv
from .fused_attention import scaled_dot_product_attention


class SelfAttentionConv(AttentionConv):
    r"""Multi-head scaled dot-product attention from `"Attention Is All You
    Need" <https://arxiv.org/abs/1706.03762>`_ (Vaswani et al., NeurIPS
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

    Cross-attention (queries on one node set, keys and values on another, as
    an encoder-decoder's) takes ``x=(x_src, x_dst)``: the targets ``x_dst``
    ``[num_targets, embed_dim]`` ask, the sources ``x_src`` ``[num_sources,
    kdim]`` answer (``x_src`` may be a pair ``(keys, values)`` of ``kdim`` and
    ``vdim`` features), along a bipartite ``edge_index`` (row 0 indexes
    ``x_src``, row 1 ``x_dst``) or, without one, from every source to every
    target of the same graph (``batch=(batch_src, batch_dst)``).

    Fully connected graphs are computed densely, graph by graph, with
    :func:`torch.nn.functional.scaled_dot_product_attention` (graphs of unequal
    sizes are padded and the padding masked out), unless message hooks or an
    explainer need the edges. Any other graph takes the edge-wise path of
    :meth:`AttentionConv.attend`, whose memory grows with the number of edges
    times heads, not with the square of the nodes. Both give the same numbers.

    Parameters and ``state_dict`` keys are those of
    ``torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias,
    kdim=kdim, vdim=vdim, batch_first=True)``, so weights load both ways.
    Its options ``add_bias_kv`` and ``add_zero_attn`` are not implemented and
    refused by name.

    A node with no incoming edge attends to nothing: its attention output
    (the sum of weighted values, before ``out_proj``) is a zero vector, so its
    output is ``out_proj.bias`` (zero when ``bias=False``), never NaN.
    :class:`torch.nn.MultiheadAttention` returns NaN for a fully masked row.

    Args:
        embed_dim (int): size of each query and output sample.
        num_heads (int): number of attention heads; must divide ``embed_dim``.
        dropout (float): dropout probability of the attention coefficients
            during training. (default: :obj:`0.`)
        bias (bool): learn biases of the input and output projections.
            (default: :obj:`True`)
        add_bias_kv (bool): not implemented; must be :obj:`False`.
        add_zero_attn (bool): not implemented; must be :obj:`False`.
        kdim (int, optional): size of each key sample. (default: ``embed_dim``)
        vdim (int, optional): size of each value sample. (default: ``embed_dim``)
        batch_first (bool): accepted and ignored, so that
            :class:`torch.nn.MultiheadAttention`'s arguments (positional
            ones too) mean the same here: nodes are the rows of ``x``, with no
            batch or sequence dimension. (default: :obj:`False`)
        device, dtype: where and in which precision to create the parameters.
            (default: :obj:`None`)
        **kwargs (optional): arguments of :class:`MessagePassing`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, E)` or
          :math:`((|\mathcal{V_s}|, E_k), (|\mathcal{V_t}|, E))`, optional
          edge indices :math:`(2, |\mathcal{E}|)` (source row 0, target row 1),
          optional sorted batch vector :math:`(|\mathcal{V}|)` (a pair when
          bipartite)
        - **output:** node features :math:`(|\mathcal{V_t}|, E)`; with
          ``return_attention_weights``, also ``(edge_index, alpha)`` with
          alpha :math:`(|\mathcal{E}|, H)` (the fully connected edges
          when no ``edge_index`` was given).
    """

    deterministic_scores = True  # (see AttentionConv)

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: Optional[int] = None,
                 vdim: Optional[int] = None, batch_first: bool = False, device=None, dtype=None, **kwargs):
        checks.check_option(self, "add_bias_kv", add_bias_kv, False,
                            "its learned extra key and value are not part of this layer")
        checks.check_option(self, "add_zero_attn", add_zero_attn, False,
                            "it would attend to an extra zero key and value")
        checks.check_sizes(self, embed_dim=embed_dim, num_heads=num_heads,
                           **{k: v for k, v in (("kdim", kdim), ("vdim", vdim)) if v is not None})
        super().__init__(heads=num_heads, dropout=dropout, **kwargs)
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.bias = bias
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim

        # The names and shapes of torch.nn.MultiheadAttention, so weights load both ways.
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(torch.empty(3 * embed_dim, embed_dim))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(torch.empty(embed_dim, embed_dim))
            self.k_proj_weight = Parameter(torch.empty(embed_dim, self.kdim))
            self.v_proj_weight = Parameter(torch.empty(embed_dim, self.vdim))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(torch.empty(3 * embed_dim))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = torch.nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()
        self.to(device=device, dtype=dtype)

    def reset_parameters(self):
        # torch.nn.MultiheadAttention's initialisation.
        super().reset_parameters()
        for weight in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if weight is not None:
                torch.nn.init.xavier_uniform_(weight)
        self.out_proj.reset_parameters()
        if self.in_proj_bias is not None:
            torch.nn.init.zeros_(self.in_proj_bias)
            torch.nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: Union[Tensor, Tuple], edge_index: Optional[Tensor] = None,
                batch: Optional[Union[Tensor, Tuple[Tensor, Tensor]]] = None,
                return_attention_weights: bool = False):
        H, D = self.num_heads, self.head_dim
        query, key, value, batch_src, batch_dst = self.project(x, batch)  # [num_nodes, heads, head_dim] each
        num_sources, num_targets = key.size(0), query.size(0)

        if edge_index is None and not return_attention_weights and not self.edges_observed():
            out = self.attend_fully_connected(query, key, value, batch_src, batch_dst)
        else:
            if edge_index is None:  # The edges are wanted: build them.
                edge_index = self.fully_connected_edges(batch_src, batch_dst, num_sources, num_targets)
                edge_index = edge_index.to(query.device)
            graph = self.attention_graph(edge_index, (num_sources, num_targets))
            out, alpha = self.attend(graph, value, query=query, key=key,
                                     need_weights=bool(return_attention_weights))

        out = self.out_proj(out.reshape(-1, H * D))  # [num_targets, embed_dim]
        if return_attention_weights:
            return out, graph.attention_weights(alpha)
        return out

    def project(self, x, batch):
        """Queries (of the targets), keys and values (of the sources), each
        ``[num_nodes, heads, head_dim]``, and the two batch vectors."""
        H, D, E = self.num_heads, self.head_dim, self.embed_dim
        dtype = self.out_proj.weight.dtype
        # A pair of batch vectors, not a list of graph ids (which is refused as not a tensor).
        batch_pair = isinstance(batch, (tuple, list)) and len(batch) == 2 \
            and all(b is None or isinstance(b, Tensor) for b in batch)
        if not isinstance(x, (tuple, list)):
            checks.check_features(self, x, E)
            checks.check_dtype(self, x, dtype)
            if not self._qkv_same_embed_dim:
                raise ValueError(f"SelfAttentionConv with kdim={self.kdim}, vdim={self.vdim} attends "
                                 f"across two node sets: pass x=(x_src, x_dst)")
            if batch_pair:
                raise ValueError("SelfAttentionConv takes one batch vector with one x (a pair with x=(x_src, x_dst))")
            checks.check_batch(self, batch, x.size(0))
            qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias).view(-1, 3, H, D)
            # One copy makes each of query, key and value contiguous, which
            # the edge gathers read several times faster than strided views.
            query, key, value = qkv.transpose(0, 1).contiguous()
            return query, key, value, batch, batch

        if len(x) != 2:
            raise ValueError(f"SelfAttentionConv expects x or a pair (x_src, x_dst), got {len(x)} tensors")
        x_src, x_dst = x
        x_key, x_value = x_src if isinstance(x_src, (tuple, list)) else (x_src, x_src)
        checks.check_features(self, x_dst, E, name="x_dst")
        checks.check_features(self, x_key, self.kdim, name="x_src (keys)" if x_key is not x_value else "x_src")
        checks.check_features(self, x_value, self.vdim, name="x_src (values)")
        for name, tensor in (("x_dst", x_dst), ("x_src", x_key), ("x_src (values)", x_value)):
            checks.check_dtype(self, tensor, dtype, name=name)
        if x_key.size(0) != x_value.size(0):
            raise ValueError(f"SelfAttentionConv expects as many key as value rows, got "
                             f"{x_key.size(0)} and {x_value.size(0)}")
        batch_src, batch_dst = batch if batch_pair else (batch, batch)
        if (batch_src is None) != (batch_dst is None):
            raise ValueError("SelfAttentionConv expects batch=(batch_src, batch_dst), both or neither")
        checks.check_batch(self, batch_src, x_key.size(0))
        checks.check_batch(self, batch_dst, x_dst.size(0))
        b_q, b_k, b_v = (None, None, None) if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        query = F.linear(x_dst, w_q, b_q).view(-1, H, D)
        key = F.linear(x_key, w_k, b_k).view(-1, H, D)
        value = F.linear(x_value, w_v, b_v).view(-1, H, D)
        return query, key, value, batch_src, batch_dst

    def edge_update(self, query: Tensor, key: Tensor, edge_index: Tensor, index: Tensor,
                    ptr: Optional[Tensor]) -> Tensor:
        # The scaled dot product of each edge's query (its target's) and key (its source's).
        score = self.edge_dot(query, key, edge_index) / math.sqrt(self.head_dim)  # [num_edges, heads]
        return self.normalize(score, index, ptr, query.size(0))

    @staticmethod
    def fully_connected_edges(batch_src: Optional[Tensor], batch_dst: Optional[Tensor],
                              num_sources: int, num_targets: int) -> Tensor:
        """Every source to every target of the same graph."""
        if batch_src is None:
            return graphs.fully_connected_bipartite([num_sources], [num_targets])
        num_graphs = graph_count(batch_src, batch_dst)
        return graphs.fully_connected_bipartite(graph_sizes(batch_src, num_graphs),
                                                graph_sizes(batch_dst, num_graphs))

    def attend_fully_connected(self, query: Tensor, key: Tensor, value: Tensor,
                               batch_src: Optional[Tensor], batch_dst: Optional[Tensor]) -> Tensor:
        """Dense attention inside each graph: every target attends to every
        source of its graph. Queries ``[num_targets, heads, head_dim]``, keys
        and values ``[num_sources, heads, head_dim]`` in, the attention output
        ``[num_targets, heads, head_dim]`` out. Graphs of equal sizes are a
        plain reshape; unequal ones are padded to the largest and the padded
        keys masked out."""
        H, D = self.num_heads, self.head_dim
        num_graphs = 0 if batch_src is None else graph_count(batch_src, batch_dst)
        if num_graphs == 0:  # One graph (or none at all).
            return self.scaled_dot_product(query[None], key[None], value[None], None)[0]
        sizes_src, sizes_dst = graph_sizes(batch_src, num_graphs), graph_sizes(batch_dst, num_graphs)
        if bool((sizes_src == sizes_src[0]).all()) and bool((sizes_dst == sizes_dst[0]).all()):
            out = self.scaled_dot_product(query.view(num_graphs, -1, H, D), key.view(num_graphs, -1, H, D),
                                          value.view(num_graphs, -1, H, D), None)
            return out.reshape(-1, H, D)
        longest_src, longest_dst = int(sizes_src.max()), int(sizes_dst.max())
        rows_dst, place_dst = padded_rows(batch_dst, sizes_dst, longest_dst)
        rows_src, _ = padded_rows(batch_src, sizes_src, longest_src)
        real_src = rows_src < key.size(0)
        q = pad(query, rows_dst).view(num_graphs, longest_dst, H, D)
        k = pad(key, rows_src).view(num_graphs, longest_src, H, D)
        v = pad(value, rows_src).view(num_graphs, longest_src, H, D)
        # A graph without sources would leave its queries with no key at all;
        # letting them see the padding (zero keys and values) keeps NaN out
        # and gives them the zero output of a node that attends to nothing.
        empty = (sizes_src == 0).to(real_src.device)
        mask = (real_src.view(num_graphs, longest_src) | empty.unsqueeze(1)).view(num_graphs, 1, 1, longest_src)
        out = self.scaled_dot_product(q, k, v, mask)  # [graphs, longest_dst, heads, head_dim]
        return out.reshape(-1, H, D).index_select(0, place_dst)

    def scaled_dot_product(self, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor]) -> Tensor:
        """SDPA on ``[graphs, nodes, heads, head_dim]`` tensors."""
        query, key, value = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
        dropout = self.dropout if self.training else 0.0
        return scaled_dot_product_attention(query, key, value, mask, dropout).transpose(1, 2)

    def __repr__(self) -> str:
        extra = "" if self._qkv_same_embed_dim else f", kdim={self.kdim}, vdim={self.vdim}"
        return f"{self.__class__.__name__}({self.embed_dim}, num_heads={self.num_heads}{extra})"


def padded_rows(batch: Tensor, sizes: Tensor, longest: int) -> Tuple[Tensor, Tensor]:
    """Where each row of a ``[graphs * longest]`` padding of the nodes of a
    sorted ``batch`` reads from (a node, or ``num_nodes``: the zero row that
    :func:`pad` appends), and where each node lands in it. Made from the
    batch alone, so the node tensors are only read, never written in place,
    which :func:`torch.func.vmap` needs."""
    num_nodes, sizes = batch.numel(), sizes.to(batch.device)
    start = torch.cumsum(sizes, 0) - sizes  # [graphs] each graph's first node
    place = batch * longest + torch.arange(num_nodes, device=batch.device) - start.index_select(0, batch)
    rows = torch.full((sizes.numel() * longest,), num_nodes, dtype=torch.long, device=batch.device)
    rows[place] = torch.arange(num_nodes, device=batch.device)
    return rows, place


def pad(nodes: Tensor, rows: Tensor) -> Tensor:
    """The rows ``rows`` of ``nodes`` with a zero row appended (see :func:`padded_rows`)."""
    return torch.cat([nodes, nodes.new_zeros(1, *nodes.shape[1:])]).index_select(0, rows)


def graph_count(batch_src: Tensor, batch_dst: Tensor) -> int:
    """The number of graphs two batch vectors span (the larger graph id + 1)."""
    counts = [int(b.max()) + 1 for b in (batch_src, batch_dst) if b.numel()]
    return max(counts, default=0)


def graph_sizes(batch: Tensor, num_graphs: int) -> Tensor:
    """The number of nodes of each graph of a sorted ``batch`` vector."""
    if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("SelfAttentionConv expects a sorted batch vector (nodes numbered "
                         "graph after graph, as PyG's loaders make them)")
    return graphs.batch_to_lengths(batch, num_graphs)
