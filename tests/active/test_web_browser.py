"""The labelling page in a real browser: Playwright drives Debian's
Chromium through a person's `graphseq run ... --oracle web` processes on
the real Cora (answer, a reply that is no class, undo, skip, the model's
guess, quit; then a resumed run killed with SIGKILL after an answer, and
another resume), and the store holds exactly the answers the page accepted.
The few-shot page shows its episode as images. Skipped where Playwright or
Chromium is missing (`pip install playwright`, `apt-get install chromium`;
Playwright's own browser download is not needed)."""
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

from graphseq.active.store import STORE_NAME, LabelStore

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")]

# A tiny Cora run: 2 random questions, then 2 a round, 8 labels in all.
TINY = ["--set", "learner.epochs=5", "--set", "active.initial=2", "--set", "active.batch_size=2",
        "--set", "active.budget=8", "--set", "active.reference=false"]
WAIT_MS = 300_000  # a guard against hanging, not a timed assertion: a slow machine waits longer


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


def start(*args):
    return subprocess.Popen([sys.executable, "-m", "graphseq.cli", "run", *args, "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def address(process):
    """The page's address, from the line the run writes on standard error."""
    said = ""
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        if select.select([process.stderr], [], [], 1.0)[0]:
            line = process.stderr.readline()
            assert line, f"the run ended before its first question:\n{said}{process.stdout.read()}"
            said += line
            found = re.search(r"label in your browser: (http://127\.0\.0\.1:\d+/\?token=[\w-]+)$", line.strip())
            if found:
                return found.group(1)
    raise AssertionError(f"no address within {WAIT_MS / 1000} s:\n{said}")


def question(page, number):
    """Waits for the page to show its ``number``-th question; returns its item."""
    page.wait_for_selector(f'#question[data-number="{number}"]:not([hidden])', timeout=WAIT_MS)
    return int(page.get_attribute("#question", "data-item"))


def rows(out):
    with LabelStore(out / STORE_NAME, read_only=True) as store:
        return [(a.item, a.label, a.source) for a in store.answers("margin", skips=True)]


def test_answer_undo_skip_quit_kill_and_resume_through_the_page(browser, tmp_path, data_root, mirror):
    out = tmp_path / "run"
    places = ["--out", str(out), "--data-root", str(data_root), "--data-mirror", str(mirror)]
    accepted = []

    # The first run: answer, a reply that is no class, undo, answer again by a click, skip, quit.
    run = start("active-cora", "--oracle", "web", *places, *TINY)
    page = browser.new_page()
    page.goto(address(run))
    first = question(page, 1)
    assert "Planetoid keeps no title or words of a paper" in page.inner_text("#details")
    page.keyboard.press("0")
    second = question(page, 2)
    assert "stored: Theory" in page.inner_text("#news")
    page.keyboard.press("9")  # Cora has 7 classes: refused, nothing stored, the question stays
    page.wait_for_selector("#problem:has-text('no class number 9')", timeout=WAIT_MS)
    page.keyboard.press("u")
    assert question(page, 3) == first
    assert f"undone: item {first} = Theory" in page.inner_text("#news")
    page.click("#classes button:has-text('Neural_Networks')")
    accepted.append((first, "Neural_Networks", "web"))
    assert question(page, 4) == second
    page.keyboard.press("s")
    accepted.append((second, None, "web"))
    third = question(page, 5)  # chosen by the model trained on the first answer
    assert not page.is_visible("#details .guess")
    page.keyboard.press("g")  # the model's guess on request
    assert re.search(r"model: \w+ 0\.\d\d", page.inner_text("#details .guess"))
    assert rows(out) == accepted  # every answer stored while the question after it is shown
    page.keyboard.press("q")
    page.wait_for_selector("#status:has-text('The run has ended')", timeout=WAIT_MS)
    assert "continue with: graphseq run active-cora --resume" in page.inner_text("#news")
    assert run.wait(timeout=WAIT_MS / 1000) == 0
    page.close()
    assert rows(out) == accepted
    # The address was said once; log.txt, which others may read, has it without the token.
    assert "label in your browser" not in run.stderr.read()
    log = (out / "log.txt").read_text()
    assert log.count("label in your browser: http://127.0.0.1:") == 1
    assert "?token=" not in log and "its token is printed on the terminal only" in log

    # Resumed: the question q left is asked first; answered, then the run is killed.
    run = start("active-cora", "--resume", *places)
    page = browser.new_page()
    page.goto(address(run))
    assert question(page, 1) == third
    page.keyboard.press("1")
    accepted.append((third, "Reinforcement_Learning", "web"))
    fourth = question(page, 2)
    run.send_signal(signal.SIGKILL)
    assert run.wait(timeout=60) == -signal.SIGKILL
    page.wait_for_selector("#status:has-text('no longer answers this page')", timeout=WAIT_MS)
    page.close()
    assert rows(out) == accepted

    # Resumed again: only what is unanswered is asked.
    run = start("active-cora", "--resume", *places)
    page = browser.new_page()
    page.goto(address(run))
    assert question(page, 1) == fourth
    page.keyboard.press("q")
    assert run.wait(timeout=WAIT_MS / 1000) == 0
    page.close()
    assert rows(out) == accepted


def tiny_fewshot():
    """``--set`` flags for a few-shot run of seconds: two steps of each training, 3 questions."""
    trainings = {"train": "test", "train_random_trained": "test_random_trained"}
    settings = {**{f"{train}.{key}": value for train in trainings for key, value in
                   (("steps", 2), ("batch_size", 2), ("eval_every", 2), ("eval_episodes", 4),
                    ("eval_batch_size", 4), ("checkpoint_every", 1))},
                **{f"{test}.{key}": 6 for test in trainings.values() for key in ("episodes", "batch_size")},
                "data.train_characters": 5, "data.val_characters": 2}
    start = [f"{key}={value}" for key, value in settings.items() if key.split(".")[0] in ("train", "test", "data")]
    return [f"--set={key}={value}" for key, value in settings.items()] + [
        "--set=oracle.episodes=3", f"--set=start.overrides={start!r}"]


def test_the_few_shot_page_shows_the_episode_as_images(browser, tmp_path, write_fake_omniglot):
    write_fake_omniglot(tmp_path / "mirror", alphabets=(("Alpha", 3), ("Beta", 2)), evaluation=(("Gamma", 2),))
    out = tmp_path / "run"
    run = start("fewshot-omniglot-active", "--oracle", "web", "--out", str(out), "--data-root",
                str(tmp_path / "data"), "--data-mirror", str(tmp_path / "mirror"), *tiny_fewshot())
    page = browser.new_page()
    page.goto(address(run))
    assert question(page, 1) == 0
    headings = page.locator("#pictures h2").all_inner_texts()
    assert headings[0] == "The labelled images of each class"
    captions = page.locator("#pictures figcaption").all_inner_texts()
    assert captions == [f"class {way}" for way in range(5)] + ["which class is this?", "the query"]
    sizes = page.eval_on_selector_all("#pictures img", "images => images.map(i => [i.naturalWidth, i.width])")
    assert sizes == [[28, 112]] * 7  # decoded PNGs of the 28-pixel images, shown four times as large
    assert "▀" not in page.inner_text("body")  # no terminal drawing
    page.keyboard.press("g")
    assert "The model's answer for the query without your label" in page.inner_text("#details .guess")
    page.keyboard.press("2")
    assert question(page, 2) == 1
    page.keyboard.press("q")
    assert run.wait(timeout=WAIT_MS / 1000) == 0
    with LabelStore(out / STORE_NAME, read_only=True) as store:
        assert [(a.item, a.label, a.source) for a in store.answers("learned", skips=True)] == [(0, "2", "web")]
