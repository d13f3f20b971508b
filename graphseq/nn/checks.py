"""Input checks shared by every layer of :mod:`graphseq.nn`. A layer calls
these at the top of ``__init__`` and ``forward`` so that a wrong shape, an
unknown keyword or an edge pointing at a node that does not exist fails at
once, with a message that names the layer and the argument, instead of deep
inside a gather or a sparse product.

Checks that read tensor values (node indices out of range, negative indices)
need the values on the host. They are skipped while :func:`torch.compile`
traces a layer, where a host read would split the graph; shapes and dtypes
are always checked.
"""
from __future__ import annotations

import numbers

from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import compat

# The keyword arguments torch_geometric.nn.MessagePassing.__init__ takes.
MESSAGE_PASSING_KWARGS = ("aggr", "aggr_kwargs", "flow", "node_dim", "decomposed_layers")

INDEX_DTYPES = (torch.long, torch.int)

Layer = Union[str, torch.nn.Module]


def layer_name(layer: Layer) -> str:
    """The class name of ``layer`` (or ``layer`` itself when it is a string)."""
    return layer if isinstance(layer, str) else type(layer).__name__


def reading_values() -> bool:
    """Whether value checks may read tensors on the host (not while compiling)."""
    return not torch.compiler.is_compiling()


def version(tensor: Tensor) -> Optional[int]:
    """``tensor``'s count of in-place edits, to tell when a result kept for it
    is stale; :obj:`None` for an inference tensor (made under
    :func:`torch.inference_mode`), which counts none, so nothing may be kept
    for it."""
    return None if tensor.is_inference() else compat.edit_count(tensor)


def kept_stamp(tensor: Tensor) -> Optional[Tuple[int, bool]]:
    """What a graph kept for ``tensor`` (an ``edge_index``) must match to be
    used again: its :func:`version` and whether inference mode is on, since a
    graph made under it holds inference tensors that autograd refuses and one
    made outside it cannot be viewed inside. None: nothing may be kept."""
    edits = version(tensor)
    return None if edits is None else (edits, torch.is_inference_mode_enabled())


def check_kwargs(layer: Layer, kwargs: Mapping[str, Any],
                 allowed: Iterable[str] = MESSAGE_PASSING_KWARGS) -> None:
    """Refuses keyword arguments outside ``allowed`` with a :class:`TypeError`
    naming the layer (not the base class they would otherwise reach)."""
    allowed = tuple(allowed)
    unknown = [key for key in kwargs if key not in allowed]
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        besides = f" (besides its own it takes {', '.join(allowed)})" if allowed else ""
        raise TypeError(f"{layer_name(layer)} got unexpected keyword argument(s) {names}{besides}")


def check_option(layer: Layer, name: str, value: Any, default: Any, reason: str = "") -> None:
    """Refuses an option the layer does not implement unless it has its
    default value, so that weights or settings made for another layer are
    never loaded silently with a different meaning."""
    if value != default:
        raise ValueError(f"{layer_name(layer)} does not implement {name}={value!r}"
                         + (f": {reason}" if reason else ""))


def check_sizes(layer: Layer, lazy: bool = False, **sizes: Any) -> None:
    """Each of ``sizes`` (a number of channels, or a sequence of them) must be
    a whole number >= 1 (or -1, to be inferred on the first call, when ``lazy``)."""
    for name, value in sizes.items():
        for size in (value if isinstance(value, (tuple, list)) else [value]):
            if isinstance(size, bool) or not isinstance(size, int) or not (size >= 1 or lazy and size == -1):
                each = "each of " if isinstance(value, (tuple, list)) else ""
                raise ValueError(f"{layer_name(layer)} needs {each}{name} to be a whole number >= 1"
                                 f"{' (or -1, inferred)' if lazy else ''}, got {value!r}")


def check_probability(layer: Layer, name: str, value: float) -> None:
    """A number in [0, 1]; not a bool or a string (refused as torch.nn.LSTM does)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{layer_name(layer)} needs {name} to be a number in [0, 1], got {value!r}")


def check_tensor(layer: Layer, value: Any, name: str) -> None:
    """``value`` must be a tensor (or None, for an optional argument): a list
    would otherwise fail deep inside with an unrelated AttributeError."""
    if value is not None and not isinstance(value, Tensor):
        raise TypeError(f"{layer_name(layer)} expects {name} to be a tensor, got {type(value).__name__}")


def check_features(layer: Layer, x: Tensor, channels: Optional[int], name: str = "x") -> None:
    """``x`` must be a 2-D ``[num_nodes, channels]`` tensor (any number of
    channels when ``channels`` is None or -1)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{layer_name(layer)} expects {name} to be a tensor, got {type(x).__name__}")
    if x.dim() != 2 or (channels not in (None, -1) and x.size(1) != channels):
        expected = "num_channels" if channels in (None, -1) else channels
        raise ValueError(f"{layer_name(layer)} expects {name} of shape [num_nodes, {expected}], "
                         f"got {list(x.shape)}")
    if not (x.is_floating_point() or x.is_complex()):
        raise ValueError(f"{layer_name(layer)} expects {name} of a floating-point dtype, got {x.dtype}")


def check_dtype(layer: Layer, tensor: Optional[Tensor], dtype: torch.dtype, name: str = "x") -> None:
    """A dense ``tensor`` must have the dtype of the layer's weights, said as
    the recurrent layers (and torch.nn.LSTM) say it rather than deep inside a
    matrix product. Not checked under autocast, which mixes dtypes itself, nor
    for sparse features, which are multiplied in the weights' dtype."""
    if tensor is None or tensor.layout != torch.strided or tensor.dtype == dtype \
            or torch.is_autocast_enabled(tensor.device.type):
        return
    raise ValueError(f"{layer_name(layer)} expects {name} of dtype {dtype}, like its weights, got {tensor.dtype}; "
                     f"convert the input (.to({dtype})) or the layer (layer.to({tensor.dtype}))")


def check_edge_index(layer: Layer, edge_index: Tensor, num_nodes: Union[int, Tuple[int, int]],
                     name: str = "edge_index") -> None:
    """``edge_index`` must be an integer ``[2, num_edges]`` tensor whose sources
    lie in ``[0, num_source_nodes)`` and targets in ``[0, num_target_nodes)``;
    ``num_nodes`` is one count or the pair ``(num_source_nodes, num_target_nodes)``."""
    layer = layer_name(layer)
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{layer} expects {name} to be a tensor, got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{layer} expects {name} of shape [2, num_edges], got {list(edge_index.shape)}")
    if edge_index.dtype not in INDEX_DTYPES:
        raise ValueError(f"{layer} expects {name} of dtype torch.long (or torch.int), got {edge_index.dtype}")
    if edge_index.numel() == 0 or not reading_values():
        return
    num_source, num_target = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
    if num_source == num_target:
        low, high = torch.stack(torch.aminmax(edge_index.as_subclass(Tensor))).tolist()
        check_range(layer, name, low, high, num_source, "")
    else:  # One read for the four bounds.
        bounds = torch.stack(torch.aminmax(edge_index.as_subclass(Tensor), dim=1), dim=1).tolist()
        check_range(layer, f"{name}[0]", *bounds[0], num_source, "source ")
        check_range(layer, f"{name}[1]", *bounds[1], num_target, "target ")


def check_range(layer: str, name: str, low: int, high: int, num_nodes: int, role: str) -> None:
    if low < 0:
        raise ValueError(f"{layer}: {name} holds a negative node index ({low}); "
                         f"node indices count from 0")
    if high >= num_nodes:
        raise ValueError(f"{layer}: {name} refers to {role}node {high}, but there are only "
                         f"{num_nodes} {role}nodes")


def check_size(layer: Layer, size: Optional[Sequence[Optional[int]]],
               num_nodes: Tuple[Optional[int], Optional[int]]) -> Tuple[int, int]:
    """The ``(num_source_nodes, num_target_nodes)`` of a ``size`` argument,
    checked against the node counts the features give (None: not known)."""
    layer = layer_name(layer)
    if size is None:
        if num_nodes[1] is None:
            raise ValueError(f"{layer} needs size=(num_source_nodes, num_target_nodes) "
                             f"when the target features are None")
        return num_nodes[0], num_nodes[1]
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise ValueError(f"{layer} expects size as a pair (num_source_nodes, num_target_nodes), got {size}")
    size = tuple(num if given is None else int(given) for given, num in zip(size, num_nodes))
    for role, given, num in zip(("source", "target"), size, num_nodes):
        if given is None:
            raise ValueError(f"{layer} needs the number of {role} nodes in size, got {size}")
        if num is not None and given != num:
            raise ValueError(f"{layer}: size gives {given} {role} nodes, but the features hold {num}")
    return size


def check_batch(layer: Layer, batch: Optional[Tensor], num_nodes: int) -> None:
    """``batch`` (graph id per node) must be an integer ``[num_nodes]`` tensor."""
    if batch is None:
        return
    check_tensor(layer, batch, "batch")
    if batch.dim() != 1 or batch.size(0) != num_nodes:
        raise ValueError(f"{layer_name(layer)} expects batch of shape [{num_nodes}] "
                         f"(one graph id per node), got {list(batch.shape)}")
    if batch.dtype not in INDEX_DTYPES:
        raise ValueError(f"{layer_name(layer)} expects batch of dtype torch.long, got {batch.dtype}")
    if batch.numel() and reading_values() and int(batch.min()) < 0:
        raise ValueError(f"{layer_name(layer)}: batch holds a negative graph id ({int(batch.min())})")


def check_edge_features(layer: Layer, edge_attr: Optional[Tensor], num_edges: int,
                        channels: Optional[int], name: str = "edge_attr") -> None:
    """``edge_attr`` must hold one row (or one value) per edge, of ``channels``
    features when given."""
    if edge_attr is None:
        return
    layer = layer_name(layer)
    if edge_attr.dim() not in (1, 2) or edge_attr.size(0) != num_edges:
        raise ValueError(f"{layer} expects {name} of shape [num_edges={num_edges}, "
                         f"{channels if channels is not None else 'edge_dim'}], got {list(edge_attr.shape)}")
    width = 1 if edge_attr.dim() == 1 else edge_attr.size(1)
    if channels is not None and width != channels:
        raise ValueError(f"{layer} expects {name} with {channels} features per edge (edge_dim), "
                         f"got {list(edge_attr.shape)}")
