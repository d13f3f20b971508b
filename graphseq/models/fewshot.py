"""The few-shot GNN of Garcia & Bruna (ICLR 2018): a CNN embeds every image
of an episode, each node's features are its embedding and its label (one-hot;
zeros or uniform when the label is hidden), and blocks of
:class:`~graphseq.nn.MetricAttentionConv` (learned adjacency + identity) with
dense connections turn them into class scores, read at the query node.

The active variant adds a query head after the first block: it scores the
unlabelled nodes, one of them is chosen (Gumbel-softmax, hard, in training;
the best in evaluation; or at random for the baseline), and that node's true
label is written into its label slot before the remaining blocks run.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.utils import to_dense_batch

from ..checks import is_integer
from ..nn.metric_attention import MetricAttentionConv

UNKNOWN_LABELS = ("zeros", "uniform")
QUERY_MODES = ("learned", "random")


# --------------------------------------------------------------------------- #
# Image embeddings
# --------------------------------------------------------------------------- #

def _conv_block(in_channels: int, out_channels: int, padding: int = 1, pool: bool = True,
                negative_slope: float = 0.1) -> List[nn.Module]:
    layers: List[nn.Module] = [nn.Conv2d(in_channels, out_channels, 3, padding=padding, bias=False),
                               nn.BatchNorm2d(out_channels)]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return layers + [nn.LeakyReLU(negative_slope)]


def _embedding_head(in_features: int, out_channels: int) -> List[nn.Module]:
    """The Omniglot CNNs' end: the last map flattened, a linear layer to
    ``out_channels``, BatchNorm and leaky ReLU."""
    return [nn.Flatten(), nn.Linear(in_features, out_channels, bias=False), nn.BatchNorm1d(out_channels),
            nn.LeakyReLU()]


def omniglot_embedding(out_channels: int = 64, width: int = 64) -> nn.Sequential:
    """The paper's Omniglot CNN for 28x28 images, as its text describes it:
    4 x {3x3 convolution with ``width`` filters, BatchNorm, 2x2 max-pooling,
    leaky ReLU}, then a linear layer to ``out_channels``, BatchNorm and leaky
    ReLU (28 -> 14 -> 7 -> 3 -> 1)."""
    return nn.Sequential(*_conv_block(1, width), *_conv_block(width, width), *_conv_block(width, width),
                         *_conv_block(width, width), *_embedding_head(width, out_channels))


def omniglot_code_embedding(out_channels: int = 64, width: int = 64) -> nn.Sequential:
    """The Omniglot CNN of the authors' code (``EmbeddingOmniglot``): the
    first two blocks as in :func:`omniglot_embedding`, the last two
    unpadded and without pooling, so a 3x3 map of ``width`` channels reaches
    the linear layer (28 -> 14 -> 7 -> 5 -> 3)."""
    return nn.Sequential(*_conv_block(1, width), *_conv_block(width, width),
                         *_conv_block(width, width, padding=0, pool=False),
                         *_conv_block(width, width, padding=0, pool=False),
                         *_embedding_head(width * 3 * 3, out_channels))


def miniimagenet_embedding(out_channels: int = 128) -> nn.Sequential:
    """The authors' larger CNN for 84x84 colour images: {3x3 convolution,
    BatchNorm, 2x2 max-pooling, leaky ReLU} with 64, 96, 128 and 256 filters
    (spatial dropout 0.4 and 0.5 after the last two), then a linear layer to
    ``out_channels`` and BatchNorm (84 -> 42 -> 20 -> 10 -> 5)."""
    return nn.Sequential(*_conv_block(3, 64, negative_slope=0.2),
                         *_conv_block(64, 96, padding=0, negative_slope=0.2),
                         *_conv_block(96, 128, negative_slope=0.2), nn.Dropout2d(0.4),
                         *_conv_block(128, 256, negative_slope=0.2), nn.Dropout2d(0.5),
                         nn.Flatten(), nn.Linear(256 * 5 * 5, out_channels), nn.BatchNorm1d(out_channels))


EMBEDDINGS = {"omniglot": (omniglot_embedding, 64), "omniglot_code": (omniglot_code_embedding, 64),
              "miniimagenet": (miniimagenet_embedding, 128)}


# --------------------------------------------------------------------------- #
# The graph network
# --------------------------------------------------------------------------- #

def metric_widths(width: int, ratios: List[float]) -> List[int]:
    """Hidden widths of a metric MLP: ``int(width * ratio)`` for each ratio."""
    return [int(width * ratio) for ratio in ratios]


class FewShotGNN(nn.Module):
    r"""Blocks of {learned adjacency, identity} with dense connections, as in
    the authors' ``GNN_nl``: block ``k`` maps the features so far to
    ``growth`` new ones (:class:`MetricAttentionConv`, BatchNorm, leaky ReLU)
    and appends them; a last :class:`MetricAttentionConv` maps everything to
    ``num_ways`` class scores per node (followed by BatchNorm when
    ``last_norm``).

    Args:
        in_channels (int): node features (embedding + label slots).
        num_ways (int): classes per episode.
        num_layers (int): blocks before the last layer. (default: :obj:`2`)
        growth (int): features each block adds. (default: :obj:`48`)
        metric_ratios (list of float): hidden widths of each metric MLP,
            relative to ``metric_width``. (default: :obj:`[2, 1.5, 1, 1]`)
        metric_width (int): the width the ratios multiply; ``0`` takes the
            authors' Omniglot rule: a block's input width, and for the last
            layer the width before the last block. (default: :obj:`0`)
        last_norm (bool): BatchNorm on the class scores (the authors'
            Omniglot network). (default: :obj:`True`)
        last_dropout (float): dropout inside the last metric MLP.
            (default: :obj:`0.3`)
        query_after (int): with a value ``k > 0``, the active variant: the
            query head runs after ``k`` blocks. (default: :obj:`0`)
    """

    def __init__(self, in_channels: int, num_ways: int, num_layers: int = 2, growth: int = 48,
                 metric_ratios: Sequence[float] = (2.0, 1.5, 1.0, 1.0), metric_width: int = 0,
                 last_norm: bool = True, last_dropout: float = 0.3, query_after: int = 0,
                 negative_slope: float = 0.01):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"FewShotGNN needs num_layers >= 1 (blocks before the last layer), got {num_layers}")
        self.num_ways = num_ways
        self.negative_slope = negative_slope
        self.query_after = query_after
        widths = [in_channels + growth * k for k in range(num_layers + 1)]
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for k in range(num_layers):
            hidden = metric_widths(metric_width or widths[k], list(metric_ratios))
            self.convs.append(MetricAttentionConv(widths[k], growth, hidden, negative_slope=negative_slope))
            self.norms.append(nn.BatchNorm1d(growth))
        hidden = metric_widths(metric_width or widths[-2], list(metric_ratios))
        self.last = MetricAttentionConv(widths[-1], num_ways, hidden, dropout=last_dropout,
                                        negative_slope=negative_slope)
        self.last_norm = nn.BatchNorm1d(num_ways) if last_norm else None
        self.query_head = None
        if query_after:
            if not 0 < query_after <= num_layers:
                raise ValueError(f"query_after must be between 1 and num_layers ({num_layers}), got {query_after}")
            width = widths[query_after]
            self.query_head = nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width),
                                            nn.LeakyReLU(negative_slope), nn.Linear(width, 1))

    def forward(self, x: Tensor, edge_index: Tensor, ask=None) -> Tensor:
        """Class scores ``[num_nodes, num_ways]`` of every node. ``ask(x) ->
        x`` is called after ``query_after`` blocks (the active variant)."""
        for k, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            if k == self.query_after and ask is not None and k > 0:
                x = ask(x)
            new = F.leaky_relu(norm(conv(x, edge_index)), self.negative_slope)  # [num_nodes, growth]
            x = torch.cat([x, new], dim=-1)
        if self.query_after == len(self.convs) and ask is not None:
            x = ask(x)
        out = self.last(x, edge_index)
        return self.last_norm(out) if self.last_norm is not None else out


# --------------------------------------------------------------------------- #
# The whole model
# --------------------------------------------------------------------------- #

@dataclass
class FewShotConfig:
    """Everything that defines a :class:`FewShotModel` (stored in checkpoints)."""

    num_ways: int
    embedding: str = "omniglot"
    embedding_dim: int = 0          # 0: the embedding's own (64 Omniglot, 128 mini-ImageNet)
    unknown_label: str = "zeros"    # hidden labels: "zeros" (authors' code) or "uniform" (paper)
    num_layers: int = 2
    growth: int = 48
    metric_ratios: List[float] = field(default_factory=lambda: [2.0, 1.5, 1.0, 1.0])
    metric_width: int = 0
    last_norm: bool = True
    last_dropout: float = 0.3
    active: bool = False            # a query head after the first block

    def __post_init__(self):
        if not is_integer(self.num_layers) or self.num_layers < 1:
            raise ValueError(f"FewShotConfig needs num_layers >= 1 (blocks before the last layer), "
                             f"got {self.num_layers!r}")


class FewShotModel(nn.Module):
    """Embedding CNN + :class:`FewShotGNN` over batched episode graphs
    (:meth:`graphseq.data.episodes.EpisodeSampler.sample`): returns the class
    scores ``[num_episodes, num_ways]`` of each episode's query.

    The active variant (``config.active``) also takes ``query=`` at call
    time: ``"learned"`` (Gumbel-softmax in training, argmax in evaluation)
    or ``"random"``; after the call, :attr:`asked` holds the index of the
    node whose label was asked for in each episode.
    """

    def __init__(self, config: FewShotConfig):
        super().__init__()
        if config.embedding not in EMBEDDINGS:
            raise ValueError(f"unknown embedding {config.embedding!r}; known: {', '.join(EMBEDDINGS)}")
        if config.unknown_label not in UNKNOWN_LABELS:
            raise ValueError(f"unknown_label must be one of {', '.join(UNKNOWN_LABELS)}, got {config.unknown_label!r}")
        self.config = config
        make, default_dim = EMBEDDINGS[config.embedding]
        dim = config.embedding_dim or default_dim
        # Channels-last convolution weights put oneDNN on its fast path on
        # CPUs: a 5-way 1-shot training step of 16 episodes takes 0.14-0.16
        # CPU s instead of 0.22 (the math is the same; state dicts unchanged).
        self.embedding = make(dim).to(memory_format=torch.channels_last)
        self.embedding_dim = dim
        self.gnn = FewShotGNN(dim + config.num_ways, config.num_ways, num_layers=config.num_layers,
                              growth=config.growth, metric_ratios=config.metric_ratios,
                              metric_width=config.metric_width, last_norm=config.last_norm,
                              last_dropout=config.last_dropout, query_after=1 if config.active else 0)
        self.asked: Optional[Tensor] = None

    def embed(self, episodes: Data) -> Tensor:
        """The CNN's embedding ``[num_nodes, embedding_dim]`` of every node's
        image. Episodes that share their support
        (``EpisodeSampler.sample(..., per_support=m)``) carry
        ``unique_nodes`` and ``node_image``: each distinct image is then
        embedded once (in training, BatchNorm's batch statistics are those
        of the distinct images)."""
        if getattr(episodes, "unique_nodes", None) is None:
            return self.embedding(episodes.x)
        return self.embedding(episodes.x[episodes.unique_nodes])[episodes.node_image]

    def node_features(self, episodes: Data, embedding: Optional[Tensor] = None) -> Tensor:
        """``[embedding, label]`` of every node: one-hot where the label is
        known, zeros or ``1 / num_ways`` where it is hidden."""
        if embedding is None:
            embedding = self.embed(episodes)  # [num_nodes, embedding_dim]
        n = self.config.num_ways
        classes = getattr(episodes, "classes", None)  # [num_episodes, ways] from EpisodeSampler.sample
        if classes is not None and classes.size(-1) != n:
            raise ValueError(f"FewShotModel is {n}-way, but the episodes are {classes.size(-1)}-way")
        known = episodes.labelled.unsqueeze(1)
        one_hot = F.one_hot(episodes.y.clamp(min=0), n).to(embedding.dtype)
        unknown = 1.0 / n if self.config.unknown_label == "uniform" else 0.0
        label = torch.where(known, one_hot, torch.full_like(one_hot, unknown))  # [num_nodes, num_ways]
        return torch.cat([embedding, label], dim=-1)

    def forward(self, episodes: Data, query: str = "learned", answers: Optional[Tensor] = None,
                embedding: Optional[Tensor] = None) -> Tensor:
        """Class scores ``[num_episodes, num_ways]`` at the query nodes.
        ``embedding`` ``[num_nodes, embedding_dim]`` stands in for the CNN's
        output (in eval mode, images embedded once for many episodes)."""
        x = self.node_features(episodes, embedding)
        ask = None
        if self.gnn.query_head is not None:
            ask = lambda h: self.ask(h, episodes, query, answers)  # noqa: E731
        logits = self.gnn(x, episodes.edge_index, ask=ask)  # [num_nodes, num_ways]
        return logits[episodes.query]

    def choose(self, h: Tensor, episodes: Data, query: str = "learned") -> Tensor:
        """The selection ``[num_episodes, episode_size]``: one-hot rows, one
        unlabelled node per episode (in training with the learned query, a
        straight-through Gumbel-softmax sample whose gradient reaches the
        query head)."""
        candidates = ~episodes.labelled & ~episodes.query
        is_candidate = to_dense_batch(candidates, episodes.batch, fill_value=False)[0]  # [episodes, size]
        if not bool(is_candidate.any(dim=1).all()):
            raise ValueError("the active model needs an unlabelled node in every episode")
        if query == "random":
            choice = torch.multinomial(is_candidate.float(), 1).squeeze(1)
            return F.one_hot(choice, is_candidate.size(1)).to(h.dtype)
        scores = to_dense_batch(self.gnn.query_head(h).squeeze(-1), episodes.batch)[0]
        scores = scores.masked_fill(~is_candidate, float("-inf"))  # [episodes, size]
        if self.training:
            return F.gumbel_softmax(scores, tau=1.0, hard=True)
        return F.one_hot(scores.argmax(dim=1), scores.size(1)).to(h.dtype)

    def ask(self, h: Tensor, episodes: Data, query: str = "learned", answers: Optional[Tensor] = None) -> Tensor:
        """Chooses one unlabelled node per episode (:meth:`choose`) and writes
        its label into its label slot: the true one, or ``answers[e]`` for
        episode ``e`` when given (``-1``: no answer, nothing written). With
        ``query="none"`` nothing is asked. The chosen node of each episode
        is left in :attr:`asked` (``-1`` with ``query="none"``)."""
        if query not in QUERY_MODES + ("none",):
            raise ValueError(f"query must be one of {', '.join(QUERY_MODES + ('none',))}, got {query!r}")
        num_episodes = int(episodes.batch.max()) + 1 if episodes.batch.numel() else 0
        if answers is not None and (answers.dim() != 1 or answers.size(0) != num_episodes):
            raise ValueError(f"FewShotModel.ask needs one answer per episode ({num_episodes}), "
                             f"got answers of shape {list(answers.shape)}")
        if query == "none":
            self.asked = torch.full((num_episodes,), -1, dtype=torch.long, device=h.device)
            return h
        selection = self.choose(h, episodes, query)
        real = to_dense_batch(episodes.batch, episodes.batch, fill_value=-1)[1]  # [episodes, size]
        sizes = real.sum(dim=1)
        asked = selection.argmax(dim=1) + sizes.cumsum(0) - sizes  # node index per episode
        labels = episodes.y.clamp(min=0)
        if answers is not None:
            labels = labels.clone()
            labels[asked] = answers.clamp(min=0)
            selection = selection * (answers >= 0).to(selection.dtype).unsqueeze(1)
        self.asked = asked
        weight = selection[real].unsqueeze(1)  # [num_nodes, 1]: 1 at the chosen nodes, else 0
        n, start = self.config.num_ways, self.embedding_dim
        slot = h[:, start:start + n]
        revealed = weight * (F.one_hot(labels, n).to(h.dtype) - slot)  # the hidden label becomes the answer
        return torch.cat([h[:, :start], slot + revealed, h[:, start + n:]], dim=-1)


def config_dict(config: FewShotConfig) -> dict:
    return asdict(config)
