"""What the stages of one run share: the run's settings (its folder, device,
seed, data places, log) and the products that stages hand on to later ones,
each a declared field. A stage declares the products it ``makes`` and
``needs`` by these fields' names (:func:`~graphseq.stages.registry.stage`),
and the runner checks the order of a pipeline's sections against them
before anything is written.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from ..errors import GraphseqError


def product(what: str) -> Any:
    """A field of :class:`Context` that a stage makes for later ones; ``what``
    is how a message names it ("the latest image encoder comes from ...")."""
    return field(default=None, metadata={"product": what})


@dataclass
class Context:
    """One run of a pipeline, as its stages see it.

    ``resume`` tells a stage to continue from its file in ``out``;
    ``resume_command`` is what a person types to continue this run, and a
    stage sets ``stopped`` when its oracle asked to stop (no later seed
    runs). ``metrics``: the running section's own metrics, read through to
    the earlier sections'. ``runner``: what a stage that runs or checks
    pipelines of its own calls (``run``, ``checked_config``, ``precheck``),
    so that no stage imports the runner. ``section``: the running section's
    name, as a user names its keys (``--set train.steps=N``).
    """

    pipeline: str
    out: Path
    device: torch.device
    seed: int
    data_root: Path
    data_mirror: Optional[Path]
    quiet: bool = False
    resume: bool = False
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("graphseq"))
    metrics: Dict[str, Any] = field(default_factory=dict)
    options: Dict[str, Any] = field(default_factory=dict)
    resume_command: str = ""
    stopped: bool = False
    section: str = ""
    runner: Any = None

    # What stages hand on to later ones.
    data: Any = product("data")
    model: Any = product("model")  # a module, or what builds one (per fold, per strategy)
    encoder: Optional[torch.nn.Module] = product("image encoder")
    corpus: Any = product("corpus")
    tokenizer: Any = product("tokenizer")
    trained: Optional[Dict[str, torch.nn.Module]] = product("trained model")  # by the section that trained it
    curves: Optional[Dict[str, Any]] = product("learning curves")
    pretrained: Any = product("pretrained models")
    task: Any = product("active-learning task")  # what is labelled: classes, pool, how to show an item
    num_features: Optional[int] = product("number of features")
    num_classes: Optional[int] = product("number of classes")
    sampling: Any = product("neighbour sampling")  # how a node classifier was trained, to infer alike
    tokenizer_sha256: Optional[str] = product("tokenizer's digest")
    start: Optional[Path] = product("finished run")  # the folder of a run the later trainings start from

    def require(self, name: str, stage: str) -> Any:
        """The product ``name``, or an error that names the section which
        needed it and no section before made."""
        value = getattr(self, name, None)
        if value is None:
            where = f"[{self.section}] ({stage})" if self.section else f"stage {stage!r}"  # (a stage called by hand)
            raise GraphseqError(f"{where} needs {name!r}, which no section before it made; "
                                f"check the order of the pipeline's sections")
        return value


# The products, by field name: what a stage may declare that it makes or needs.
PRODUCTS: Dict[str, str] = {f.name: f.metadata["product"] for f in fields(Context) if "product" in f.metadata}
