"""Stage: load a Planetoid citation graph onto the run's device."""
from __future__ import annotations

from .. import distributed
from ..checks import Domain, one_of
from ..data.planetoid import NAMES, load_planetoid
from ..graphs import to_csr
from .registry import stage


@stage("planetoid", checks={"name": Domain(f"one of {', '.join(NAMES.values())} (any case)",
                                           lambda v: v.lower() in NAMES),
                            "split": one_of("public", "full", "random")},
       makes={"data": "a graph dataset"})
def planetoid(ctx, *, name: str = "Cora", split: str = "public", normalize_features: bool = True,
              sparse_features: bool = True) -> None:
    """Sets ``ctx.data`` (features stored sparsely if ``sparse_features``),
    ``ctx.num_features`` and ``ctx.num_classes``."""
    with distributed.main_first():  # One process downloads and processes the files.
        data = load_planetoid(name, ctx.data_root, ctx.data_mirror, split=split,
                              normalize_features=normalize_features, log=ctx.log)
    ctx.log.info(f"{name}: {data.num_nodes} nodes, {data.num_edges} edges, "
                 f"{data.num_features} features, split {split} "
                 f"({int(data.train_mask.sum())}/{int(data.val_mask.sum())}/{int(data.test_mask.sum())})")
    ctx.num_features = data.num_features
    ctx.num_classes = int(data.y.max()) + 1
    if sparse_features:
        data.x = to_csr(data.x)
    ctx.data = data.to(ctx.device)
