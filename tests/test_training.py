"""The step trainer: resuming continues exactly, the best weights by a
validation figure come back, checkpoints are never torn, a budget is required."""
import io
import logging
import math
import re
import sys
import time
import traceback

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import Terminal
import graphseq.training
from graphseq.errors import GraphseqError
from graphseq.io import first_sentence, load_checkpoint, save_checkpoint
from graphseq.training import train_steps


def place(out, resume=False, quiet=True, log=None):
    """Where train_steps trains, as a stage hands it over."""
    out.mkdir(parents=True, exist_ok=True)
    return dict(out=out, device=torch.device("cpu"), resume=resume, quiet=quiet,
                log=log or logging.getLogger("test-training"), pipeline="test")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = nn.Linear(4, 8)
        self.drop = nn.Dropout(0.3)  # Draws from the global generator every step.
        self.lin2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.lin2(self.drop(torch.relu(self.lin1(x))))


def batch(step, size=6):
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(size, 4, generator=generator), torch.randint(0, 3, (size,), generator=generator)


def train(out, steps, resume=False, where=None, **kwargs):
    torch.manual_seed(0)
    model = Tiny()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    carried = {"total": torch.zeros(())}  # A state the stage carries from step to step.

    def loss_fn(model, step):
        x, y = batch(step)
        loss = F.cross_entropy(model(x), y)
        carried["total"] = carried["total"] + loss.detach()
        return loss, {"accuracy": float((model(x).argmax(-1) == y).float().mean())}

    def evaluate(model):
        x, y = batch(-1, 20)
        return {"val_loss": float(F.cross_entropy(model(x), y))}

    kwargs.setdefault("evaluate", evaluate)
    result = train_steps(model, optimizer, loss_fn, **(where or place(out, resume)), steps=steps,
                         scheduler=scheduler, clip=1.0, eval_every=2,
                         checkpoint_every=2, extra_state=carried, **kwargs)
    return model, result


def test_two_steps_and_two_resumed_steps_equal_four_straight_steps(tmp_path):
    straight, one = train(tmp_path / "straight", 4)
    train(tmp_path / "split", 2)
    assert load_checkpoint(tmp_path / "split" / "checkpoint.pt")["step"] == 2
    resumed, two = train(tmp_path / "split", 4, resume=True)
    assert two.step == one.step == 4
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    # The carried state, the history and the training figures continue too.
    assert torch.equal(one.extra_state["total"], two.extra_state["total"])
    strip = lambda history: [{k: v for k, v in e.items() if k != "minutes"} for e in history]  # noqa: E731
    assert strip(one.history) == strip(two.history)
    assert [e["step"] for e in one.history] == [2, 4]
    assert set(one.history[0]) == {"step", "train_loss", "train_accuracy", "val_loss", "minutes"}
    checkpoint = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    assert checkpoint["scheduler"]["last_epoch"] == 4


def test_a_resume_with_a_new_budget_steps_at_the_new_schedules_rate_at_once(tmp_path):
    """A cosine schedule over ``steps`` (the character LM's and the captioner's):
    resumed with more steps, the first resumed step already follows the new one."""
    from graphseq.stages.charlm import cosine_rate

    def rates(steps, resume=False, stop=None):
        torch.manual_seed(0)
        model = nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_rate(s, steps, 0.1))
        seen = []

        def loss_fn(model, step):
            seen.append((step, optimizer.param_groups[0]["lr"]))
            return model(batch(step)[0][:, :3]).pow(2).mean()

        train_steps(model, optimizer, loss_fn, **place(tmp_path, resume), steps=stop or steps,
                    scheduler=scheduler, checkpoint_every=1)
        return seen

    rates(10, stop=5)
    resumed = rates(20, resume=True)
    assert [step for step, _ in resumed] == list(range(5, 20))
    assert all(rate == pytest.approx(cosine_rate(step, 20, 0.1)) for step, rate in resumed)


def test_cpu_time_counts_the_training_steps_and_survives_a_resume(tmp_path):
    def busy_evaluate(model):  # an evaluation that burns 0.3 CPU seconds
        started = time.process_time()
        while time.process_time() - started < 0.3:
            pass
        return {"val_loss": 0.0}

    _, first = train(tmp_path, 2, evaluate=busy_evaluate)
    checkpoint = load_checkpoint(tmp_path / "checkpoint.pt")
    assert 0 < first.cpu_seconds == checkpoint["cpu_seconds"] < 0.3  # the evaluation is left out
    checkpoint["cpu_seconds"] = 1000.0  # as if the first part had run long
    save_checkpoint(checkpoint, tmp_path / "checkpoint.pt")
    _, resumed = train(tmp_path, 4, resume=True)
    assert 1000.0 < resumed.cpu_seconds < 1000.3


def test_resuming_a_finished_run_takes_no_step(tmp_path):
    first, _ = train(tmp_path, 2)
    again, result = train(tmp_path, 2, resume=True)
    assert result.step == 2 and len(result.history) == 1
    for a, b in zip(first.parameters(), again.parameters()):
        assert torch.equal(a, b)



def test_a_run_resumed_at_a_checkpoint_between_evaluations_is_evaluated(tmp_path):
    train(tmp_path, 3)  # evaluated at step 2 and at the end, step 3
    checkpoint = load_checkpoint(tmp_path / "checkpoint.pt")
    checkpoint["step"], checkpoint["history"] = 1, []  # as if stopped after step 1
    torch.save(checkpoint, tmp_path / "checkpoint.pt")
    _, result = train(tmp_path, 1, resume=True)  # the budget lowered to the checkpoint's step
    assert result.step == 1 and [e["step"] for e in result.history] == [1]
    assert "val_loss" in result.history[0]

def test_the_best_weights_by_validation_are_restored(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scores = iter([0.2, 0.9, 0.5, 0.7])
    seen = {}

    def loss_fn(model, step):
        return model(torch.ones(1, 3)).sum()

    def evaluate(model):
        score = next(scores)
        seen[score] = {k: v.clone() for k, v in model.state_dict().items()}
        return {"val_accuracy": score}

    result = train_steps(model, optimizer, loss_fn, **place(tmp_path), steps=4, evaluate=evaluate,
                         eval_every=1, select=("val_accuracy", "max"))
    assert result.best["val_accuracy"] == 0.9 and result.best["step"] == 2
    for key, value in model.state_dict().items():
        assert torch.equal(value, seen[0.9][key]), key
    # The checkpoint keeps the last weights, to resume from, and the best ones.
    checkpoint = load_checkpoint(tmp_path / "checkpoint.pt")
    assert torch.equal(checkpoint["model"]["weight"], seen[0.7]["weight"])
    assert torch.equal(checkpoint["best_model"]["weight"], seen[0.9]["weight"])
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_select_by_the_smallest_figure(tmp_path):
    model = nn.Linear(3, 2)
    losses = iter([0.5, 0.3, 0.4])
    result = train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1),
                         lambda m, s: m(torch.ones(1, 3)).sum(), **place(tmp_path), steps=3, eval_every=1,
                         evaluate=lambda m: {"val_loss": next(losses)}, select=("val_loss", "min"))
    assert result.best["step"] == 2


def test_a_crash_while_saving_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    train(tmp_path, 2)
    before = load_checkpoint(tmp_path / "checkpoint.pt")

    def torn_save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        train(tmp_path, 4, resume=True)
    after = load_checkpoint(tmp_path / "checkpoint.pt")
    assert after["step"] == before["step"] == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_resume_refuses_a_missing_or_damaged_checkpoint(tmp_path):
    with pytest.raises(GraphseqError, match="no checkpoint.pt"):
        train(tmp_path, 2, resume=True)
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(GraphseqError) as refusal:
        train(tmp_path, 2, resume=True)
    message = str(refusal.value)  # the file named once, in one line
    assert message.startswith(f"--resume: {tmp_path / 'checkpoint.pt'} is damaged or not a graphseq checkpoint (")
    assert message.count("checkpoint.pt") == 1 and "\n" not in message


def test_a_folder_where_the_checkpoint_goes_is_refused_before_the_first_step(tmp_path, monkeypatch):
    """os.replace cannot put the checkpoint over a folder: found at the first
    save, the training before it would be lost."""
    (tmp_path / "checkpoint.pt").mkdir()
    monkeypatch.setattr(torch.optim.Adam, "step", lambda *a, **k: pytest.fail("a step was taken"))
    for resume, prefix in ((False, ""), (True, "--resume: ")):
        with pytest.raises(GraphseqError) as refusal:
            train(tmp_path, 2, resume=resume)
        assert str(refusal.value) == f"{prefix}{tmp_path / 'checkpoint.pt'} is a folder, not a file; move it away"
    with pytest.raises(GraphseqError, match="checkpoint.pt is a folder, not a file; move it away"):
        save_checkpoint({"step": 1}, tmp_path / "checkpoint.pt")
    assert list(tmp_path.iterdir()) == [tmp_path / "checkpoint.pt"]  # no temporary file left
    assert not any((tmp_path / "checkpoint.pt").iterdir())
    with pytest.raises(GraphseqError, match="checkpoint.pt is a folder, not a checkpoint file"):
        load_checkpoint(tmp_path / "checkpoint.pt")


def test_ctrl_c_inside_torch_save_stays_an_interrupt_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    """Ctrl-C while torch writes a record makes torch's own clean-up fail
    ("unexpected pos"): that RuntimeError hid the interrupt, so an
    interrupted run ended in a traceback instead of its one line."""
    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"step": 1}, path)
    before = path.read_bytes()
    real_save = torch.save

    class Interrupted(io.RawIOBase):  # the file torch writes into, until Ctrl-C arrives
        def __init__(self, file):
            self.file, self.writes = file, 0

        def writable(self):
            return True

        def write(self, data):
            self.writes += 1
            if self.writes == 3:
                raise KeyboardInterrupt
            return self.file.write(data)

    monkeypatch.setattr(torch, "save", lambda obj, f: real_save(obj, Interrupted(f)))
    with pytest.raises(KeyboardInterrupt) as stop:
        save_checkpoint({"step": 2, "weight": torch.ones(64, 64)}, path)
    assert "RuntimeError" not in "".join(traceback.format_exception(stop.value))  # what the user would see
    assert path.read_bytes() == before  # the last checkpoint still resumes
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left
    monkeypatch.setattr(torch, "save", lambda obj, f: (_ for _ in ()).throw(RuntimeError("disk")))
    with pytest.raises(RuntimeError, match="disk"):  # other failures go on as they were
        save_checkpoint({"step": 2}, path)


def test_a_truncated_checkpoint_is_named_with_the_first_sentence_of_the_reason(tmp_path):
    path = tmp_path / "model.pt"
    save_checkpoint({"weight": torch.ones(64, 64)}, path)
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(GraphseqError) as refusal:
        load_checkpoint(path)
    message = str(refusal.value)
    assert message.startswith(f"{path} is damaged or not a graphseq checkpoint (")
    assert message.endswith("); it was left as it is")
    assert "If you" not in message  # torch's advice after its first sentence is left out
    assert first_sentence(RuntimeError("one two three. Four")) == "one two three"
    long = first_sentence(RuntimeError("word " * 40), limit=22)
    assert long == "word word word word ..."  # cut at a word, never inside one
    listing = RuntimeError("Error(s) in loading state_dict for Bert:\n\tsize mismatch for w: 2 vs 3.\n\tmore")
    assert first_sentence(listing) == "Error(s) in loading state_dict for Bert: size mismatch for w: 2 vs 3."


def test_bytes_torch_never_wrote_are_named_as_such(tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_text("hello\n")
    with pytest.raises(GraphseqError, match=r"checkpoint.pt is damaged or not a graphseq checkpoint "
                                            r"\(not a file torch saved\); it was left as it is$"):
        load_checkpoint(path)


def test_resume_refuses_a_checkpoint_of_another_model(tmp_path):
    train(tmp_path, 2, meta={"model_config": {"hidden": 8}})
    with pytest.raises(GraphseqError, match="model_config"):
        train(tmp_path, 4, resume=True, meta={"model_config": {"hidden": 16}})


def test_resume_names_the_settings_of_the_model_that_differ(tmp_path):
    # Both settings were cut at 80 characters, so the two halves of the message read the same.
    long = {f"setting_{i}": i for i in range(12)}
    train(tmp_path, 2, meta={"model_config": {**long, "dropout": 0.1}})
    with pytest.raises(GraphseqError, match=r"written with model_config\['dropout'\] = 0\.1, but this run has 0\.3, "
                                            r"model_config\['layers'\] = \(none\), but this run has 2; the run's "
                                            r"config\.toml holds"):
        train(tmp_path, 4, resume=True, meta={"model_config": {**long, "dropout": 0.3, "layers": 2}})


def test_a_budget_is_required(tmp_path):
    with pytest.raises(GraphseqError, match="budget"):
        train(tmp_path, 0)


@pytest.mark.parametrize("budget,message", [
    ({"minutes": math.nan}, "minutes must be a finite number >= 0, got nan"),  # it trained for ever
    ({"minutes": -1.0}, "minutes must be a finite number >= 0, got -1.0"),
    ({"clip": math.nan}, "clip must be a finite number >= 0, got nan"),  # clipping was silently off
    ({"steps": 2.5}, "steps must be a whole number >= 0, got 2.5"),  # it ran 3 steps
    ({"steps": -1}, "steps must be a whole number >= 0, got -1"),
])
def test_budgets_and_clipping_that_are_no_numbers_are_refused(tmp_path, budget, message):
    model = nn.Linear(3, 2)
    arguments = {"steps": 0, "minutes": 1e-6, **budget}
    with pytest.raises(GraphseqError, match=f"^train: {message}$"):
        train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    lambda m, s: m(torch.ones(1, 3)).sum(), **place(tmp_path), **arguments)
    assert not list(tmp_path.iterdir())


def test_resume_refuses_a_checkpoint_of_another_loop_or_model_in_one_line(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"a": torch.ones(1)}, path)  # a graphseq file, not of this loop: KeyError 'world_size'
    with pytest.raises(GraphseqError, match=r"^--resume: .*checkpoint\.pt is not a checkpoint of this training "
                                            r"loop \(it lacks model, optimizer, "):
        train(tmp_path, 2, resume=True)
    train(tmp_path, 2)
    with pytest.raises(GraphseqError, match=r"^--resume: .*checkpoint\.pt does not fit this model \(Error\(s\) "
                                            r"in loading state_dict for Linear"):
        model = nn.Linear(4, 3)
        train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    lambda m, s: m(torch.ones(1, 4)).sum(), **place(tmp_path, resume=True), steps=4)


def test_minutes_alone_bound_the_run(tmp_path):
    model = nn.Linear(3, 2)
    result = train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1),
                         lambda m, s: m(torch.ones(1, 3)).sum(), **place(tmp_path), steps=0, minutes=1e-6)
    assert result.step >= 1 and math.isfinite(result.history[-1]["train_loss"])


def test_select_of_a_figure_evaluate_does_not_give_names_the_figures(tmp_path):
    model = nn.Linear(3, 2)
    with pytest.raises(GraphseqError, match="val_accuracy.*val_loss"):
        train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    lambda m, s: m(torch.ones(1, 3)).sum(), **place(tmp_path), steps=2, eval_every=1,
                    evaluate=lambda m: {"val_loss": 1.0}, select=("val_accuracy", "max"))


def test_a_run_on_another_device_resumes_with_the_random_states_read_on_the_cpu(tmp_path):
    # No GPU here: the meta device stands in for CUDA. Loaded onto the run's
    # device, the NumPy generator's keys could not be turned back into NumPy.
    from graphseq import training

    train(tmp_path, 2)
    model = Tiny()
    progress = training._Progress()
    training._restore(tmp_path / "checkpoint.pt", torch.device("meta"), logging.getLogger("test-training"), model,
                      torch.optim.Adam(model.parameters()), None,
                      torch.amp.GradScaler("cuda", enabled=False), progress, {}, {})
    assert progress.step == 2


def test_a_run_saved_without_mixed_precision_resumes_with_it(tmp_path, monkeypatch):
    # Started on a CPU (its gradient scaler off and saved empty), resumed on
    # CUDA with amp (the scaler on): an enabled CPU scaler stands in for CUDA's.
    straight, _ = train(tmp_path / "straight", 4)
    train(tmp_path / "split", 2, amp=True)
    real = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device, enabled: real("cpu", enabled=True))
    resumed, result = train(tmp_path / "split", 4, resume=True, amp=True)
    assert result.step == 4
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(straight.parameters(), resumed.parameters()))


def test_random_states_are_restored_for_the_gpus_this_process_sees(monkeypatch):
    # Saved by a process that saw two GPUs, restored by one that sees one.
    from graphseq import training

    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, index: restored.append(index))
    state = training.rng_state()
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8), torch.ones(16, dtype=torch.uint8)]
    training.set_rng_state(state)
    assert restored == [0]


def _drawn_history(monkeypatch, tmp_path, history):
    """The panels plot_history drew (caught where the figure is written)."""
    import graphseq.training as training

    caught = {}
    monkeypatch.setattr(training, "write_png", lambda figure, path: caught.update(figure=figure))
    training.plot_history(history, tmp_path / "curves.png", "t")
    return caught["figure"].axes


@pytest.mark.parametrize("losses, broken", [([2.0, math.inf, math.nan], 2), ([math.nan], 1),
                                            ([2.0, 1.5, math.nan], 3)])
def test_a_loss_that_stops_being_finite_is_marked_where_it_stopped(tmp_path, monkeypatch, losses, broken):
    history = [{"step": i + 1, "train_loss": loss, "minutes": 0} for i, loss in enumerate(losses)]
    (axes,) = _drawn_history(monkeypatch, tmp_path, history)
    low, high = axes.get_xlim()
    assert low < 1 and high > len(losses)  # the whole history, not the finite points alone
    assert f"loss not finite from step {broken}" in [t.get_text().strip() for t in axes.texts]
    assert [list(line.get_xdata()) for line in axes.get_lines() if line.get_linestyle() == ":"] == [[broken] * 2]


def test_a_finite_history_is_not_marked_and_its_steps_are_ticked_in_whole_numbers(tmp_path, monkeypatch):
    history = [{"step": 1, "train_loss": 2.0, "val_acc": 0.5}, {"step": 2, "train_loss": 1.0, "val_acc": 0.6}]
    for axes in _drawn_history(monkeypatch, tmp_path, history):
        assert not axes.texts
        ticks = [t for t in axes.get_xticks() if axes.get_xlim()[0] <= t <= axes.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks)


@pytest.mark.parametrize("desc, title", [("test random_trained", "test random_trained: 2 steps"),
                                         ("train", "test train: 2 steps"), ("test", "test: 2 steps"),
                                         ("tested", "test tested: 2 steps")])
def test_the_curves_title_names_the_pipeline_once(tmp_path, monkeypatch, desc, title):
    """fewshot's labels start with the pipeline's name already (the pipeline is "test" here)."""
    import graphseq.training as training

    titles = []
    monkeypatch.setattr(training, "plot_history", lambda history, path, title, final=None: titles.append(title))
    train(tmp_path, 2, desc=desc)
    assert titles == [title]


def test_paragraph_vector_passes_are_ticked_in_whole_numbers(tmp_path, monkeypatch):
    """(The same whole-number step axis in the paragraph-vector stage's loss curves.)"""
    import graphseq.stages.paragraph_vectors as stage

    caught = {}
    monkeypatch.setattr(stage, "write_png", lambda figure, path: caught.update(figure=figure))
    stage._plot_losses({"dm": [{"fold": 0, "losses": [3.0, 2.0]}]}, tmp_path / "curves.png", "t")
    (axes,) = caught["figure"].axes
    ticks = [t for t in axes.get_xticks() if axes.get_xlim()[0] <= t <= axes.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def _train_watched(tmp_path, stderr, **kwargs):
    """Trains 4 steps, not quiet, with a run's log whose console is ``stderr``; what ``stderr`` shows."""
    log = logging.Logger("test-training-console")  # the run's log: a line on stderr per evaluation
    log.addHandler(logging.StreamHandler(stderr))
    train(tmp_path, 4, where=place(tmp_path, quiet=False, log=log), curves=None, **kwargs)
    return stderr.getvalue()


def _evaluations(shown):
    return [line for line in shown.replace("\r", "\n").splitlines() if line.startswith("train step ")]


@pytest.mark.parametrize("watched", ["terminal", "notebook"])
def test_the_bar_is_drawn_where_a_person_watches_with_the_log_lines_above_it(tmp_path, monkeypatch, request,
                                                                            watched):
    stderr = Terminal() if watched == "terminal" else request.getfixturevalue("notebook")
    monkeypatch.setattr(sys, "stderr", stderr)
    shown = _train_watched(tmp_path, stderr)
    assert "\r" in shown and "4/4" in shown
    assert [line.split(":")[0] for line in _evaluations(shown)] == ["train step 2", "train step 4"]


def test_no_bar_is_drawn_into_a_redirected_stderr_but_every_log_line_is(tmp_path, monkeypatch):
    # `graphseq run gat-cora 2> run.log`: each of the bar's \r redraws would stay in the file.
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    shown = _train_watched(tmp_path, stderr)
    assert "\r" not in shown and "step/s" not in shown
    lines = shown.splitlines()
    assert [line.split(":")[0] for line in lines] == ["train step 2", "train step 4"]
    assert lines == _evaluations(shown) and "train_loss" in lines[0]


def test_only_rank_0_draws_the_bar(tmp_path, monkeypatch):
    import graphseq.training as training

    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(training.distributed, "is_main", lambda: False)
    shown = _train_watched(tmp_path, stderr)
    assert "\r" not in shown


def test_reading_the_training_metrics_less_often_records_the_same_history(tmp_path):
    # The metrics are summed where they are computed and read every log_every steps (a read waits for a GPU).
    _, every_step = train(tmp_path / "one", 6, log_every=1)
    _, every_fourth = train(tmp_path / "four", 6, log_every=4)  # evaluated every 2 steps
    assert [entry["step"] for entry in every_fourth.history] == [2, 4, 6]
    for a, b in zip(every_step.history, every_fourth.history):
        assert a.keys() == b.keys()
        for key in ("train_loss", "train_accuracy", "val_loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-12), key


def test_log_every_must_be_a_positive_whole_number(tmp_path):
    with pytest.raises(GraphseqError, match=r"^train: log_every must be a whole number >= 1, got 0$"):
        train(tmp_path, 2, log_every=0)


def _log_lines(tmp_path, steps, **kwargs):
    """The log lines of a run of ``steps`` steps."""
    stream = io.StringIO()
    log = logging.Logger("test-training-estimate")
    log.addHandler(logging.StreamHandler(stream))
    train(tmp_path, steps, where=place(tmp_path, log=log), curves=None, **kwargs)
    return stream.getvalue().splitlines()


def test_the_first_steps_give_an_estimate_of_the_rest(tmp_path):
    estimates = [line for line in _log_lines(tmp_path, 14) if " a step here; " in line]
    assert len(estimates) == 1
    assert re.fullmatch(r"train: \d+\.\d\d s a step here; the 4 steps left take about \d+ seconds", estimates[0])


def test_a_run_estimated_longer_than_a_laptop_session_is_called_a_long_schedule(tmp_path, monkeypatch):
    monkeypatch.setattr(graphseq.training, "LONG_MINUTES", 0.0)
    estimate = next(line for line in _log_lines(tmp_path, 14) if " a step here; " in line)
    assert estimate.endswith(": a long schedule (fewer steps: --set SECTION.steps=N)")


def test_a_run_too_short_to_pace_logs_no_estimate(tmp_path):
    assert not [line for line in _log_lines(tmp_path, 10) if " a step here; " in line]
