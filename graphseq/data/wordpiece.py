"""A WordPiece tokenizer for BERT-style models, trained on the corpus itself
with Hugging Face's ``tokenizers`` (offline, in seconds): BERT's normaliser
(lower case, accents stripped), BERT's pre-tokeniser (whitespace and
punctuation), and sub-word pieces marked ``##``. The tokenizer is saved as one
``tokenizer.json`` beside the model it serves, so fine-tuning and
``graphseq fill-mask`` read text exactly as pretraining did.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, List

from ..errors import GraphseqError
from ..io import atomic_write_text, check_file_place, first_sentence

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = [PAD, UNK, CLS, SEP, MASK]  # ids 0..4, in this order
TOKENIZER_FILE = "tokenizer.json"


def _tokenizers():
    try:
        import tokenizers
    except ImportError:  # pragma: no cover - a dependency of the base install
        raise GraphseqError("the WordPiece tokenizer needs Hugging Face's tokenizers "
                            "(pip install tokenizers)") from None
    return tokenizers


class WordPieceTokenizer:
    """Text to WordPiece ids and back.

    Build one with :meth:`train` or :meth:`load`. Special tokens have fixed
    ids: ``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2, ``[SEP]`` 3, ``[MASK]`` 4, and
    ``[MASK]`` written in a text is read as the mask token.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        ids = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
        if ids != list(range(len(SPECIAL_TOKENS))):
            raise GraphseqError(f"a WordPiece tokenizer must hold {', '.join(SPECIAL_TOKENS)} "
                                f"as ids 0-4, got {ids}")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids

    @classmethod
    def train(cls, sentences: Iterable[str], vocab_size: int = 8000,
              min_frequency: int = 2) -> "WordPieceTokenizer":
        """Learns a vocabulary of at most ``vocab_size`` pieces (special
        tokens and single characters included) from ``sentences``; a piece
        enters when it occurs at least ``min_frequency`` times."""
        tk = _tokenizers()
        tokenizer = tk.Tokenizer(tk.models.WordPiece(unk_token=UNK))
        tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = tk.decoders.WordPiece(cleanup=False)
        trainer = tk.trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                               special_tokens=SPECIAL_TOKENS, show_progress=False)
        tokenizer.train_from_iterator(sentences, trainer)
        # The trainer numbers pieces in hash order, which varies from process
        # to process; WordPiece reads words by longest match whatever the
        # ids, so sorted ids make the same pieces get the same ids. (Which
        # pieces make the cut can still vary where merges tie at the end of
        # the vocabulary: a run therefore saves its tokenizer and reuses it.)
        pieces = sorted(set(tokenizer.get_vocab()) - set(SPECIAL_TOKENS))
        vocab = {piece: i for i, piece in enumerate(SPECIAL_TOKENS + pieces)}
        tokenizer.model = tk.models.WordPiece(vocab, unk_token=UNK)
        return cls(tokenizer)

    @classmethod
    def load(cls, path: str | Path) -> "WordPieceTokenizer":
        """Reads a ``tokenizer.json`` written by :meth:`save` (a folder holding one also works)."""
        path = Path(path)
        if path.is_dir() and path.name != TOKENIZER_FILE:  # a run folder, say; not a folder in the file's place
            path = path / TOKENIZER_FILE
        check_file_place(path)  # a folder there is named as such, not as missing
        if not path.is_file():
            raise GraphseqError(f"no tokenizer at {path}")
        try:
            tokenizer = _tokenizers().Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises a bare Exception on bad JSON.
            raise GraphseqError(f"damaged tokenizer file {path}: {first_sentence(error)}") from None
        try:
            return cls(tokenizer)
        except GraphseqError as error:  # readable, but not one of ours
            raise GraphseqError(f"{path}: {error}") from None

    def save(self, path: str | Path) -> None:
        """Writes ``tokenizer.json`` at ``path`` (into it, if it is a folder, as :meth:`load` reads it)."""
        path = Path(path)
        atomic_write_text(path / TOKENIZER_FILE if path.is_dir() else path, self.tokenizer.to_str())

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> List[int]:
        """The piece ids of ``text``, without ``[CLS]``/``[SEP]``."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: List[str]) -> List[List[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def tokens(self, text: str) -> List[str]:
        """The pieces of ``text`` as strings (``##`` marks a piece inside a word)."""
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def words(self, text: str) -> List[str]:
        """The words the pieces are cut from: the normalised, pre-tokenised text."""
        normalized = self.tokenizer.normalizer.normalize_str(text)
        return [word for word, _ in self.tokenizer.pre_tokenizer.pre_tokenize_str(normalized)]

    def decode(self, ids: List[int], skip_special_tokens: bool = True) -> str:
        """The pieces joined into words, one space between words and no
        clean-up around punctuation, so ``decode(encode(t))`` gives back
        ``" ".join(words(t))`` whenever no word is unknown."""
        size = self.vocab_size
        outside = [i for i in ids if not 0 <= i < size]
        if outside:
            raise GraphseqError(f"WordPieceTokenizer.decode: id {outside[0]} is outside the vocabulary's "
                                f"{size} pieces (ids 0 to {size - 1})")
        pieces = [self.tokenizer.id_to_token(i) for i in ids
                  if not (skip_special_tokens and i < len(SPECIAL_TOKENS))]
        return " ".join(pieces).replace(" ##", "")

    def id_to_token(self, i: int) -> str:
        """The piece with id ``i``."""
        size = self.vocab_size
        if not 0 <= i < size:
            raise GraphseqError(f"WordPieceTokenizer.id_to_token: id {i} is outside the vocabulary's "
                                f"{size} pieces (ids 0 to {size - 1})")
        return self.tokenizer.id_to_token(i)

    def __repr__(self) -> str:
        return f"WordPieceTokenizer({self.vocab_size} pieces)"
