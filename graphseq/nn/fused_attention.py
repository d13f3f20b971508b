"""The fused path of the attention layers (:class:`~graphseq.nn.AttentionConv`).

On the plain path, ``propagate`` makes every edge's message ``alpha_ij v_j``
(``[num_edges, heads, channels]``) and sums them into each target. Here the
edges are grouped by target once per graph (:class:`GroupedEdges`, kept
with the graph), the softmax runs on contiguous segments and the sum is one
sparse-dense product for all heads (:class:`~graphseq.nn.sparse.SparseAggregate`,
through PyG's ``message_and_aggregate``); a dot-product score
(:meth:`AttentionConv.edge_dot`) is torch's sampled product on the same
pattern. No ``[num_edges, heads, channels]`` tensor is made.

The scores are the layer's own :meth:`edge_update`. It runs in the user's
edge order, as on the plain path, so that a score drawing random numbers per
edge or reading per-edge inputs needs to know nothing of this path, and
:meth:`AttentionConv.normalize` groups the scores it is given. A layer whose
class declares ``deterministic_scores`` (GAT, self-attention) is scored on the
grouped edges directly, its per-edge inputs reordered to match, which saves
a reordering of every score. The dropout mask is drawn in the user's order:
both paths give the same numbers for the same seed.

:class:`~graphseq.nn.AttentionConv` asks :func:`applies` once per call and
hands the call to :func:`attend`. The dense counterpart, the kernel choice of
:class:`~graphseq.nn.SelfAttentionConv` on fully connected graphs, is
:func:`scaled_dot_product_attention`.
"""
from __future__ import annotations

import functools
import inspect
from typing import Mapping, Optional, Tuple

import torch
import torch.nn.attention
import torch.nn.functional as F
from torch import Tensor
from torch_geometric import EdgeIndex

from .. import graphs
from . import compat
from .attention_graph import AttentionGraph
from .sparse import EdgePattern, Permute, SampledDot, fused_kernels_apply, segment_softmax


def applies(layer, value: Tensor, graph: AttentionGraph) -> bool:
    """Whether the fused path may run: nothing observes the edges (hooks, an
    explainer, a decomposition), we are not compiling or tracing
    (:func:`torch.jit.trace` records tensor inputs only, and the sparse
    products take the edges' pattern) nor under a :mod:`torch.func`
    transform or autocast (which picks each op's precision), and the kernels
    serve ``value``'s device and dtype."""
    # Compiling and tracing first: the number of edges may be one the
    # compiler cannot compare with 0 (it depends on the data).
    return (not torch.compiler.is_compiling() and not torch.jit.is_tracing()
            and fused_kernels_apply(value) and graph.num_edges > 0 and not compat.edges_observed(layer)
            and not torch.is_autocast_enabled(value.device.type) and compat.plain_autograd())


def attend(layer, graph: AttentionGraph, value: Tensor, edge_attr: Optional[Tensor],
           edge_inputs: Mapping[str, Tensor], score_inputs: Mapping[str, object],
           need_weights: bool) -> Tuple[Tensor, Optional[Tensor]]:
    """:meth:`AttentionConv.attend` on the fused path (see the module)."""
    refuse_edge_tensors(layer, graph, score_inputs)
    grouped = group_by_target(graph)
    # As the class that wrote edge_update says (a subclass that rewrites it scores in the user's order).
    author = next(cls for cls in type(layer).__mro__ if "edge_update" in vars(cls))
    scores_grouped = vars(author).get("deterministic_scores", False)
    if scores_grouped:  # Scored on the grouped edges: per-edge inputs follow them.
        edges = grouped.edges
        edge_attr = None if edge_attr is None else grouped.group(edge_attr)
        edge_inputs = {name: grouped.group(tensor) for name, tensor in edge_inputs.items()}
    else:  # Scored in the user's order, as on the plain path; normalize groups the weights.
        edges = graph.edge_index
    layer.fused_scoring = Scoring(grouped, user_order=not scores_grouped)
    try:
        alpha = layer.edge_updater(edges, edge_attr=edge_attr, **edge_inputs, **score_inputs)  # grouped
    finally:
        layer.fused_scoring = None
    if layer.training and layer.dropout > 0:  # The mask is drawn in the user's order.
        alpha = alpha * grouped.group(F.dropout(alpha.new_ones(graph.num_edges, alpha.size(1)), p=layer.dropout))
    out = layer.propagate(grouped.edge_index, x=value, alpha=alpha)  # message_and_aggregate
    return out, grouped.user_order(alpha) if need_weights else None


class GroupedEdges:
    """The edges of an :class:`AttentionGraph` grouped by target (stably):
    ``edges`` ``[2, num_edges]``, the same as an
    :class:`~torch_geometric.EdgeIndex` sorted by column that carries its
    :class:`~graphseq.nn.sparse.EdgePattern` (``edge_index``, on which
    PyG's ``propagate`` calls ``message_and_aggregate``), and ``perm``, which
    reads the user's edge order into them (None when the edges were grouped
    already)."""

    def __init__(self, graph: AttentionGraph):
        edges, self.perm = graphs.sort_by_target(graph.edge_index, graph.size[1])
        self.edges = edges.contiguous()
        self.edge_index = EdgeIndex(self.edges, sparse_size=graph.size, sort_order="col")
        (ptr, source), _ = self.edge_index.get_csc()
        self.pattern = self.edge_index.pattern = EdgePattern(ptr, source, graph.size[0])

    @functools.cached_property
    def inverse(self) -> Tensor:
        """Reads the grouped order into the user's (``perm``'s inverse)."""
        inverse = torch.empty_like(self.perm)
        inverse[self.perm] = torch.arange(self.perm.numel(), device=self.perm.device)
        return inverse

    def group(self, values: Tensor) -> Tensor:
        """Edge values in the user's order, grouped by target."""
        return values if self.perm is None else Permute.apply(values, self.perm, self.inverse)

    def user_order(self, values: Tensor) -> Tensor:
        """Edge values grouped by target, in the user's order."""
        return values if self.perm is None else Permute.apply(values, self.inverse, self.perm)


class Scoring:
    """What :meth:`AttentionConv.normalize` and :meth:`~AttentionConv.edge_dot`
    do on the fused path, where :meth:`edge_update` scores the edges in the
    user's order (``user_order``) or grouped by target."""

    def __init__(self, edges: GroupedEdges, user_order: bool):
        self.edges, self.user_order = edges, user_order

    def softmax(self, score: Tensor) -> Tensor:
        """The softmax of ``score`` over each target's edges, grouped by target."""
        if self.user_order:
            score = self.edges.group(score)
        return segment_softmax(score, self.edges.pattern.ptr, self.edges.pattern.target)

    def dot(self, query: Tensor, key: Tensor) -> Tensor:
        """``query[i] . key[j]`` for every edge ``j -> i``, in the scoring order."""
        score = SampledDot.apply(self.edges.pattern, query, key)
        return self.edges.user_order(score) if self.user_order else score


def group_by_target(graph: AttentionGraph) -> GroupedEdges:
    """``graph``'s :class:`GroupedEdges`, made on first use and kept with it."""
    if graph.grouped is None:
        graph.grouped = GroupedEdges(graph)
    return graph.grouped


def refuse_edge_tensors(layer, graph: AttentionGraph, score_inputs: Mapping[str, object]) -> None:
    """Refuses a tensor of one row per edge among ``score_inputs`` that
    :meth:`edge_update` reads as it is (an argument without an ``_i``/``_j``
    suffix): per-edge tensors go in ``edge_inputs`` or ``edge_attr``, as
    :meth:`AttentionConv.attend` asks. Node tensors of as many rows as there
    are edges cannot be told apart and pass."""
    if graph.num_edges in graph.size:
        return
    for name in inspect.signature(layer.edge_update).parameters:
        tensor = score_inputs.get(name)
        if (name[-2:] not in ("_i", "_j") and isinstance(tensor, Tensor) and tensor.dim() > 0
                and tensor.size(0) == graph.num_edges):
            raise ValueError(f"{type(layer).__name__}.attend got {name!r} with one row per edge "
                             f"({graph.num_edges}); pass per-edge tensors in edge_inputs={{{name!r}: ...}} "
                             f"(or edge_attr), which follow the edges on either path")


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor],
                                 dropout: float) -> Tensor:
    """Torch's SDPA on ``[graphs, heads, nodes, head_dim]`` tensors, through
    the kernel that serves the autograd at work: the math kernel (plain
    differentiable ops) under :mod:`torch.func` and forward-mode AD, which
    torch's fused CPU kernels do not serve; :class:`TwiceDifferentiableSDPA`
    when a gradient may be differentiated again; else torch's own choice."""
    if not torch.compiler.is_compiling() and not compat.plain_autograd():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
    if dropout > 0 or torch.compiler.is_compiling() or not torch.is_grad_enabled():
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
    return TwiceDifferentiableSDPA.apply(query, key, value, mask)


class TwiceDifferentiableSDPA(torch.autograd.Function):
    """:func:`~torch.nn.functional.scaled_dot_product_attention` (no dropout)
    whose gradient is differentiable again. Torch's fused CPU and CUDA kernels
    have no second derivative (nor has :class:`torch.nn.MultiheadAttention`):
    the first backward pass here is theirs, and only when a graph of the
    gradient is asked for (``create_graph=True``) is the attention redone
    with the math kernel and differentiated through."""

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor]) -> Tensor:
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_() for t in (query, key, value)]
            out = F.scaled_dot_product_attention(*inputs, attn_mask=mask)
        ctx.save_for_backward(query, key, value)
        ctx.inner, ctx.mask = (inputs, out), mask
        return out.detach()

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        query, key, value = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: through the math kernel.
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                out = F.scaled_dot_product_attention(query, key, value, attn_mask=ctx.mask)
            wanted = [t for t, need in zip((query, key, value), ctx.needs_input_grad) if need]
            found = iter(torch.autograd.grad(out, wanted, grad_out, create_graph=True))
            return (*[next(found) if need else None for need in ctx.needs_input_grad[:3]], None)
        if ctx.inner is None:  # A second pass through a retained graph: redo the forward.
            with torch.enable_grad():
                inputs = [t.detach().requires_grad_() for t in (query, key, value)]
                ctx.inner = (inputs, F.scaled_dot_product_attention(*inputs, attn_mask=ctx.mask))
        (inputs, out), ctx.inner = ctx.inner, None
        return (*torch.autograd.grad(out, inputs, grad_out), None)
