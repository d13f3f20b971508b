"""The captioner: the three decoders on ChainLSTM, what each does with the
image, teacher forcing equal to stepping, attention that sums to one over the
regions, the frozen encoder, and decoding (greedy, beam, sampling)."""
import pytest
import torch
from torch import nn

from graphseq import graphs
from graphseq.data.captions import caption_vocabulary
from graphseq.data.text import Vocabulary
from graphseq.errors import GraphseqError
from graphseq.models.caption_search import beam_search, caption_image, greedy, sample
from graphseq.models.captioner import (AttentionDecoder, Captioner, ConvEncoder, InitDecoder, InputDecoder,
                                       grid_positions, load_captioner)
from graphseq.nn import ChainLSTM

WORDS = [["a", "red", "circle"], ["a", "blue", "square", "left", "of", "a", "red", "circle"], ["a", "green", "diamond"]]
VOCAB = caption_vocabulary(WORDS)
F_DIM, R = 12, 16  # feature size, regions (a 4x4 grid)


def _features(batch=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    regions = torch.randn(batch, R, F_DIM, generator=generator)
    return regions, regions.mean(dim=1)


def _nodes(captions):
    model = Captioner(VOCAB, "init", channels=(4, 4, 4, F_DIM), hidden_size=8, embedding_dim=6)
    return model.caption_nodes(captions)


@pytest.mark.parametrize("cls, extra", [(InitDecoder, {}), (InputDecoder, {}), (AttentionDecoder, {}),
                                        (AttentionDecoder, {"layers": 1, "heads": 2}),
                                        (AttentionDecoder, {"layers": 3, "num_layers": 2})])
def test_teacher_forcing_equals_stepping_word_by_word(cls, extra):
    torch.manual_seed(0)
    decoder = cls(len(VOCAB), F_DIM, embedding_dim=6, hidden_size=8, **extra).eval()
    regions, pooled = _features()
    inputs, _, lengths = _nodes(WORDS)
    forced = decoder(regions, pooled, inputs, lengths)  # [num_nodes, vocab]
    assert forced.shape == (int(lengths.sum()), len(VOCAB))
    offset = 0
    for image, length in enumerate(lengths.tolist()):
        state = None
        for t in range(length):
            logits, state, _ = decoder.step(inputs[offset + t:offset + t + 1], state, regions, pooled,
                                            torch.tensor([image]))
            assert torch.allclose(logits[0], forced[offset + t], atol=1e-5), (image, t)
        offset += length


def test_input_decoder_with_zero_image_weights_is_a_chain_lstm_language_model():
    torch.manual_seed(1)
    decoder = InputDecoder(len(VOCAB), F_DIM, embedding_dim=6, hidden_size=8).eval()
    with torch.no_grad():
        decoder.rnn.weight_ih_l0[:, 6:] = 0.0  # the columns that read the image
    # A plain language model: the same embedding, a ChainLSTM that reads the
    # words alone, the same read-out.
    lm_rnn = ChainLSTM(6, 8)
    state = {k: v for k, v in decoder.rnn.state_dict().items()}
    state["weight_ih_l0"] = state["weight_ih_l0"][:, :6]
    lm_rnn.load_state_dict(state)
    inputs, _, lengths = _nodes(WORDS)
    hidden, _ = lm_rnn(decoder.embedding(inputs), graphs.chain(lengths), graphs.lengths_to_batch(lengths))
    language_model = decoder.readout(hidden)
    regions, pooled = _features(seed=2)
    assert torch.allclose(decoder(regions, pooled, inputs, lengths), language_model, atol=1e-6)
    # With its image weights back, the image changes what it predicts.
    torch.manual_seed(1)
    seeing = InputDecoder(len(VOCAB), F_DIM, embedding_dim=6, hidden_size=8).eval()
    assert not torch.allclose(seeing(regions, pooled, inputs, lengths), language_model, atol=1e-3)


def test_init_decoder_starts_each_chain_from_its_image():
    torch.manual_seed(2)
    decoder = InitDecoder(len(VOCAB), F_DIM, embedding_dim=6, hidden_size=8)
    _, pooled = _features()
    h, c = decoder.initial_state(pooled)
    assert h.shape == c.shape == (1, 3, 8)
    assert torch.allclose(h[0], torch.tanh(decoder.init_h(pooled)))
    # The same words on two images give two different predictions.
    inputs, _, lengths = _nodes([WORDS[0], WORDS[0]])
    logits = decoder(*_features(batch=2), inputs, lengths)
    assert not torch.allclose(logits[:4], logits[4:])


def test_attention_of_each_word_sums_to_one_over_its_images_regions():
    torch.manual_seed(3)
    decoder = AttentionDecoder(len(VOCAB), F_DIM, embedding_dim=6, hidden_size=8, heads=2)
    regions, pooled = _features()
    query = torch.randn(5, 8)
    rows = torch.tensor([0, 2, 2, 1, 0])
    context, alpha = decoder.attend(regions, query, rows)
    assert context.shape == (5, 8) and alpha.shape == (5, R, 2)
    assert torch.allclose(alpha.sum(dim=1), torch.ones(5, 2), atol=1e-6)
    assert (alpha >= 0).all()
    # Words of the same image with the same query attend alike; the context
    # depends only on that image's regions.
    same, _ = decoder.attend(regions, query[[1, 1]], torch.tensor([2, 2]))
    assert torch.allclose(same[0], same[1])
    changed = regions.clone()
    changed[0] += 1.0
    moved, _ = decoder.attend(changed, query, rows)
    assert torch.allclose(moved[[1, 2, 3]], context[[1, 2, 3]], atol=1e-6)
    assert not torch.allclose(moved[0], context[0])
    # Stepping reports the same attention for every word.
    # Every round of attention, and stepping, gives such weights.
    _, alpha_first = decoder.attend(regions, query, rows, layer=0)
    assert torch.allclose(alpha_first.sum(dim=1), torch.ones(5, 2), atol=1e-6)
    _, _, step_alpha = decoder.step(torch.tensor([1, 1]), None, regions, pooled, torch.tensor([0, 1]))
    assert step_alpha.shape == (2, R, 2)
    assert torch.allclose(step_alpha.sum(dim=1), torch.ones(2, 2), atol=1e-6)


def test_attention_is_multihead_attention_of_the_query_over_the_placed_regions():
    torch.manual_seed(4)
    decoder = AttentionDecoder(len(VOCAB), F_DIM, embedding_dim=6, hidden_size=8, heads=2)
    reference = nn.MultiheadAttention(8, 2, kdim=F_DIM, vdim=F_DIM, batch_first=True)
    reference.load_state_dict(decoder.attentions[-1].state_dict())
    regions, _ = _features()
    query = torch.randn(3, 8)
    context, alpha = decoder.attend(regions, query, torch.arange(3))
    placed = regions + grid_positions(R, F_DIM)
    expected, weights = reference(query[:, None], placed, placed, average_attn_weights=False)
    assert torch.allclose(context, expected[:, 0], atol=1e-5)
    assert torch.allclose(alpha, weights[:, :, 0].transpose(1, 2), atol=1e-6)


def test_grid_positions_tell_every_cell_apart():
    encoding = grid_positions(16, 10)
    assert encoding.shape == (16, 10)
    assert torch.equal(encoding[:, 8:], torch.zeros(16, 2))  # channels beyond a multiple of 4
    assert torch.cdist(encoding, encoding).add(torch.eye(16)).min() > 0.1
    # Cells of one row share the row half, cells of one column the column half.
    assert torch.equal(encoding[0, :4], encoding[3, :4]) and torch.equal(encoding[0, 4:8], encoding[12, 4:8])
    with pytest.raises(ValueError, match="square"):
        grid_positions(15, 8)


def test_encoder_gives_a_grid_of_regions_and_their_mean():
    encoder = ConvEncoder((4, 8, 8, 16)).eval()
    regions, pooled = encoder(torch.rand(2, 3, 64, 64))
    assert regions.shape == (2, 64, 16) and pooled.shape == (2, 16)
    assert torch.allclose(pooled, regions.mean(dim=1))
    with pytest.raises(ValueError, match="multiples of 8"):
        encoder(torch.rand(2, 3, 60, 60))


def _captioner(decoder="attention", freeze=True):
    torch.manual_seed(5)
    return Captioner(VOCAB, decoder, channels=(4, 8, 8, F_DIM), image_size=32, freeze_encoder=freeze,
                     embedding_dim=6, hidden_size=8)


def test_a_frozen_encoder_keeps_its_weights_and_statistics():
    model = _captioner(freeze=True).train()
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    regions, pooled = model.encode(torch.rand(2, 3, 32, 32))
    loss = model.loss(regions, pooled, WORDS[:2])
    loss.backward()
    assert not model.encoder.training
    assert all(p.grad is None for p in model.encoder.parameters())
    assert all(torch.equal(v, model.encoder.state_dict()[k]) for k, v in before.items())
    tuned = _captioner(freeze=False).train()
    tuned.loss(*tuned.encode(torch.rand(2, 3, 32, 32)), WORDS[:2]).backward()
    assert tuned.encoder.training and all(p.grad is not None for p in tuned.encoder.parameters())


def test_caption_nodes_shift_the_words_by_one():
    model = _captioner()
    inputs, targets, lengths = model.caption_nodes([["a", "red", "circle"]])
    assert lengths.tolist() == [4]
    assert [VOCAB.symbols[i] for i in inputs] == ["<start>", "a", "red", "circle"]
    assert [VOCAB.symbols[i] for i in targets] == ["a", "red", "circle", "<end>"]


@pytest.mark.parametrize("decoder", ["init", "input", "attention"])
def test_beam_of_width_one_is_greedy_and_sampling_at_zero_temperature_too(decoder):
    model = _captioner(decoder).eval()
    images = torch.rand(3, 3, 32, 32)
    first = greedy(model, images, max_length=6)
    one = beam_search(model, images, beam_size=1, max_length=6)
    assert one.words == first.words
    assert one.log_probs == pytest.approx(first.log_probs, abs=1e-5)
    assert sample(model, images, temperature=0.0, max_length=6).words == first.words
    assert all(len(w) <= 6 for w in first.words)


def test_beam_search_finds_the_likelier_caption_greedy_misses():
    # A made-up model whose first word is "a" (0.6) or "red" (0.4); after
    # "a" every word is equally likely, after "red" the end is certain. Greedy
    # takes "a"; a beam of two finds "red" (log 0.4 > log 0.6 / (vocab - 4)).
    model = _captioner("init").eval()
    a, red, end = (VOCAB.index[w] for w in ("a", "red", "<end>"))

    def step(words, state, regions, pooled, rows):
        logits = torch.full((words.numel(), len(VOCAB)), -1e9)
        first = words == VOCAB.index["<start>"]
        logits[first, a], logits[first, red] = 0.6, 0.4
        logits[first] = torch.log(torch.softmax(logits[first], dim=-1))
        after_a = words == a
        logits[after_a, 4:] = 0.0
        logits[words == red, end] = 0.0
        logits[~(first | after_a | (words == red)), end] = 0.0
        return logits, (torch.zeros(1, words.numel(), 1),), None

    model.decoder.step = step
    images = torch.rand(1, 3, 32, 32)
    assert greedy(model, images, max_length=4).words[0][0] == "a"
    best = beam_search(model, images, beam_size=2, max_length=4)
    assert best.words == [["red"]]
    assert best.log_probs[0] == pytest.approx(torch.log(torch.softmax(torch.tensor([0.6, 0.4]), 0))[1].item(), abs=1e-4)


def test_sampling_follows_its_generator():
    model = _captioner("input").eval()
    images = torch.rand(2, 3, 32, 32)
    draws = [sample(model, images, 1.0, 8, torch.Generator().manual_seed(7)).words for _ in range(2)]
    assert draws[0] == draws[1]



@pytest.mark.parametrize("temperature", [1e-40, 1e-320])
def test_sampling_at_a_tiny_temperature_is_greedy_instead_of_failing(temperature):
    # log_probs / 1e-40 overflowed float32 to -inf everywhere, and softmax of that is nan.
    model = _captioner("attention").eval()
    images = torch.rand(3, 3, 32, 32)
    drawn = sample(model, images, temperature, 6, torch.Generator().manual_seed(0))
    assert drawn.words == greedy(model, images, max_length=6).words


@pytest.mark.parametrize("decoder", ["init", "attention"])
def test_the_unknown_word_is_never_written(decoder):
    model = _captioner(decoder).eval()
    unknown = VOCAB.index["<unk>"]
    assert model.unknown_id == unknown
    with torch.no_grad():
        model.decoder.readout.bias[unknown] = 50.0  # by far the likeliest word at every step
    images = torch.rand(4, 3, 32, 32)
    for out in (greedy(model, images, 5), beam_search(model, images, 3, 5),
                sample(model, images, 1.0, 5, torch.Generator().manual_seed(0))):
        assert len(out.words) == 4 and all("<unk>" not in words for words in out.words)


def test_a_vocabulary_without_the_unknown_word_writes_every_word():
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "a", "red"])
    torch.manual_seed(0)
    model = Captioner(vocab, "init", channels=(4, 4, 4, F_DIM), image_size=32, embedding_dim=6, hidden_size=8).eval()
    assert model.unknown_id is None
    with torch.no_grad():
        model.decoder.readout.weight.zero_()
        model.decoder.readout.bias.copy_(torch.tensor([9.0, 9.0, 0.0, 1.0, 2.0]))  # pad, start banned; red first
    assert greedy(model, torch.rand(1, 3, 32, 32), max_length=3).words == [["red"] * 3]


def test_a_checkpoint_whose_configuration_does_not_fit_its_weights_is_one_line_naming_it(tmp_path):
    checkpoint = _captioner("attention").checkpoint()
    checkpoint["model_config"]["hidden_size"] = 16
    torch.save(checkpoint, tmp_path / "captioner.pt")
    with pytest.raises(GraphseqError) as refusal:
        load_captioner(tmp_path)
    message = str(refusal.value)
    assert "\n" not in message and len(message) < 250
    assert message.startswith(f"cannot read the captioner checkpoint {tmp_path / 'captioner.pt'}: Error(s) in "
                              f"loading state_dict for Captioner: ")
    del checkpoint["model_config"]
    torch.save(checkpoint, tmp_path / "captioner.pt")
    with pytest.raises(GraphseqError, match=r"captioner.pt: no 'model_config'$"):
        load_captioner(tmp_path)

def test_greedy_attention_has_a_row_per_word_and_the_end():
    model = _captioner("attention").eval()
    out = greedy(model, torch.rand(2, 3, 32, 32), max_length=5)
    for words, alpha in zip(out.words, out.attention):
        assert alpha.shape == (len(words) + 1, R)
        assert torch.allclose(alpha.sum(dim=1), torch.ones(len(words) + 1), atol=1e-5)
    assert greedy(_captioner("init").eval(), torch.rand(2, 3, 32, 32), max_length=5).attention is None


@pytest.mark.parametrize("temperature", [float("nan"), float("inf")])
def test_caption_image_refuses_a_temperature_that_is_not_finite_before_reading_anything(tmp_path, temperature):
    with pytest.raises(GraphseqError, match="^--temperature must be a finite number >= 0, got "):
        caption_image(tmp_path / "no-run", tmp_path / "no-image.png", samples=2, temperature=temperature)


def test_loss_refuses_caption_strings_and_a_caption_count_unlike_the_images():
    model = _captioner("input")
    with pytest.raises(TypeError, match="each caption as a list of words, got the string 'a red circle'"):
        model.caption_nodes(["a red circle"])
    regions, pooled = model.encode(torch.rand(2, 3, 32, 32))
    with pytest.raises(TypeError, match="tokenize_caption"):
        model.loss(regions, pooled, ["a red circle", "a green diamond"])
    for captions in (WORDS[:1], WORDS):
        with pytest.raises(ValueError, match=f"Captioner.loss got {len(captions)} captions for 2 images"):
            model.loss(regions, pooled, captions)


def test_words_refuse_ids_outside_the_vocabulary_and_the_vocabulary_needs_the_special_symbols():
    model = _captioner("init")
    assert model.words([VOCAB.index["a"], VOCAB.index["red"], model.end_id, 99]) == ["a", "red"]
    for bad in (len(VOCAB), -1):
        with pytest.raises(ValueError, match=f"id {bad} is not one of the {len(VOCAB)} words"):
            model.words([VOCAB.index["a"], bad])
    with pytest.raises(ValueError, match="lacks the symbols <start>, <end>, <pad>"):
        Captioner(Vocabulary(["<unk>", "a"], unknown="<unk>"), "init", channels=(4, 4, 4, F_DIM))


@pytest.mark.parametrize("decode, message", [
    (lambda m, x: greedy(m, x, max_length=-1), "^max_length must be at least 1 word, got -1$"),
    (lambda m, x: greedy(m, x, max_length=0), "^max_length must be at least 1 word, got 0$"),
    (lambda m, x: greedy(m, x, max_length=101), "^max_length must be at most 100 words, got 101"),
    (lambda m, x: sample(m, x, temperature=-1.0), "^temperature must be a finite number >= 0, got -1.0$"),
    (lambda m, x: sample(m, x, temperature=float("nan")), "^temperature must be a finite number >= 0, got nan$"),
    (lambda m, x: beam_search(m, x, beam_size=0), "^beam_size must be at least 1, got 0$"),
    (lambda m, x: beam_search(m, x, max_length=-1), "^max_length must be at least 1 word, got -1$"),
])
def test_decoding_refuses_what_caption_image_refuses(decode, message):
    with pytest.raises(GraphseqError, match=message):
        decode(_captioner("init").eval(), torch.rand(1, 3, 32, 32))


@pytest.mark.parametrize("decoder", ["init", "input", "attention"])
def test_decoding_no_images_writes_no_captions(decoder):
    model = _captioner(decoder).train()
    attention = [] if decoder == "attention" else None
    for decode in (greedy, sample, beam_search):
        out = decode(model, torch.rand(0, 3, 32, 32))
        assert (out.words, out.log_probs, out.attention) == ([], [], attention)
        assert model.training
    with pytest.raises(ValueError, match="ConvEncoder expects images"):
        greedy(model, torch.rand(0, 1, 32, 32))
    regions, pooled = model.encode(torch.rand(0, 3, 32, 32))
    with pytest.raises(ValueError, match="^Captioner.loss needs at least one caption, got an empty batch$"):
        model.loss(regions, pooled, [])


def test_caption_image_will_not_draw_over_its_image_or_into_the_run(tmp_path):
    from graphseq.errors import GraphseqError
    from graphseq.models.caption_search import caption_image

    image = tmp_path / "photo.png"
    image.write_bytes(b"not read: refused before")
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(GraphseqError, match="same file as the input"):
        caption_image(run, image, attention=image)
    with pytest.raises(GraphseqError, match="inside the run folder"):
        caption_image(run, image, attention=run / "attention.png")
    assert image.read_bytes() == b"not read: refused before" and list(run.iterdir()) == []


@pytest.mark.parametrize("loader,name", [("charlm", "checkpoint.pt"), ("captioner", "captioner.pt"),
                                         ("bert", "bert.pt"), ("tokenizer", "tokenizer.json")])
def test_loaders_name_a_folder_in_their_files_place(tmp_path, loader, name):
    from graphseq.data.wordpiece import WordPieceTokenizer
    from graphseq.errors import GraphseqError
    from graphseq.models.bert import load_pretrained
    from graphseq.models.captioner import load_captioner
    from graphseq.models.charlm import load_char_lm

    (tmp_path / name).mkdir()
    load = {"charlm": load_char_lm, "captioner": load_captioner, "bert": load_pretrained,
            "tokenizer": WordPieceTokenizer.load}[loader]
    with pytest.raises(GraphseqError, match=f"{tmp_path / name} is a folder, not a file"):
        load(tmp_path / name if loader == "tokenizer" else tmp_path)


@pytest.fixture(scope="module")
def shapes_captioner(tmp_path_factory):
    """A run folder with an untrained captioner that knows the colours of 100 shapes training images."""
    from graphseq.data.shapes import load_shapes
    from graphseq.io import save_checkpoint
    from graphseq.models.captioner import MODEL_FILE
    from graphseq.stages.captioning import image_range

    torch.manual_seed(0)
    model = Captioner(caption_vocabulary([["a", "red", "circle"]]), "attention", channels=(4, 8, 8, 12),
                      image_size=64, embedding_dim=6, hidden_size=8)
    model.image_range = image_range(load_shapes("train", 100))
    run = tmp_path_factory.mktemp("captioner")
    save_checkpoint(model.checkpoint(), run / MODEL_FILE)
    return run


@pytest.mark.parametrize("image, unlike", [
    ("shapes", ""),
    ("black", "its colours are far from theirs"),
    ("tiny", "it is 1x1 pixels, smaller than the 64x64 the model reads"),
])
def test_an_image_unlike_the_training_images_is_captioned_with_a_warning(shapes_captioner, tmp_path, capsys,
                                                                          image, unlike):
    # An all-black image came back as "a large red square", without a word of doubt.
    from PIL import Image

    from graphseq.cli import main
    from graphseq.data.shapes import load_shapes

    path = tmp_path / f"{image}.png"
    if image == "shapes":
        Image.fromarray(load_shapes("test", 1).images[0].permute(1, 2, 0).numpy()).save(path)
    else:  # the tiny one in the background's grey: only its size is unlike
        size, colour = ((64, 64), (0, 0, 0)) if image == "black" else ((1, 1), (40, 40, 40))
        Image.new("RGB", size, colour).save(path)
    assert main(["caption", str(shapes_captioner), str(path), "--max-length", "3"]) == 0
    printed = capsys.readouterr()
    assert printed.out.strip()  # captioned all the same
    warning = [line for line in printed.err.splitlines() if "warning" in line]
    assert warning == ([f"graphseq: warning: {path} is unlike the images the model was trained on ({unlike}"
                        f"); its caption may not describe it"] if unlike else [])
