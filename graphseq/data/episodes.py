"""Few-shot episodes as graphs (Garcia & Bruna, ICLR 2018). An N-way K-shot
episode is a small fully connected graph: K labelled images of each of N
classes, optionally ``unlabelled`` more images of each class whose labels are
hidden (semi-supervised and active learning), and one query image whose class
is to be found. Classifying the query is node classification.

:class:`EpisodeSampler` draws a batch of episodes at once as one batched PyG
graph. It samples indices into the tensor of all images of a split and gathers
them in one indexing operation: no per-image Python work on the way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from .. import graphs
from ..checks import is_integer
from ..errors import GraphseqError


@dataclass
class FewShotClasses:
    """The images of one split, class by class.

    Attributes:
        images: ``uint8`` tensor ``[num_classes, per_class, channels, height,
            width]``: every class has the same number of images.
        names: the name of each class.
        mean, std: an image ``x`` in ``[0, 255]`` is fed to the network as
            ``(x / 255 - mean) / std`` (a float, or one per channel).
    """

    images: Tensor
    names: List[str]
    mean: float | Tuple[float, ...] = 0.5
    std: float | Tuple[float, ...] = 0.5

    def __post_init__(self):
        if self.images.dim() != 5:
            raise ValueError(f"FewShotClasses expects images of shape [classes, per_class, channels, "
                             f"height, width], got {list(self.images.shape)}")
        if len(self.names) != self.images.size(0):
            raise ValueError(f"{len(self.names)} class names for {self.images.size(0)} classes")
        if self.images.dtype != torch.uint8:
            raise ValueError(f"FewShotClasses needs uint8 images (pixels 0-255), got {self.images.dtype}")
        channels = self.images.size(2)
        for name in ("mean", "std"):
            values = torch.as_tensor(getattr(self, name), dtype=torch.float32)
            if values.dim() > 1 or values.numel() not in (1, channels):
                raise ValueError(f"FewShotClasses {name} needs one value or one per channel ({channels}), "
                                 f"got {getattr(self, name)!r}")

    @property
    def num_classes(self) -> int:
        return self.images.size(0)

    @property
    def per_class(self) -> int:
        return self.images.size(1)

    def normalize(self, images: Tensor) -> Tensor:
        """``uint8`` images ``[..., channels, height, width]`` as network inputs."""
        channels = images.size(-3)
        mean = torch.as_tensor(self.mean, dtype=torch.float32, device=images.device).expand(channels)
        std = torch.as_tensor(self.std, dtype=torch.float32, device=images.device).expand(channels)
        return (images.float() / 255 - mean.view(-1, 1, 1)) / std.view(-1, 1, 1)


def distinct_draws(rows: int, k: int, n: int, generator: Optional[torch.Generator] = None) -> Tensor:
    """``[rows, k]`` integers from ``0 .. n-1``, distinct within each row, each
    row uniform over the ordered k-subsets."""
    if n <= 64 * k:  # Few to choose from: a random permutation of each row.
        return torch.rand(rows, n, generator=generator).argsort(dim=1)[:, :k]
    # Many to choose from: draw with replacement and redraw the rows that
    # repeat a value (rare), which costs O(rows k) instead of O(rows n).
    draws = torch.randint(n, (rows, k), generator=generator)
    while True:
        ordered = draws.sort(dim=1).values
        repeats = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1).nonzero().flatten()
        if repeats.numel() == 0:
            return draws
        draws[repeats] = torch.randint(n, (repeats.numel(), k), generator=generator)


class EpisodeSampler:
    r"""Draws batches of N-way K-shot episodes from the classes of a split.

    Each episode has ``ways`` distinct classes; of each class ``shots``
    labelled and ``unlabelled`` unlabelled images, and the episode's one query
    image belongs to one of its classes, drawn uniformly. No image appears
    twice in an episode. The nodes of an episode are numbered: the labelled
    ones class by class, then the unlabelled ones class by class, then the
    query, so that every episode of a batch has the same layout.

    Args:
        classes (FewShotClasses): the images to draw from.
        ways (int): classes per episode (N).
        shots (int): labelled images per class (K).
        unlabelled (int): images per class whose label is hidden.
            (default: :obj:`0`)

    Example:
        >>> images = torch.randint(0, 256, (20, 10, 1, 28, 28), dtype=torch.uint8)
        >>> classes = FewShotClasses(images, [f"class {c}" for c in range(20)])  # 20 classes of 10 images
        >>> sampler = EpisodeSampler(classes, ways=5, shots=1)
        >>> batch = sampler.sample(32, torch.Generator().manual_seed(0))
        >>> batch.x.shape, batch.edge_index.shape
        (torch.Size([192, 1, 28, 28]), torch.Size([2, 960]))
    """

    def __init__(self, classes: FewShotClasses, ways: int, shots: int, unlabelled: int = 0):
        for name, value in (("ways", ways), ("shots", shots), ("unlabelled", unlabelled)):
            if not is_integer(value):
                raise GraphseqError(f"EpisodeSampler needs a whole number for {name}, got {value!r}")
        ways, shots, unlabelled = int(ways), int(shots), int(unlabelled)
        if ways < 2:
            raise GraphseqError(f"an episode needs at least 2 classes, got ways={ways}")
        if shots < 1:
            raise GraphseqError(f"an episode needs at least 1 labelled image per class, got shots={shots}")
        if unlabelled < 0:
            raise GraphseqError(f"unlabelled must be non-negative, got {unlabelled}")
        if ways > classes.num_classes:
            raise GraphseqError(f"{ways}-way episodes need {ways} classes; this split has "
                                f"{classes.num_classes}")
        if shots + unlabelled + 1 > classes.per_class:
            raise GraphseqError(f"{shots} labelled + {unlabelled} unlabelled + 1 query image per class "
                                f"need {shots + unlabelled + 1} images of a class; there are {classes.per_class}")
        self.classes = classes
        self.ways, self.shots, self.unlabelled = ways, shots, unlabelled
        self._edges: Dict[int, Tensor] = {}

    @property
    def episode_size(self) -> int:
        """Nodes per episode: the labelled and unlabelled images and the query."""
        return self.ways * (self.shots + self.unlabelled) + 1

    def layout(self) -> Tuple[Tensor, Tensor, Tensor]:
        """For the nodes of one episode: the position of each node's class
        among the episode's classes (the query's is ``-1``, it varies), and
        whether the node is labelled, and whether it is the query."""
        n, k, r = self.ways, self.shots, self.unlabelled
        way = torch.cat([torch.arange(n).repeat_interleave(k), torch.arange(n).repeat_interleave(r),
                         torch.tensor([-1])])
        labelled = torch.zeros(self.episode_size, dtype=torch.bool)
        labelled[:n * k] = True
        query = torch.zeros(self.episode_size, dtype=torch.bool)
        query[-1] = True
        return way, labelled, query

    def check_per_support(self, num_episodes: int, per_support: int) -> None:
        """Refuses a ``num_episodes`` that is not a whole number >= 0, and a
        ``per_support`` that does not divide it or asks for more queries than
        a class has images left."""
        if not is_integer(num_episodes) or num_episodes < 0:
            raise GraphseqError(f"EpisodeSampler.sample needs a whole number of episodes >= 0, "
                                f"got {num_episodes!r}")
        if not is_integer(per_support):
            raise GraphseqError(f"EpisodeSampler.sample needs a whole number for per_support, "
                                f"got {per_support!r}")
        if per_support < 1 or num_episodes % per_support:
            raise GraphseqError(f"episodes per support set ({per_support}) must be at least 1 and divide "
                                f"the number of episodes ({num_episodes})")
        need = self.shots + self.unlabelled + per_support
        if need > self.classes.per_class:
            raise GraphseqError(f"{per_support} episodes per support set need {self.shots} labelled + "
                                f"{self.unlabelled} unlabelled + {per_support} query images of a class, "
                                f"{need}; there are {self.classes.per_class}")

    def sample_indices(self, num_episodes: int, generator: Optional[torch.Generator] = None,
                       per_support: int = 1) -> Tuple[Tensor, Tensor, Tensor]:
        """The draw alone: the episodes' classes ``[num_episodes, ways]``
        (indices into the split), which of them the query belongs to
        ``[num_episodes]``, and each node's image as ``(class, image)``
        indices ``[num_episodes, episode_size, 2]``.

        With ``per_support`` > 1, each run of ``per_support`` consecutive
        episodes shares its classes, labelled and unlabelled images and
        differs only in the query (distinct images, none of them in the
        support): the CNN then embeds an image once for several losses.
        Each episode alone is still an ordinary draw."""
        self.check_per_support(num_episodes, per_support)
        n, k, r, m = self.ways, self.shots, self.unlabelled, per_support
        groups = num_episodes // m
        classes = distinct_draws(groups, n, self.classes.num_classes, generator)  # [groups, ways]
        # A random order of each class's images: the first k are labelled,
        # the next m are the group's queries of that class (query j takes
        # position k + j if it is of that class), and the r after them are
        # unlabelled. Distinct positions, so no image twice in an episode,
        # nor a query twice in a group; and the same draw without the
        # unlabelled images (r = 0) is the same episode with those nodes
        # left out. With m = 1 this is the draw of one episode at a time.
        order = torch.rand(groups, n, self.classes.per_class, generator=generator).argsort(dim=-1)
        order = order[..., :k + m + r]  # [groups, ways, k + m + r]
        target = torch.randint(n, (groups, m), generator=generator)

        labelled = order[..., :k].flatten(1)                   # [groups, n k], class-major
        hidden = order[..., k + m:].flatten(1)                 # [groups, n r]
        rows = torch.arange(groups).unsqueeze(1)
        query = order[rows, target, k + torch.arange(m)]       # [groups, m]
        image = torch.cat([labelled.repeat_interleave(m, dim=0), hidden.repeat_interleave(m, dim=0),
                           query.reshape(-1, 1)], dim=1)       # [episodes, episode_size]
        classes = classes.repeat_interleave(m, dim=0)          # [episodes, ways]
        target = target.flatten()                              # [episodes]
        way, _, _ = self.layout()
        node_way = way.expand(num_episodes, -1).clone()
        node_way[:, -1] = target
        node_class = classes.gather(1, node_way)               # [episodes, episode_size]
        return classes, target, torch.stack([node_class, image], dim=-1)

    def sample(self, num_episodes: int, generator: Optional[torch.Generator] = None,
               device: torch.device | str = "cpu", per_support: int = 1) -> Data:
        """``num_episodes`` episodes as one batched graph (a :class:`~torch_geometric.data.Data`):

        - ``x`` ``[num_nodes, channels, height, width]``: the images, normalised,
        - ``y`` ``[num_nodes]``: each node's class as its position ``0 .. ways-1``
          among the episode's classes (known to the sampler, hidden from the
          model where ``labelled`` is false),
        - ``labelled``, ``query`` ``[num_nodes]``: boolean masks,
        - ``edge_index``: every episode fully connected, no self-loops,
        - ``batch`` ``[num_nodes]`` and ``ptr``: the episode of each node,
        - ``target`` ``[num_episodes]``: the query's class (``y`` at the query),
        - ``classes`` ``[num_episodes, ways]``: the episode's classes as indices
          into the split's classes,
        - ``image`` ``[num_nodes, 2]``: each node's ``(class, image)`` index.

        With ``per_support`` > 1 (see :meth:`sample_indices`), also
        ``unique_nodes`` ``[num_images]``, the first node of each distinct
        image, and ``node_image`` ``[num_nodes]``, the position of each
        node's image among them: :class:`~graphseq.models.fewshot.FewShotModel`
        then runs its CNN on the distinct images alone.
        """
        classes, target, image = self.sample_indices(num_episodes, generator, per_support)
        size = self.episode_size
        way, labelled, query = self.layout()
        y = way.expand(num_episodes, -1).clone()
        y[:, -1] = target
        image = image.flatten(0, 1)  # [num_nodes, 2]
        pixels = self.classes.images[image[:, 0], image[:, 1]]  # [num_nodes, channels, height, width]
        shared = {}
        if per_support > 1 and num_episodes:
            key = image[:, 0] * self.classes.per_class + image[:, 1]
            _, node_image = torch.unique(key, return_inverse=True)
            first = torch.full((int(node_image.max()) + 1,), key.numel(), dtype=torch.long)
            first.scatter_reduce_(0, node_image, torch.arange(key.numel()), reduce="amin")
            shared = {"unique_nodes": first.to(device), "node_image": node_image.to(device)}
        return Data(x=self.classes.normalize(pixels.to(device)),
                    y=y.flatten().to(device),
                    labelled=labelled.repeat(num_episodes).to(device),
                    query=query.repeat(num_episodes).to(device),
                    edge_index=self.edges(num_episodes).to(device),
                    batch=torch.arange(num_episodes, device=device).repeat_interleave(size),
                    ptr=torch.arange(num_episodes + 1, device=device) * size,
                    target=target.to(device), classes=classes.to(device), image=image.to(device),
                    num_nodes=num_episodes * size, **shared)

    def edges(self, num_episodes: int) -> Tensor:
        """Every episode fully connected (without self-loops), episodes numbered
        one after the other: a copy of the one kept for this many episodes,
        so that editing one batch's edges leaves the next batch's alone."""
        if num_episodes not in self._edges:
            self._edges[num_episodes] = graphs.fully_connected([self.episode_size] * num_episodes,
                                                               self_loops=False)
        return self._edges[num_episodes].clone()
