r"""Image captioning as message passing. A caption is a chain of word nodes
stepped by a :class:`~graphseq.nn.ChainLSTM`; the image is one more node, or
a grid of region nodes, that sends the words messages. The three decoders
differ only in where that message arrives:

- ``init``: the image node sets the initial state of the chain,
  :math:`(\mathbf{h}_0, \mathbf{c}_0) = \tanh(\mathbf{W}\bar{\mathbf{v}})`
  (Vinyals et al., "Show and Tell", CVPR 2015).
- ``input``: the image node sends its features to every word node, where
  they join the word's input, :math:`\mathbf{x}_t = [\mathbf{E} w_t;
  \bar{\mathbf{v}}]`, so ``W_ih`` has columns for the image (Mao et al.,
  m-RNN; Karpathy & Fei-Fei).
- ``attention``: every word node attends to the region nodes through a
  bipartite graph (regions -> words), and a chain steps on what it saw
  (after Xu et al., "Show, Attend and Tell", ICML 2015, and Anderson et al.,
  CVPR 2018): :math:`\alpha_{t,r} = \mathrm{softmax}_r\big((\mathbf{W}_Q
  \mathbf{h}_t)^\top \mathbf{W}_K \mathbf{v}_r / \sqrt{d}\big)`,
  :math:`\mathbf{z}_t = \sum_r \alpha_{t,r} \mathbf{W}_V \mathbf{v}_r`.

The image features come from :class:`ConvEncoder`, a small CNN whose last
feature map is the grid of regions and whose mean is the global feature.
Decoding (greedy, beam search, sampling) is in :mod:`graphseq.models.caption_search`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.captions import END, PAD, START, UNKNOWN
from ..data.text import Vocabulary
from ..errors import GraphseqError
from ..graphs import chain, lengths_to_batch
from ..io import check_file_place, first_sentence, load_checkpoint
from ..nn import ChainLSTM, SelfAttentionConv

# A decoder's state while it writes: tensors ``[layers, N, hidden_size]``
# whose second dimension runs over the partial captions, so that a beam
# search reorders every one of them alike.
State = Tuple[Tensor, ...]
DECODERS = ("init", "input", "attention")
MODEL_FILE = "captioner.pt"  # the trained model a run keeps for `graphseq caption`


class ConvEncoder(nn.Module):
    """A small CNN for small images: a strided 5x5 convolution, then 3x3
    convolutions with batch norm and ReLU, halving the resolution twice more.
    An image of side ``S`` becomes a grid of ``(S/8)^2`` region features (8x8
    regions for 64-pixel images), and their mean is its global feature.

    Args:
        channels (sequence of int): output channels of the four convolutions;
            the last is the feature size. (default: :obj:`(16, 32, 64, 128)`)

    Shapes:
        - **input:** images :math:`(B, 3, S, S)` in :math:`[0, 1]`
        - **output:** regions :math:`(B, (S/8)^2, F)` (row by row) and global
          features :math:`(B, F)`
    """

    def __init__(self, channels: Sequence[int] = (16, 32, 64, 128)):
        super().__init__()
        if len(channels) != 4:
            raise ValueError(f"ConvEncoder takes four channel counts, got {list(channels)}")
        c0, c1, c2, c3 = channels
        self.channels = tuple(channels)
        self.feature_dim = c3

        def block(cin: int, cout: int, kernel: int = 3, stride: int = 1) -> List[nn.Module]:
            return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False),
                    nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.net = nn.Sequential(*block(3, c0, 5, 2),               # S/2
                                 *block(c0, c1), nn.MaxPool2d(2),   # S/4
                                 *block(c1, c2), nn.MaxPool2d(2),   # S/8
                                 *block(c2, c3))

    def forward(self, images: Tensor) -> Tuple[Tensor, Tensor]:
        if images.dim() != 4 or images.size(1) != 3 or images.size(-1) % 8 or images.size(-2) % 8:
            raise ValueError(f"ConvEncoder expects images [batch, 3, H, W] with H and W multiples "
                             f"of 8, got {list(images.shape)}")
        grid = self.net((images - 0.5) / 0.25)  # [B, F, S/8, S/8]
        regions = grid.flatten(2).transpose(1, 2)  # [B, regions, F]
        return regions, regions.mean(dim=1)


class CaptionDecoder(nn.Module):
    r"""What the three decoders share: word embeddings, a
    :class:`~graphseq.nn.ChainLSTM` over each caption's chain of word nodes,
    and a linear read-out of the next word. Training feeds the true previous
    word (teacher forcing); decoding calls :meth:`step` one word at a time.

    Args:
        vocab_size (int): number of words, the special symbols included.
        feature_dim (int): size of the image's region and global features.
        embedding_dim (int): size of a word embedding. (default: :obj:`64`)
        hidden_size (int): size of the recurrent state. (default: :obj:`128`)
        num_layers (int): stacked recurrent layers. (default: :obj:`1`)
        dropout (float): dropout before the read-out (and between layers).
            (default: :obj:`0.`)
    """

    kind: str = ""

    def __init__(self, vocab_size: int, feature_dim: int, embedding_dim: int = 64,
                 hidden_size: int = 128, num_layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.vocab_size = vocab_size
        self.feature_dim = feature_dim
        self.embedding_dim = embedding_dim
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dropout = dropout
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.rnn = ChainLSTM(self.rnn_input_size(), hidden_size, num_layers,
                             dropout=dropout if num_layers > 1 else 0.0)
        self.readout = nn.Linear(self.readout_size(), vocab_size)

    def rnn_input_size(self) -> int:
        return self.embedding_dim

    def readout_size(self) -> int:
        return self.hidden_size

    def initial_state(self, pooled: Tensor) -> Optional[State]:
        """The chain's initial state for images with global features
        ``pooled`` ``[N, F]``; ``None`` for zeros."""
        return None

    def forward(self, regions: Tensor, pooled: Tensor, words: Tensor, lengths: Tensor) -> Tensor:
        """Teacher forcing. ``words`` are the input words of all captions, one
        node each, caption after caption (``<start> w_1 ... w_n``); caption
        ``i`` has ``lengths[i]`` nodes and belongs to image ``i``. Returns the
        logits of the next word at every node ``[num_nodes, vocab_size]``."""
        batch = lengths_to_batch(lengths).to(words.device)
        x = self.embedding(words)  # [num_nodes, embedding_dim]
        out, _ = self.rnn(self.node_inputs(x, pooled, batch), chain(lengths).to(words.device), batch,
                          self.initial_state(pooled))
        return self.readout(F.dropout(out, self.dropout, self.training))

    def node_inputs(self, x: Tensor, pooled: Tensor, batch: Tensor) -> Tensor:
        return x

    def step(self, words: Tensor, state: Optional[State], regions: Tensor, pooled: Tensor,
             rows: Tensor) -> Tuple[Tensor, State, Optional[Tensor]]:
        """One word for each of ``N`` partial captions: ``words`` ``[N]`` are
        their last words, ``state`` their chains' states (``None`` at the
        start), ``rows`` ``[N]`` the image of each caption (several captions
        may share an image, as beams do). Returns the next-word logits ``[N,
        vocab_size]``, the new state and the attention over regions ``[N,
        regions, heads]`` (``None`` for decoders without attention)."""
        if state is None:
            state = self._start(pooled[rows])
        x = self.node_inputs(self.embedding(words), pooled, rows)
        out, state = self._rnn_step(x, state)
        return self.readout(F.dropout(out, self.dropout, self.training)), state, None

    def _start(self, pooled: Tensor) -> State:
        state = self.initial_state(pooled)
        if state is None:
            zeros = pooled.new_zeros(self.num_layers, pooled.size(0), self.hidden_size)
            state = (zeros, zeros)
        return state

    def _rnn_step(self, x: Tensor, state: State, rnn: Optional[ChainLSTM] = None) -> Tuple[Tensor, State]:
        """The recurrent step of ``N`` word nodes, each the next node of its
        own chain: ``N`` one-node graphs carrying their states."""
        n = x.size(0)
        no_edges = torch.empty(2, 0, dtype=torch.long, device=x.device)
        return (rnn or self.rnn)(x, no_edges, torch.arange(n, device=x.device), tuple(state))

    def extra_repr(self) -> str:
        return (f"{self.kind}, vocab_size={self.vocab_size}, feature_dim={self.feature_dim}, "
                f"embedding_dim={self.embedding_dim}, hidden_size={self.hidden_size}")


class InitDecoder(CaptionDecoder):
    """The image sets the initial state: ``(h_0, c_0) = tanh(W v)`` from the
    global feature ``v``, one per layer (Show and Tell)."""

    kind = "init"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.init_h = nn.Linear(self.feature_dim, self.num_layers * self.hidden_size)
        self.init_c = nn.Linear(self.feature_dim, self.num_layers * self.hidden_size)

    def initial_state(self, pooled: Tensor) -> State:
        shape = (pooled.size(0), self.num_layers, self.hidden_size)
        h = torch.tanh(self.init_h(pooled)).view(shape).transpose(0, 1).contiguous()
        c = torch.tanh(self.init_c(pooled)).view(shape).transpose(0, 1).contiguous()
        return h, c  # [num_layers, N, hidden_size] each


class InputDecoder(CaptionDecoder):
    """The image reaches every word node: its global feature is concatenated
    to each word's embedding, so the first ``embedding_dim`` columns of
    ``rnn.weight_ih_l0`` read the word and the rest read the image. The
    chain starts from zeros."""

    kind = "input"

    def rnn_input_size(self) -> int:
        return self.embedding_dim + self.feature_dim

    def node_inputs(self, x: Tensor, pooled: Tensor, batch: Tensor) -> Tensor:
        return torch.cat([x, pooled.index_select(0, batch)], dim=1)


def grid_positions(num_regions: int, channels: int, device: Optional[torch.device] = None) -> Tensor:
    """Fixed 2-D sinusoidal encodings of the cells of a square grid, row by
    row, ``[num_regions, channels]``: a quarter of the channels are sines and
    cosines of the row at several frequencies, a quarter those of the column,
    and so on (as DETR encodes image positions); channels left over are zero.
    Added to the region features, they tell attention where a region is."""
    side = math.isqrt(num_regions)
    if side * side != num_regions:
        raise ValueError(f"{num_regions} regions do not make a square grid")
    quarter = channels // 4
    frequencies = 100.0 ** (-torch.arange(quarter, device=device) / max(quarter, 1))  # [quarter]
    angles = ((torch.arange(side, device=device) + 0.5) / side * 2 * math.pi)[:, None] * frequencies
    waves = torch.cat([angles.sin(), angles.cos()], dim=1)  # [side, 2 * quarter]
    rows = waves[:, None, :].expand(side, side, -1)
    columns = waves[None, :, :].expand(side, side, -1)
    encoding = torch.cat([rows, columns], dim=-1).reshape(num_regions, 4 * quarter)
    return F.pad(encoding, (0, channels - 4 * quarter))


class AttentionDecoder(InitDecoder):
    r"""Word nodes attend to region nodes: ``layers`` rounds of a chain step
    followed by attention from each word node to the region nodes of its
    image (a bipartite graph, regions -> words).

    .. math::
        \mathbf{h}^{1} = \mathrm{LSTM}^{1}(\mathbf{E} w), \quad
        \mathbf{z}^{\ell}_t = \sum_r \alpha^{\ell}_{t,r} \mathbf{W}^{\ell}_V
            (\mathbf{v}_r + \mathbf{p}_r), \quad
        \alpha^{\ell}_{t,\cdot} = \mathrm{softmax}_r\big(
            (\mathbf{W}^{\ell}_Q \mathbf{h}^{\ell}_t)^\top \mathbf{W}^{\ell}_K
            (\mathbf{v}_r + \mathbf{p}_r) / \sqrt{d}\big), \quad
        \mathbf{h}^{\ell+1} = \mathrm{LSTM}^{\ell+1}([\mathbf{h}^{\ell}; \mathbf{z}^{\ell}])

    and the next word is read from :math:`[\mathbf{h}^L_t; \mathbf{z}^L_t]`.
    The first chain starts from the image as in ``init``; :math:`\mathbf{p}_r`
    is the region's fixed position encoding (:func:`grid_positions`), without
    which attention could tell what it sees but not where.

    The query of a word comes from the chain state of the word itself, as in
    the top-down captioner of Anderson et al. (`"Bottom-Up and Top-Down
    Attention" <https://arxiv.org/abs/1707.07998>`_, CVPR 2018), not from the
    previous word's output as in Show, Attend and Tell: then all word nodes
    of a batch attend in one message-passing call during training, instead
    of one word per call. The first round's queries know only the words; the
    second chain reads where each earlier word looked, so the second round
    can find the object "left of" one already named.

    Args:
        heads (int): attention heads; the attention drawn for a word is the
            mean over the last round's heads. (default: :obj:`1`)
        layers (int): rounds of chain step and attention. (default: :obj:`2`)
        others: see :class:`CaptionDecoder`; ``num_layers`` stacks the first chain.
    """

    kind = "attention"

    def __init__(self, vocab_size: int, feature_dim: int, embedding_dim: int = 64,
                 hidden_size: int = 128, num_layers: int = 1, dropout: float = 0.0, heads: int = 1,
                 layers: int = 2):
        if layers < 1:
            raise ValueError(f"AttentionDecoder needs layers >= 1, got {layers}")
        self.heads = heads
        self.layers = layers
        super().__init__(vocab_size, feature_dim, embedding_dim, hidden_size, num_layers, dropout)
        self.attentions = nn.ModuleList(
            SelfAttentionConv(hidden_size, heads, kdim=feature_dim, vdim=feature_dim) for _ in range(layers))
        self.chains = nn.ModuleList(ChainLSTM(2 * hidden_size, hidden_size) for _ in range(layers - 1))

    def readout_size(self) -> int:
        return 2 * self.hidden_size

    def attend(self, regions: Tensor, query: Tensor, rows: Tensor, layer: int = -1) -> Tuple[Tensor, Tensor]:
        """The context ``[N, hidden_size]`` of ``N`` word nodes with queries
        ``[N, hidden_size]``, word ``n`` attending to the regions of image
        ``rows[n]`` (``regions`` ``[B, R, F]``) in round ``layer``, and its
        attention ``[N, R, heads]``, which sums to one over the regions."""
        num_regions = regions.size(1)
        n = query.size(0)
        source = (rows.unsqueeze(1) * num_regions
                  + torch.arange(num_regions, device=rows.device)).flatten()  # [N * R]
        target = torch.arange(n, device=rows.device).repeat_interleave(num_regions)
        edge_index = torch.stack([source, target])  # regions -> words
        placed = regions + grid_positions(num_regions, regions.size(-1), regions.device)
        context, (_, alpha) = self.attentions[layer]((placed.flatten(0, 1), query), edge_index,
                                                     return_attention_weights=True)
        return context, alpha.view(n, num_regions, -1)

    def forward(self, regions: Tensor, pooled: Tensor, words: Tensor, lengths: Tensor) -> Tensor:
        device = words.device
        batch = lengths_to_batch(lengths).to(device)
        edges = chain(lengths).to(device)
        query, _ = self.rnn(self.embedding(words), edges, batch, self.initial_state(pooled))
        context, _ = self.attend(regions, query, batch, 0)
        for layer, rnn in enumerate(self.chains, 1):
            query, _ = rnn(torch.cat([query, context], dim=1), edges, batch)
            context, _ = self.attend(regions, query, batch, layer)
        return self.readout(F.dropout(torch.cat([query, context], dim=1), self.dropout, self.training))

    def step(self, words, state, regions, pooled, rows):
        if state is None:
            zeros = pooled.new_zeros(1, rows.numel(), self.hidden_size)
            state = (*self.initial_state(pooled[rows]), *[zeros] * (2 * len(self.chains)))
        query, first = self._rnn_step(self.embedding(words), state[:2])
        context, alpha = self.attend(regions, query, rows, 0)
        states = list(first)
        for layer, rnn in enumerate(self.chains, 1):
            query, next_state = self._rnn_step(torch.cat([query, context], dim=1),
                                               state[2 * layer:2 * layer + 2], rnn)
            context, alpha = self.attend(regions, query, rows, layer)
            states += next_state
        logits = self.readout(F.dropout(torch.cat([query, context], dim=1), self.dropout, self.training))
        return logits, tuple(states), alpha

    def extra_repr(self) -> str:
        return super().extra_repr() + f", heads={self.heads}, layers={self.layers}"


DECODER_CLASSES = {"init": InitDecoder, "input": InputDecoder, "attention": AttentionDecoder}


class Captioner(nn.Module):
    """An image encoder and a caption decoder, with the vocabulary the
    decoder speaks.

    Args:
        vocab (Vocabulary): the caption words (:func:`graphseq.data.captions.caption_vocabulary`).
        decoder (str): ``"init"``, ``"input"`` or ``"attention"``.
        channels (sequence of int): the encoder's convolution channels.
        image_size (int): side of the square images the model reads.
        freeze_encoder (bool): keep the encoder's weights and batch-norm
            statistics fixed (the transfer-learning choice: a frozen
            pretrained encoder, or one fine-tuned with the decoder).
        **decoder_args: ``embedding_dim``, ``hidden_size``, ``num_layers``,
            ``dropout`` and (attention) ``heads``.
    """

    def __init__(self, vocab: Vocabulary, decoder: str = "attention",
                 channels: Sequence[int] = (16, 32, 64, 128), image_size: int = 64,
                 freeze_encoder: bool = True, **decoder_args: Any):
        super().__init__()
        if decoder not in DECODER_CLASSES:
            raise GraphseqError(f"unknown decoder {decoder!r}; known decoders: {', '.join(DECODERS)}")
        missing = [s for s in (START, END, PAD) if s not in vocab.index]
        if missing:
            raise ValueError(f"Captioner's vocabulary lacks the symbols {', '.join(missing)}; "
                             f"build it with caption_vocabulary")
        self.vocab = vocab
        self.config = dict(decoder=decoder, channels=list(channels), image_size=image_size,
                           freeze_encoder=freeze_encoder, **decoder_args)
        self.encoder = ConvEncoder(channels)
        self.decoder = DECODER_CLASSES[decoder](len(vocab), self.encoder.feature_dim, **decoder_args)
        self.freeze_encoder = freeze_encoder
        self.set_encoder_frozen(freeze_encoder)
        self.start_id, self.end_id, self.pad_id = (vocab.index[s] for s in (START, END, PAD))
        self.unknown_id: Optional[int] = vocab.index.get(UNKNOWN)  # never written; None if the vocabulary lacks it
        # The lowest and highest colour_summary of the training images, [low, high], where known:
        # what graphseq caption compares an image with.
        self.image_range: Optional[List[List[float]]] = None

    def set_encoder_frozen(self, frozen: bool) -> None:
        self.freeze_encoder = frozen
        self.config["freeze_encoder"] = frozen
        self.encoder.requires_grad_(not frozen)
        self.train(self.training)

    def train(self, mode: bool = True) -> "Captioner":
        super().train(mode)
        if self.freeze_encoder:
            self.encoder.eval()  # Batch-norm statistics stay those of pretraining.
        return self

    def encode(self, images: Tensor) -> Tuple[Tensor, Tensor]:
        """Region features ``[B, R, F]`` and global features ``[B, F]``."""
        if self.freeze_encoder:
            with torch.no_grad():
                return self.encoder(images)
        return self.encoder(images)

    def caption_nodes(self, captions: Sequence[Sequence[str]]) -> Tuple[Tensor, Tensor, Tensor]:
        """The word nodes of tokenised captions for teacher forcing: inputs
        ``<start> w_1 .. w_n`` and targets ``w_1 .. w_n <end>``, caption after
        caption, and each caption's length ``n + 1``."""
        inputs, targets, lengths = [], [], []
        for caption in captions:
            if isinstance(caption, str):
                raise TypeError(f"Captioner takes each caption as a list of words, got the string "
                                f"{caption[:40]!r}; split it with tokenize_caption")
            ids = self.vocab.encode(list(caption)).tolist()
            inputs += [self.start_id] + ids
            targets += ids + [self.end_id]
            lengths.append(len(ids) + 1)
        return torch.tensor(inputs), torch.tensor(targets), torch.tensor(lengths)

    def loss(self, regions: Tensor, pooled: Tensor, captions: Sequence[Sequence[str]]) -> Tensor:
        """Mean cross-entropy of the next word over all word nodes, caption
        ``i`` describing image ``i`` of the features."""
        if len(captions) != pooled.size(0):
            raise ValueError(f"Captioner.loss got {len(captions)} captions for {pooled.size(0)} images; "
                             f"caption i describes image i")
        if len(captions) == 0:
            raise ValueError("Captioner.loss needs at least one caption, got an empty batch")
        device = pooled.device
        inputs, targets, lengths = self.caption_nodes(captions)
        logits = self.decoder(regions, pooled, inputs.to(device), lengths)
        return F.cross_entropy(logits, targets.to(device))

    def words(self, ids: Sequence[int]) -> List[str]:
        """The words of generated ids, up to the end symbol."""
        out = []
        for i in ids:
            if i == self.end_id:
                break
            if not 0 <= i < len(self.vocab):
                raise ValueError(f"Captioner.words: id {i} is not one of the {len(self.vocab)} words")
            out.append(self.vocab.symbols[i])
        return out

    def checkpoint(self, **extra: Any) -> Dict[str, Any]:
        """What ``graphseq caption`` needs to rebuild the model."""
        return {"model": self.state_dict(), "model_config": dict(self.config),
                "vocabulary": list(self.vocab.symbols), "image_range": self.image_range, **extra}


def colour_summary(images: Tensor) -> Tensor:
    """Each image's colours in six numbers, ``[B, 6]``: the mean and the
    spread of each channel of ``images`` ``[B, 3, H, W]`` in ``[0, 1]``."""
    pixels = images.flatten(2)  # [B, 3, H * W]
    return torch.cat([pixels.mean(-1), pixels.std(-1, correction=0)], dim=1)


def load_captioner(run_dir: str | Path, device: torch.device | str = "cpu") -> Captioner:
    """The captioner a run kept (``run_dir/captioner.pt``), in eval mode."""
    path = Path(run_dir) / MODEL_FILE
    check_file_place(path)  # a folder there is named as such, not as missing
    if not path.is_file():
        seeds = sorted(Path(run_dir).glob(f"seed-*/{MODEL_FILE}"))
        hint = f"runs of several seeds keep theirs in {seeds[0].parent}" if seeds else \
            "is it the --out folder of a finished caption-* run?"
        raise GraphseqError(f"no {MODEL_FILE} in {run_dir}; {hint}")
    try:
        checkpoint = load_checkpoint(path, map_location=device)
        config = dict(checkpoint["model_config"])
        vocab = Vocabulary(checkpoint["vocabulary"], unknown="<unk>")
        model = Captioner(vocab, **config)
        model.load_state_dict(checkpoint["model"])
        model.image_range = checkpoint.get("image_range")  # None in a checkpoint written before it was kept
    except GraphseqError:
        raise
    except Exception as error:  # A torn or foreign file, or a configuration unlike the weights.
        reason = f"no {error}" if isinstance(error, KeyError) else first_sentence(error)
        raise GraphseqError(f"cannot read the captioner checkpoint {path}: {reason}") from None
    return model.to(device).eval()
