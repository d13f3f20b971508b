"""Writing captions with a trained :class:`~graphseq.models.captioner.Captioner`:
greedy decoding, beam search of width ``k`` and sampling at a temperature.
All three grow a batch of partial captions one word node at a time through
the decoder's ``step``; beams of one image are rows that share its image
features, so every image of a batch is searched at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import torch
from torch import Tensor

from ..devices import resolve_device
from ..errors import GraphseqError
from ..pictures import draw_attention
from . import evaluating
from .captioner import Captioner, colour_summary
from .charlm import tempered_softmax

# Bounds of a request, so that a mistyped number is refused rather than
# filling the memory: captions of the models trained here run to a dozen
# words, and a thousand drawn captions show their spread well enough.
MAX_CAPTION_WORDS = 100
MAX_SAMPLES = 1000


@dataclass
class Generated:
    """The captions written for a batch of images: the words of each
    (without start and end symbols), their log-probability under the model,
    and for an attention decoder the attention of every generated word over
    the regions, ``[words + 1, regions]`` (the last row is the end symbol's),
    averaged over heads."""
    words: List[List[str]]
    log_probs: List[float]
    attention: Optional[List[Tensor]] = field(default=None)
    unlike: str = ""  # how the image captioned is unlike the training images, where it is


def check_request(max_length: int, temperature: float = 0.0, beam_size: int = 1, samples: int = 0,
                  options: bool = False) -> None:
    """Refuses a decoding request outside the bounds above, before anything
    is read or drawn, naming the arguments (``options``: the CLI's options)."""
    def name(argument: str, option: str) -> str:
        return option if options else argument

    if beam_size < 1:
        raise GraphseqError(f"{name('beam_size', '--beam')} must be at least 1, got {beam_size}")
    if samples < 0:
        raise GraphseqError(f"{name('samples', '--sample')} must be at least 0, got {samples}")
    if not math.isfinite(temperature) or temperature < 0:
        raise GraphseqError(f"{name('temperature', '--temperature')} must be a finite number >= 0, got {temperature}")
    if max_length < 1:
        raise GraphseqError(f"{name('max_length', '--max-length')} must be at least 1 word, got {max_length}")
    if max_length > MAX_CAPTION_WORDS:
        raise GraphseqError(f"{name('max_length', '--max-length')} must be at most {MAX_CAPTION_WORDS} "
                            f"words, got {max_length}")
    if samples > MAX_SAMPLES:
        raise GraphseqError(f"{name('samples', '--sample')} must be at most {MAX_SAMPLES} captions, "
                            f"got {samples}")


def _next_word_log_probs(model: Captioner, logits: Tensor) -> Tensor:
    """Log-probabilities of the next word; padding, the start symbol and the
    unknown word (training's stand-in for rare words, not a word to show) are
    never written."""
    never = [model.pad_id, model.start_id] + ([model.unknown_id] if model.unknown_id is not None else [])
    banned = torch.tensor(never, device=logits.device)
    return logits.index_fill(1, banned, float("-inf")).log_softmax(dim=-1)


def _nothing(model: Captioner) -> Generated:
    """What an empty batch of images gets: no captions."""
    return Generated([], [], [] if model.config["decoder"] == "attention" else None)


def _finish(model: Captioner, tokens: Tensor, scores: Tensor, alphas: Optional[Tensor]) -> Generated:
    words, attention = [], []
    for b in range(tokens.size(0)):
        caption = model.words(tokens[b].tolist())
        words.append(caption)
        if alphas is not None:
            attention.append(alphas[b, :len(caption) + 1].cpu())
    return Generated(words, scores.tolist(), attention if alphas is not None else None)


@torch.no_grad()
def greedy(model: Captioner, images: Tensor, max_length: int = 20) -> Generated:
    """The likeliest word at every step, until the end symbol or ``max_length`` words (no images: no captions)."""
    return sample(model, images, temperature=0.0, max_length=max_length)


@torch.no_grad()
def sample(model: Captioner, images: Tensor, temperature: float = 1.0, max_length: int = 20,
           generator: Optional[torch.Generator] = None) -> Generated:
    """Each word drawn from the model's distribution sharpened by
    ``temperature`` (``0`` takes the likeliest word: greedy decoding)."""
    check_request(max_length, temperature)
    with evaluating(model):
        regions, pooled = model.encode(images)
        n = images.size(0)
        if n == 0:
            return _nothing(model)
        device = pooled.device
        rows = torch.arange(n, device=device)
        words = torch.full((n,), model.start_id, dtype=torch.long, device=device)
        tokens = torch.full((n, max_length + 1), model.end_id, dtype=torch.long, device=device)
        scores = torch.zeros(n, device=device)
        done = torch.zeros(n, dtype=torch.bool, device=device)
        alphas, state = [], None
        for t in range(max_length + 1):
            logits, state, alpha = model.decoder.step(words, state, regions, pooled, rows)
            log_probs = _next_word_log_probs(model, logits)
            if t == max_length:  # Out of room: the caption ends here.
                words = torch.full_like(words, model.end_id)
            elif temperature > 0:
                probs = tempered_softmax(log_probs, temperature)
                words = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            else:
                words = log_probs.argmax(dim=-1)
            scores += torch.where(done, 0.0, log_probs.gather(1, words[:, None]).squeeze(1))
            tokens[:, t] = torch.where(done, model.end_id, words)
            if alpha is not None:
                alphas.append(alpha.mean(dim=-1))  # [n, regions]
            done |= words == model.end_id
            if bool(done.all()):
                break
    return _finish(model, tokens, scores, torch.stack(alphas, 1) if alphas else None)


@torch.no_grad()
def beam_search(model: Captioner, images: Tensor, beam_size: int = 3, max_length: int = 20,
                length_penalty: float = 0.0) -> Generated:
    """Keeps the ``beam_size`` likeliest partial captions of every image and
    returns the likeliest finished one. A finished caption competes with the
    unfinished ones on its total log-probability; with ``length_penalty``
    ``a > 0`` the final choice divides it by ``((5 + length) / 6) ** a``
    (Wu et al., 2016), which favours longer captions; ``length`` counts the
    end symbol (words + 1)."""
    check_request(max_length, beam_size=beam_size)
    with evaluating(model):
        regions, pooled = model.encode(images)
        n, k, device = images.size(0), beam_size, pooled.device
        if n == 0:
            return _nothing(model)
        rows = torch.arange(n, device=device).repeat_interleave(k)  # the image of each beam
        words = torch.full((n * k,), model.start_id, dtype=torch.long, device=device)
        # Only the first beam of each image is alive at the start, so the first
        # step does not fill the beam with k copies of the same word.
        scores = torch.full((n, k), float("-inf"), device=device)
        scores[:, 0] = 0.0
        tokens = torch.full((n * k, 0), model.end_id, dtype=torch.long, device=device)
        lengths = torch.zeros(n * k, dtype=torch.long, device=device)
        done = torch.zeros(n * k, dtype=torch.bool, device=device)
        alphas: Optional[Tensor] = None
        state = None
        for t in range(max_length + 1):
            logits, state, alpha = model.decoder.step(words, state, regions, pooled, rows)
            log_probs = _next_word_log_probs(model, logits)  # [n * k, vocab]
            if t == max_length:  # Out of room: every caption ends here.
                others = torch.arange(log_probs.size(1), device=device) != model.end_id
                log_probs = log_probs.masked_fill(others, float("-inf"))
            # A finished caption stays as it is, at the same score.
            finished = torch.full_like(log_probs[0], float("-inf"))
            finished[model.end_id] = 0.0
            log_probs = torch.where(done[:, None], finished, log_probs)
            vocab = log_probs.size(1)
            candidates = (scores.view(-1, 1) + log_probs).view(n, k * vocab)
            scores, best = candidates.topk(k, dim=1)  # [n, k]
            beam = (best // vocab + torch.arange(n, device=device)[:, None] * k).flatten()
            words = (best % vocab).flatten()
            tokens = torch.cat([tokens[beam], words[:, None]], dim=1)
            lengths = torch.where(done[beam], lengths[beam], lengths[beam] + 1)
            done = done[beam] | (words == model.end_id)
            state = tuple(s[:, beam] for s in state)
            if alpha is not None:
                step_alpha = alpha.mean(dim=-1)[beam][:, None]  # [n * k, 1, regions]
                alphas = step_alpha if alphas is None else torch.cat([alphas[beam], step_alpha], dim=1)
            if bool(done.all()):
                break
        final = scores.flatten()
        if length_penalty > 0:
            final = final / ((5.0 + lengths.float()) / 6.0) ** length_penalty
        choice = final.view(n, k).argmax(dim=1) + torch.arange(n, device=device) * k
    return _finish(model, tokens[choice], scores.flatten()[choice],
                   None if alphas is None else alphas[choice])


def caption_image(run_dir: str | Path, image: str | Path, *, beam_size: int = 3, samples: int = 0,
                  temperature: float = 1.0, seed: Optional[int] = None, max_length: int = 20,
                  attention: Optional[str | Path] = None, device: str = "cpu") -> Generated:
    """Captions an image file with the model a ``caption-*`` run kept: the
    best caption of a beam search of width ``beam_size`` (1: greedy), or
    ``samples`` captions drawn at ``temperature``. With ``attention`` (an
    attention decoder only) writes the picture of each word's attention over
    the image's regions there (a name ending in ``.png``, neither the image
    nor inside ``run_dir``). Everything is checked before anything is
    written."""
    from ..data.captions import read_image
    from ..io import check_output_file
    from .captioner import load_captioner

    check_request(max_length, temperature, beam_size, samples, options=True)
    if attention is not None:
        check_output_file(attention, ".png", "--attention", inputs=[image], run_dir=run_dir)
    model = load_captioner(run_dir, resolve_device(device))
    if attention is not None and model.config["decoder"] != "attention":
        raise GraphseqError(f"--attention draws an attention decoder's weights, but {run_dir} holds "
                            f"a {model.config['decoder']!r} decoder")
    if beam_size > len(model.vocab):  # A wider beam holds nothing more, only takes longer.
        raise GraphseqError(f"--beam must be at most {len(model.vocab)}, the number of words the model "
                            f"knows, got {beam_size}")
    picture = read_image(Path(image), model.config["image_size"])
    unlike = unlike_training(model, picture, Path(image))
    images = picture.unsqueeze(0).to(next(model.parameters()).device)
    if samples > 0:
        generator = torch.Generator(device=images.device)
        if seed is None:
            generator.seed()  # a fresh seed of its own: torch.seed() would reseed the global generator
        else:
            generator.manual_seed(seed)
        out = sample(model, images.expand(samples, -1, -1, -1), temperature, max_length, generator)
    else:
        out = beam_search(model, images, beam_size, max_length)
    if attention is not None:
        draw_attention([picture] * len(out.words), out.words, out.attention, attention)
    out.unlike = unlike
    return out


def unlike_training(model: Captioner, picture: Tensor, path: Path) -> str:
    """How the image at ``path`` (read as ``picture``) is unlike the images
    the model was trained on, or "": smaller than the model's input (its
    detail is made up by the resizing), or colours outside the training
    images' range (:func:`~graphseq.models.captioner.colour_summary`,
    widened by half its width: only an image far from all of them, a black
    or a white one, is told). A model does not know what it was not shown,
    and captions such an image as confidently as any."""
    from PIL import Image

    reasons = []
    side = model.config["image_size"]
    with Image.open(path) as stored:
        width, height = stored.size
    if min(width, height) < side:
        reasons.append(f"it is {width}x{height} pixels, smaller than the {side}x{side} the model reads")
    if model.image_range is not None:
        low, high = (torch.tensor(bound) for bound in model.image_range)
        margin = (high - low) / 2 + 0.02
        summary = colour_summary(picture[None].cpu())[0]
        if bool(((summary < low - margin) | (summary > high + margin)).any()):
            reasons.append("its colours are far from theirs")
    return "; ".join(reasons)
