"""The one place where :mod:`graphseq.nn` reads private parts of torch and
PyG. The layers' fast paths need a few answers neither library gives in
public: whether a hook is registered on a layer, whether a :mod:`torch.func`
transform or forward-mode AD is active, oneDNN's matrix product, a tensor's
count of in-place edits, the edge mask an explainer set, and PyG's gather of
``_j`` arguments. Each is read here behind a check that it exists (as in torch
2.13 and PyG 2.8, the versions tested); where it does not, the answer is the
safe one: the edges count as observed, autograd as unusual, the product as
missing and nothing is kept, so the layers take their plain path, with the
same numbers.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import torch
from torch import Tensor
from torch.autograd import forward_ad
from torch_geometric.nn import MessagePassing

# MessagePassing's hook dictionaries (PyG 2.3-2.8): any hook sees the edges one by one.
HOOK_DICTS = tuple(f"_{stage}_forward{kind}_hooks" for stage in ("propagate", "message", "aggregate", "edge_update")
                   for kind in ("_pre", ""))


def edges_observed(layer: MessagePassing) -> bool:
    """Whether anything looks at the edges of ``layer`` one by one in the
    user's order: an explainer, a decomposition, or any propagate, message,
    aggregate or edge_update hook. A PyG without these hook dictionaries
    counts as observed."""
    if layer.explain or layer.decomposed_layers > 1:
        return True
    return any(getattr(layer, name, True) for name in HOOK_DICTS)


def plain_autograd() -> bool:
    """Whether gradients, if any, come from ordinary reverse-mode autograd:
    no :mod:`torch.func` transform (grad, jacrev, vmap) and no forward-mode
    AD level is active. The hand-written autograd Functions of the fast paths
    serve that alone; where torch cannot tell, they step aside."""
    functorch = getattr(torch._C, "_functorch", None)
    level = getattr(forward_ad, "_current_level", None)
    if functorch is None or not hasattr(functorch, "peek_interpreter_stack") or level is None:
        return False
    return functorch.peek_interpreter_stack() is None and level < 0


def assume(condition) -> None:
    """Tells :func:`torch.compile` that ``condition`` (about sizes) holds."""
    if hasattr(torch, "_check"):
        torch._check(condition)


def edit_count(tensor: Tensor) -> Optional[int]:
    """``tensor``'s count of in-place edits (None where torch keeps none)."""
    return getattr(tensor, "_version", None)


def explainer_edge_mask(layer: MessagePassing) -> Optional[Tensor]:
    """The edge mask a PyG explainer set on ``layer``
    (:func:`torch_geometric.explain.algorithm.utils.set_masks`), through a
    sigmoid when the explainer asked for one, as PyG's ``explain_message``
    reads it; None when there is none."""
    mask = getattr(layer, "_edge_mask", None)
    if mask is not None and getattr(layer, "_apply_sigmoid", True):
        mask = mask.sigmoid()
    return mask


_ONEDNN_LINEAR: object = False  # not looked up yet


def onednn_linear() -> Optional[Callable]:
    """torch's oneDNN linear op (``mkldnn::_linear_pointwise``), or None where
    this build has none or it does not answer as it does in torch 2.13 (its
    signature may change in another release: tried once on a small product)."""
    global _ONEDNN_LINEAR
    if _ONEDNN_LINEAR is False:
        _ONEDNN_LINEAR = None
        try:
            if torch.backends.mkldnn.is_available():
                linear = torch.ops.mkldnn._linear_pointwise
                a, weight = torch.arange(6.0).view(2, 3), torch.arange(12.0).view(4, 3)
                with torch.no_grad():
                    if torch.equal(linear(a, weight, None, "none", [], ""), a @ weight.t()):
                        _ONEDNN_LINEAR = linear
        except Exception:  # any failure of a private op leaves torch.mm to serve
            _ONEDNN_LINEAR = None
    return _ONEDNN_LINEAR


class WholeRowMessages:
    """A :class:`~torch_geometric.nn.MessagePassing` mixin for edges that
    leave every row of a node tensor once, in order (edge ``k`` from row
    ``k``): inside :meth:`whole_rows`, a ``_j`` argument is that tensor as it
    is, with no gather (no copy forward, no zero-filled scatter backward).
    It overrides PyG's private ``_index_select`` (PyG 2.3-2.8); where PyG has
    none, the rows are gathered as usual."""

    _whole_rows = False

    @contextlib.contextmanager
    def whole_rows(self) -> Iterator[None]:
        self._whole_rows = True
        try:
            yield
        finally:
            self._whole_rows = False

    if hasattr(MessagePassing, "_index_select"):
        def _index_select(self, src: Tensor, index: Tensor) -> Tensor:
            if self._whole_rows:
                return src
            return super()._index_select(src, index)
