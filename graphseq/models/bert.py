"""A small BERT (Devlin et al., NAACL 2019, https://arxiv.org/abs/1810.04805)
on graphseq's layers. A sentence pair ``[CLS] A [SEP] B [SEP]`` is a fully
connected graph of token nodes; each node starts from the sum of its token,
position and segment embeddings, and a stack of
:class:`~graphseq.nn.TransformerEncoderLayer` passes messages between every
two nodes of a graph (the self-attention of the Transformer encoder).

Pretraining reads two heads: the masked language model at the masked nodes
(its output layer tied to the token embeddings) and next-sentence prediction
at the ``[CLS]`` node. Fine-tuning puts a classifier on the ``[CLS]`` node.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import global_mean_pool

from ..data.pretraining import IGNORE, TokenGraphs, collate, pack_pair
from ..data.wordpiece import MASK, SPECIAL_TOKENS, TOKENIZER_FILE, WordPieceTokenizer
from ..errors import GraphseqError
from ..io import check_file_place, check_run_folder, first_sentence, load_checkpoint, save_checkpoint
from ..nn.transformer import TransformerEncoderLayer
from . import evaluating

WEIGHTS_FILE = "bert.pt"


@dataclass
class BertConfig:
    """The sizes of a BERT model (BERT-base is 768 wide, 12 layers, 12 heads,
    3072 feed-forward, 512 positions)."""

    vocab_size: int
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    feedforward_size: int = 512
    max_len: int = 64
    dropout: float = 0.1
    activation: str = "gelu"
    norm_first: bool = False


class BertEncoder(nn.Module):
    r"""Token, position and segment embeddings, summed, layer-normalised and
    dropped out, then ``num_layers`` Transformer encoder layers over each
    fully connected token graph:

    .. math::
        \mathbf{h}^{(0)}_i = \mathrm{LN}(\mathbf{E}_{\mathrm{tok}}[t_i] +
        \mathbf{E}_{\mathrm{pos}}[p_i] + \mathbf{E}_{\mathrm{seg}}[s_i]),
        \qquad \mathbf{h}^{(l)} = \mathrm{Layer}_l(\mathbf{h}^{(l-1)})

    The layers' ``state_dict`` (``layers.*``) is that of
    ``torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(...,
    batch_first=True), num_layers)``; with ``norm_first`` a final layer norm
    follows, as pre-norm encoders need.

    Shapes:
        - **input:** tokens, segments, positions, batch, all :math:`(|\mathcal{V}|)`
        - **output:** node states :math:`(|\mathcal{V}|, \text{hidden\_size})`
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.token_embedding = nn.Embedding(config.vocab_size, hidden)
        self.position_embedding = nn.Embedding(config.max_len, hidden)
        self.segment_embedding = nn.Embedding(2, hidden)
        self.embedding_norm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList([
            TransformerEncoderLayer(hidden, config.num_heads, config.feedforward_size, config.dropout,
                                    config.activation, norm_first=config.norm_first)
            for _ in range(config.num_layers)])
        self.final_norm = nn.LayerNorm(hidden) if config.norm_first else None
        self.reset_parameters()

    def reset_parameters(self):
        # BERT's initialisation of the embeddings; the layers keep torch's.
        for embedding in (self.token_embedding, self.position_embedding, self.segment_embedding):
            nn.init.normal_(embedding.weight, std=0.02)
        self.embedding_norm.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()
        if self.final_norm is not None:
            self.final_norm.reset_parameters()

    def embed(self, tokens: Tensor, segments: Tensor, positions: Tensor) -> Tensor:
        if tokens.numel() and int(positions.max()) >= self.config.max_len:
            raise GraphseqError(f"a sequence of {int(positions.max()) + 1} tokens is longer than the "
                                f"model's {self.config.max_len} positions")
        x = self.token_embedding(tokens) + self.position_embedding(positions) + self.segment_embedding(segments)
        return self.dropout(self.embedding_norm(x))  # [num_nodes, hidden]

    def forward(self, tokens: Tensor, segments: Tensor, positions: Tensor, batch: Tensor) -> Tensor:
        x = self.embed(tokens, segments, positions)
        for layer in self.layers:
            x = layer(x, batch=batch)  # Every node of a sequence attends to every other.
        return x if self.final_norm is None else self.final_norm(x)


def cls_nodes(positions: Tensor) -> Tensor:
    """The index of each sequence's first node, its ``[CLS]`` token."""
    return torch.nonzero(positions == 0).flatten()


def cls_states(states: Tensor, graphs: TokenGraphs, reader: str) -> Tensor:
    """The states of the ``[CLS]`` nodes, one per sequence ``[num_graphs, hidden]``;
    an empty sequence has none, and its row would go to the next sequence."""
    first = cls_nodes(graphs.positions)
    if first.numel() != graphs.num_graphs:
        raise GraphseqError(f"{reader} reads the [CLS] node of each sequence, but "
                            f"{graphs.num_graphs - first.numel()} of the {graphs.num_graphs} sequences are empty")
    return states[first]


class BertForPretraining(nn.Module):
    """The encoder with the masked-LM head (a dense GELU layer, layer norm,
    and the token embeddings transposed plus a bias) and the next-sentence
    head (a tanh "pooler" on the ``[CLS]`` node, then two logits)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.encoder = BertEncoder(config)
        self.mlm_transform = nn.Linear(hidden, hidden)
        self.mlm_norm = nn.LayerNorm(hidden)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.pooler = nn.Linear(hidden, hidden)
        self.nsp = nn.Linear(hidden, 2)

    def mlm_logits(self, states: Tensor) -> Tensor:
        h = self.mlm_norm(F.gelu(self.mlm_transform(states)))
        # Tied: the output layer is the token embedding matrix.
        return F.linear(h, self.encoder.token_embedding.weight, self.mlm_bias)  # [nodes, vocab]

    def forward(self, graphs: TokenGraphs) -> Tuple[Tensor, Tensor, Tensor]:
        """Masked-LM logits at the nodes with a label, their node indices, and
        the next-sentence logits of every sequence ``[num_graphs, 2]``."""
        if graphs.mlm_labels is None:
            raise GraphseqError("BertForPretraining needs mlm_labels in the batch (SentencePairs.batch "
                                "makes them); this batch has none")
        if graphs.mlm_labels.shape != graphs.tokens.shape:
            raise GraphseqError(f"BertForPretraining needs one mlm_label per token ({graphs.tokens.numel()}), "
                                f"got mlm_labels of shape {tuple(graphs.mlm_labels.shape)}")
        states = self.encoder(graphs.tokens, graphs.segments, graphs.positions, graphs.batch)
        masked = torch.nonzero(graphs.mlm_labels != IGNORE).flatten()
        pooled = torch.tanh(self.pooler(cls_states(states, graphs, "BertForPretraining")))
        return self.mlm_logits(states[masked]), masked, self.nsp(pooled)

    def loss(self, graphs: TokenGraphs) -> Tuple[Tensor, Dict[str, float]]:
        """The sum of the masked-LM and next-sentence cross-entropies, as in the
        paper, and each of them with its accuracy."""
        if graphs.nsp_labels is None or graphs.nsp_labels.shape != (graphs.num_graphs,):
            got = "none" if graphs.nsp_labels is None else f"shape {tuple(graphs.nsp_labels.shape)}"
            raise GraphseqError(f"BertForPretraining.loss needs one nsp_label per sequence "
                                f"({graphs.num_graphs}), got {got}")
        mlm_logits, masked, nsp_logits = self(graphs)
        mlm_targets = graphs.mlm_labels[masked]
        mlm_loss = F.cross_entropy(mlm_logits, mlm_targets) if masked.numel() else mlm_logits.sum()
        has_pair = graphs.nsp_labels != IGNORE
        nsp_loss = (F.cross_entropy(nsp_logits[has_pair], graphs.nsp_labels[has_pair])
                    if bool(has_pair.any()) else nsp_logits.sum() * 0.0)
        with torch.no_grad():
            figures = {"mlm_loss": float(mlm_loss), "nsp_loss": float(nsp_loss),
                       "mlm_correct": int((mlm_logits.argmax(-1) == mlm_targets).sum()),
                       "mlm_count": int(masked.numel()),
                       "nsp_correct": int((nsp_logits[has_pair].argmax(-1) == graphs.nsp_labels[has_pair]).sum()),
                       "nsp_count": int(has_pair.sum())}
        return mlm_loss + nsp_loss, figures


POOLS = ("cls", "mean")  # what BertClassifier reads: the [CLS] node, or the mean of a graph's nodes


class BertClassifier(nn.Module):
    """The encoder and the pooler on the ``[CLS]`` node (``pool = "cls"``) or
    on the mean of every node of the sentence's graph (``"mean"``), then
    dropout and a linear classifier: BERT's fine-tuning for a sentence's
    class."""

    def __init__(self, config: BertConfig, num_classes: int = 2, pool: str = "cls"):
        super().__init__()
        if pool not in POOLS:
            raise GraphseqError(f"pool must be one of {', '.join(POOLS)}, got {pool!r}")
        self.config, self.pool = config, pool
        self.encoder = BertEncoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden_size, num_classes)

    @classmethod
    def from_pretraining(cls, pretrained: BertForPretraining, num_classes: int = 2,
                         pooler: bool = True, pool: str = "cls") -> "BertClassifier":
        """A classifier whose encoder (and, with ``pooler``, the pooler the
        next-sentence head trained) start from ``pretrained``'s; the
        classifier layer starts afresh."""
        model = cls(pretrained.config, num_classes, pool)
        model.encoder.load_state_dict(pretrained.encoder.state_dict())
        if pooler:
            model.pooler.load_state_dict(pretrained.pooler.state_dict())
        return model

    def forward(self, graphs: TokenGraphs) -> Tensor:
        states = self.encoder(graphs.tokens, graphs.segments, graphs.positions, graphs.batch)
        read = (cls_states(states, graphs, "BertClassifier") if self.pool == "cls"
                else global_mean_pool(states, graphs.batch, size=graphs.num_graphs))
        pooled = torch.tanh(self.pooler(read))
        return self.classifier(self.dropout(pooled))  # [num_graphs, num_classes]


# --------------------------------------------------------------------------- #
# Saving, loading and filling in masks
# --------------------------------------------------------------------------- #

def save_pretrained(model: BertForPretraining, folder: Path) -> None:
    save_checkpoint({"config": asdict(model.config), "model": model.state_dict()}, Path(folder) / WEIGHTS_FILE)


def load_pretrained(folder: str | Path, device: torch.device | str = "cpu"
                    ) -> Tuple[BertForPretraining, WordPieceTokenizer]:
    """The pretrained model and its tokenizer from a ``bert-pretrain`` run folder."""
    folder = Path(folder)
    hint = f" ({folder.parent}, here)" if folder.name in (WEIGHTS_FILE, TOKENIZER_FILE) else ""
    check_run_folder(folder, f"give the --out folder of a bert-pretrain run{hint}")
    path = folder / WEIGHTS_FILE
    for place in (path, folder / TOKENIZER_FILE):
        check_file_place(place)  # a folder there is named as such, not as missing
    if not path.is_file():
        found = sorted(p.parent.name for p in folder.glob(f"*/{WEIGHTS_FILE}")) if folder.is_dir() else []
        hint = f"; its pretraining runs are {', '.join(str(folder / f) for f in found)}" if found else ""
        raise GraphseqError(f"{folder} holds no pretrained BERT ({WEIGHTS_FILE}){hint}")
    tokenizer = WordPieceTokenizer.load(folder)
    try:
        saved = load_checkpoint(path, map_location=device)
        model = BertForPretraining(BertConfig(**saved["config"]))
        model.load_state_dict(saved["model"])
    except GraphseqError:
        raise  # load_checkpoint's refusal names the file already
    except Exception as error:
        raise GraphseqError(f"damaged model file {path}: {first_sentence(error)}") from None
    if model.config.vocab_size != tokenizer.vocab_size:
        raise GraphseqError(f"{path} has {model.config.vocab_size} tokens but its tokenizer "
                            f"{tokenizer.vocab_size}: the files come from different runs")
    return model.to(device).eval(), tokenizer


@torch.no_grad()
def fill_mask(model: BertForPretraining, tokenizer: WordPieceTokenizer, text: str,
              top_k: int = 5) -> List[List[Tuple[str, float]]]:
    """For each ``[MASK]`` of ``text`` (any case: ``[mask]`` too), the
    ``top_k`` likeliest pieces and their probabilities; special tokens
    (``[MASK]``, ``[CLS]``, ...) are never proposed."""
    if model.config.vocab_size != tokenizer.vocab_size:
        raise GraphseqError(f"fill_mask: the model has {model.config.vocab_size} tokens but the tokenizer "
                            f"{tokenizer.vocab_size}: they come from different runs")
    if top_k < 1:
        raise GraphseqError(f"fill_mask needs top_k >= 1, got {top_k}")
    # The tokenizer lower-cases the text but knows the mask only as written: "[mask]" became 3 pieces.
    ids = tokenizer.encode(re.sub(re.escape(MASK), MASK, text, flags=re.IGNORECASE))
    if tokenizer.mask_id not in ids:
        raise GraphseqError(f"the text has no [MASK] to fill: {text!r}; write [MASK] where a word is to be filled in")
    tokens, segments = pack_pair(ids, None, model.config.max_len, tokenizer.cls_id, tokenizer.sep_id)
    if len(tokens) - 2 < len(ids):
        raise GraphseqError(f"the text has {len(ids)} pieces; the model reads at most "
                            f"{model.config.max_len - 2}")
    graphs = collate([tokens], [segments]).to(next(model.parameters()).device)
    with evaluating(model):
        states = model.encoder(graphs.tokens, graphs.segments, graphs.positions, graphs.batch)
        masked = torch.nonzero(graphs.tokens == tokenizer.mask_id).flatten()
        probabilities = model.mlm_logits(states[masked]).softmax(-1)  # [masks, vocab]
    probabilities[:, :len(SPECIAL_TOKENS)] = -1.0  # ids 0..4, ranked below every piece
    top = probabilities.topk(min(top_k, probabilities.size(-1) - len(SPECIAL_TOKENS)), dim=-1)
    return [[(tokenizer.id_to_token(i), float(p)) for p, i in zip(values.tolist(), indices.tolist())]
            for values, indices in zip(top.values, top.indices)]
