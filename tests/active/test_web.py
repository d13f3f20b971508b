"""The web oracle without a browser: requests without the token are
refused, replies map to classes and commands by the terminal's rules, a
reply answers only the question it names, and in the loop every answer is
in the store before the page gets the next question. (The page in a real
browser: test_web_browser.py.)"""
import base64
import io
import json
import socket
import threading
import urllib.error
import urllib.request

import pytest
import torch
from PIL import Image

from graphseq.active.loop import Task, active_learning
from graphseq.active.oracles import QUIT, SKIP, UNDO, Guess, PictureRow, Question
from graphseq.active.store import STORE_NAME, LabelStore
from graphseq.active.web import HOST, WebOracle, check_can_serve, page_question
from graphseq.errors import GraphseqError

CLASSES = ["Theory", "Rule_Learning", "Case_Based"]


class Page:
    """What the page does, through urllib: read the state, send a reply."""

    def __init__(self, url):
        self.base, self.token = url.split("/?token=")

    def request(self, path, body=None, token=None):
        token = self.token if token is None else token
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base}/{path}{'&' if '?' in path else '?'}token={token}", data,
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def state(self, after=-1):
        status, body = self.request(f"state?after={after}")
        assert status == 200
        return json.loads(body)

    def question(self, after=-1):
        """The next question asked (or None once the run has ended), with the state's version."""
        while True:
            state = self.state(after)
            if state["question"] is not None or state["ended"]:
                return state["question"], state
            after = state["version"]

    def answer(self, number, reply):
        status, body = self.request("answer", {"question": number, "reply": reply})
        return status, json.loads(body)["problem"]


@pytest.fixture
def oracle():
    said = []
    with WebOracle(said.append, linger=0) as made:  # no page polls to the end here
        made.said = said
        yield made


def question(item=5, **fields):
    return Question(item, CLASSES, ["  node 5", Guess("  model: Theory 0.50")], "entropy: 1 of 6 labels", **fields)


def asking(oracle, question):
    """Asks in a thread, as the loop would; returns the thread and where its reply lands."""
    replies = []
    thread = threading.Thread(target=lambda: replies.append(oracle.ask(question)), daemon=True)
    thread.start()
    return thread, replies


def test_the_page_is_on_loopback_and_its_address_is_said_once_at_the_first_question(oracle):
    assert oracle.said == []  # nothing said before a question is ready
    for expected in (1, 2):
        thread, replies = asking(oracle, question())
        page = Page(oracle.url)
        asked, _ = page.question()
        assert page.answer(asked["number"], "0") == (200, "")
        thread.join(10)
        assert replies == [0]
    assert oracle.said == [f"label in your browser: {oracle.url}"]
    assert oracle.url.startswith(f"http://{HOST}:") and oracle._server.server_address[0] == "127.0.0.1"


@pytest.mark.parametrize("token", ["", "wrong", "x" * 32])
def test_every_request_without_the_token_is_refused(oracle, token):
    thread, replies = asking(oracle, question())
    page = Page(oracle.url)
    asked, _ = page.question()
    for path, body in [("", None), ("state?after=-1", None), ("answer", {"question": asked["number"], "reply": "0"}),
                       ("elsewhere", None)]:
        status, text = page.request(path, body, token=token)
        assert (status, text) == (403, b"this page needs the address with its token that graphseq printed")
    assert page.request("answer", {"question": asked["number"], "reply": "0"}, token=oracle.token.upper())[0] == 403
    # Without the token nothing was answered: the question is still asked.
    assert page.state()["question"]["number"] == asked["number"] and replies == []
    page.answer(asked["number"], "q")
    thread.join(10)


@pytest.mark.parametrize("typed, reply", [("0", 0), ("2", 2), ("rule", 1), ("Case_Based", 2), ("case based", 2),
                                          ("s", SKIP), ("u", UNDO), ("q", QUIT)])
def test_a_reply_is_read_by_the_terminals_rules(oracle, typed, reply):
    thread, replies = asking(oracle, question())
    page = Page(oracle.url)
    asked, _ = page.question()
    assert page.answer(asked["number"], typed) == (200, "")
    thread.join(10)
    assert replies == [reply]


@pytest.mark.parametrize("typed, problem", [("-1", "'-1' is no class"), ("_2", "'_2' is no class"),
                                            ("3", "no class number 3"), ("", "type a class name or number"),
                                            ("?", "the keys are listed under the question")])
def test_a_reply_that_is_no_class_answers_nothing(oracle, typed, problem):
    thread, replies = asking(oracle, question())
    page = Page(oracle.url)
    asked, _ = page.question()
    status, said = page.answer(asked["number"], typed)
    assert status == 400 and problem in said
    assert page.state()["question"]["number"] == asked["number"] and replies == []
    assert page.answer(asked["number"], "1") == (200, "")
    thread.join(10)
    assert replies == [1]


def test_a_reply_answers_only_the_question_it_names(oracle):
    thread, replies = asking(oracle, question())
    page = Page(oracle.url)
    asked, _ = page.question()
    assert page.answer(asked["number"] + 1, "0")[0] == 409  # not asked yet
    assert page.answer(asked["number"], "0") == (200, "")
    thread.join(10)
    # Sent twice (a double press, a second tab): the second finds no question, not the next one.
    status, said = page.answer(asked["number"], "1")
    assert status == 409 and "no longer asked" in said
    thread, replies_now = asking(oracle, question(6))
    following, _ = page.question()
    assert following["number"] == asked["number"] + 1 and following["item"] == 6
    assert page.answer(asked["number"], "1")[0] == 409
    page.answer(following["number"], "2")
    thread.join(10)
    assert replies + replies_now == [0, 2]


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"question": "1", "reply": "0"}',
                                  b'{"question": 1, "reply": 0}', b"\xff\xfe"])
def test_a_malformed_request_answers_nothing(oracle, body):
    thread, replies = asking(oracle, question())
    page = Page(oracle.url)
    page.question()
    request = urllib.request.Request(f"{page.base}/answer?token={page.token}", body)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert replies == []
    page.answer(1, "q")
    thread.join(10)


@pytest.mark.parametrize("after", ["", "x", "%C2%B2", "1e3"])  # %C2%B2: a superscript two
def test_a_state_request_with_a_strange_version_gets_the_view_at_once(oracle, after):
    status, body = Page(oracle.url).request(f"state?after={after}")
    assert status == 200 and json.loads(body)["question"] is None


def test_after_quit_every_question_is_quit_without_asking(oracle):
    thread, _ = asking(oracle, question())
    page = Page(oracle.url)
    page.answer(page.question()[0]["number"], "q")
    thread.join(10)
    assert oracle.ask(question()) is QUIT
    assert page.state()["question"] is None


def test_the_page_shows_pictures_as_pngs_and_of_the_details_only_the_guess():
    images = [torch.zeros(1, 28, 28, dtype=torch.uint8), torch.full((28, 28), 255, dtype=torch.uint8)]
    shown = page_question(question(pictures=[PictureRow("The labelled images", images, ["class 0", "class 1"])]),
                          3)
    assert shown["details"] == [{"text": "model: Theory 0.50", "guess": True}]
    row = shown["pictures"][0]
    assert row["heading"] == "The labelled images" and [i["caption"] for i in row["images"]] == ["class 0", "class 1"]
    for image, pixel in zip(row["images"], (0, 255)):
        kind, data = image["src"].split(",", 1)
        assert kind == "data:image/png;base64"
        png = Image.open(io.BytesIO(base64.b64decode(data)))
        assert png.size == (28, 28) and png.getpixel((3, 3)) == pixel
    # Without pictures every line of details is shown, the guess marked.
    assert [(d["text"], d["guess"]) for d in page_question(question(), 1)["details"]] == \
        [("node 5", False), ("model: Theory 0.50", True)]


def test_close_lets_an_open_page_hear_that_the_run_ended_then_stops_serving():
    oracle = WebOracle(lambda line: None, linger=30)  # a guard: close waits for the page, not the time
    thread, _ = asking(oracle, question())
    page = Page(oracle.url)
    page.answer(page.question()[0]["number"], "q")
    thread.join(10)
    oracle.tell("  stopped; continue with:\n  graphseq run x --resume")
    last = []
    polling = threading.Thread(target=lambda: last.append(page.question()[1]))  # as the page polls
    polling.start()
    oracle.close()
    polling.join(10)
    assert last[0]["ended"] and last[0]["news"][-1] == "stopped; continue with:\ngraphseq run x --resume"
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(oracle.url, timeout=5)


def no_address(self, address):
    raise OSError(99, "Cannot assign requested address")


def test_no_loopback_address_is_refused_before_anything_runs(monkeypatch):
    monkeypatch.setattr(socket.socket, "bind", no_address)
    with pytest.raises(GraphseqError, match=r"--oracle web\) serves its page on 127\.0\.0\.1, but cannot bind to it "
                                            r"here \(Cannot assign requested address\); answer at the terminal"):
        check_can_serve()


@pytest.mark.parametrize("pipeline", ["active-cora", "fewshot-omniglot-active"])
@pytest.mark.parametrize("trouble, said", [
    ("bind", "the web oracle (--oracle web) serves its page on 127.0.0.1, but cannot bind to it here"),
    ("stderr", "the web oracle (--oracle web) prints its page's address on standard error, which is closed"),
])
def test_a_web_run_that_could_not_ask_is_refused_before_its_folder_is_written(pipeline, trouble, said, tmp_path,
                                                                               monkeypatch):
    import graphseq

    if trouble == "bind":
        monkeypatch.setattr(socket.socket, "bind", no_address)
    else:
        monkeypatch.setattr("sys.stderr", None)  # what Python makes of `2>&-`
    with pytest.raises(GraphseqError) as refused:
        graphseq.run(pipeline, out=tmp_path / "run", oracle="web", quiet=True, data_root=tmp_path / "data")
    assert said in str(refused.value)
    assert not (tmp_path / "run").exists()


def test_the_browser_page_refuses_several_processes():
    from graphseq.runner.launch import check_processes

    with pytest.raises(GraphseqError, match="--oracle web asks you on one page in the browser, which one process "
                                            "alone can do"):
        check_processes("active-cora", {}, {"oracle": "web"}, 2)


# --------------------------------------------------------------------------- #
# In the loop: stored before the next question, undo, quit, resume
# --------------------------------------------------------------------------- #

class FractionLearner:
    """Certainty (i % 4) / 4 for node i, so entropy asks 3, 7, then 2, 6, then 1, 5."""

    def fit(self, items, labels):
        self.items = items

    def predict(self):
        certainty = torch.tensor([1.0 - (i % 4) / 4 for i in range(8)])
        probabilities = torch.stack([certainty, (1 - certainty) / 2, (1 - certainty) / 2], dim=1)
        return probabilities, probabilities

    def accuracy(self):
        return len(self.items) / 8


def run_loop(store, oracle, resume=False):
    task = Task(CLASSES, torch.arange(8), torch.tensor([[0, 1], [1, 2]]), lambda item, p, labelled: [f"  node {item}"])
    return active_learning(task, FractionLearner(), oracle, store, strategy="entropy", initial={0: 0}, budget=6,
                           batch_size=2, resume=resume)


def person(oracle, replies, path, seen):
    """Answers through the page, and records, as each question arrives, what the store holds then."""
    page = Page(oracle.url)
    after = -1
    for reply in replies:
        asked, state = page.question(after)
        with LabelStore(path, read_only=True) as store:
            seen.append((asked["item"], [(a.item, a.label) for a in store.answers("entropy", skips=True)]))
        assert page.answer(asked["number"], reply) == (200, "")
        after = state["version"]


def test_every_answer_is_stored_before_the_next_question_and_a_resume_asks_the_rest(tmp_path):
    path = tmp_path / STORE_NAME
    seen = []
    with LabelStore(path) as store, WebOracle(lambda line: None, linger=0) as oracle:
        driver = threading.Thread(target=person, args=(oracle, ["t", "2", "u", "rule", "s", "q"], path, seen))
        driver.start()
        outcome = run_loop(store, oracle)
        driver.join(30)
    start = [(0, "Theory")]
    assert seen == [(3, start), (7, start + [(3, "Theory")]),
                    (2, start + [(3, "Theory"), (7, "Case_Based")]),
                    (7, start + [(3, "Theory")]),  # u took back 7, the last answer, and asks it again
                    (2, start + [(3, "Theory"), (7, "Rule_Learning")]),
                    (6, start + [(3, "Theory"), (7, "Rule_Learning"), (2, None)])]
    assert outcome.stopped
    with LabelStore(path) as store, WebOracle(lambda line: None, linger=0) as oracle:
        assert [a.source for a in store.answers("entropy")] == ["initial", "web", "web"]
        seen = []
        driver = threading.Thread(target=person, args=(oracle, ["c", "q"], path, seen))
        driver.start()
        run_loop(store, oracle, resume=True)
        driver.join(30)
        assert [item for item, _ in seen] == [6, 1]  # the rest of the round q cut short, then the next
        assert [(a.item, a.label, a.source) for a in store.answers("entropy", skips=True)] == [
            (0, "Theory", "initial"), (3, "Theory", "web"), (7, "Rule_Learning", "web"), (2, None, "web"),
            (6, "Case_Based", "web")]
