"""A person labelling in the browser as an oracle. :class:`WebOracle`
serves one page (``web.html``) on 127.0.0.1, on a free port, at a URL with
a random token: a request without the token is refused, so that another
user of the machine can neither read the questions nor answer them. The
page shows each question as a person needs it (a sentence, a paper's
neighbours, a few-shot episode's images), with a button and a key for each
class and command.

A reply the page sends is read by the terminal prompt's rules
(:func:`~graphseq.active.prompt.parse_reply`) and answers the question it
names only: one sent twice, or from a page left open on an old question,
is refused. :meth:`WebOracle.ask` hands it to the loop, which stores it
before it asks the next question, the only moment the page gets a new one;
what the loop says back (``stored: Theory``, how to continue after ``q``)
is shown on the page.

The page talks to the server by three requests, each with ``token=T``:
``GET /`` (the page), ``GET /state?after=V`` (the question being asked and
the oracle's news, once their version is other than ``V``, waiting up to
:data:`WAIT` seconds for a change) and ``POST /answer`` with JSON
``{"question": N, "reply": "3"}``. The server is the standard library's
``http.server``, one thread a request; nothing a request sends is run or
unpickled, only parsed as JSON and as a reply.
"""
from __future__ import annotations

import base64
import json
import secrets
import socket
import sys
import textwrap
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

from ..errors import GraphseqError, tell
from ..pictures import png_bytes
from .oracles import QUIT, Guess, Question, Reply
from .prompt import parse_reply

HOST = "127.0.0.1"  # never another address: the page answers for the person at this machine
WAIT = 20.0  # seconds a /state request waits for a change before it answers with none
NEWS = 8  # the oracle's latest lines of news that the page shows
LARGEST_REQUEST = 4096  # bytes of a POST body; a reply is a few
# The page runs its own inline script and style, shows images from data: URLs
# and talks to this server only; no other page may frame it.
POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def check_can_serve(host: str = HOST) -> None:
    """Refuses a web oracle that cannot serve its page (no loopback
    address to bind to): checked before any training."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
    except OSError as error:
        raise GraphseqError(f"the web oracle (--oracle web) serves its page on {host}, but cannot bind to it "
                            f"here ({error.strerror or error}); answer at the terminal with --oracle human") from None


def page_question(question: Question, number: int) -> Dict[str, Any]:
    """What the page shows of ``question``, the ``number``-th asked, as
    JSON: its lines of details (each marked whether it is the model's
    guess), or, where it has pictures, those (as PNG data URLs) and its
    guess lines alone, the rest being the terminal's drawing of them."""
    lines = [line for line in question.details if isinstance(line, Guess) or not question.pictures]
    return {
        "number": number, "item": question.item, "progress": question.progress,
        "classes": [str(name) for name in question.class_names],
        "details": [{"text": line.strip(), "guess": isinstance(line, Guess)} for line in lines],
        "pictures": [{"heading": row.heading,
                      "images": [{"caption": caption, "src": data_url(image)}
                                 for image, caption in zip(row.images, row.captions)]}
                     for row in question.pictures],
    }


def data_url(image) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode("ascii")


class WebOracle:
    """Asks a person through a page in their browser. The server starts
    here, on ``HOST`` and ``port`` (0: a free one); ``announce`` is given
    the page's address once, when the first question is ready (by default
    it is written on standard error). :meth:`close` stops the server, once
    a page that is open has heard that the run ended, or after ``linger``
    seconds."""

    source = "web"

    def __init__(self, announce: Callable[[str], None] = tell, port: int = 0, linger: float = 2.0):
        self.token = secrets.token_urlsafe(24)
        self.announce = announce
        self.linger = linger
        self.closed = False  # After q every question gets QUIT, as at the terminal.
        self._changed = threading.Condition()
        self._version = 0  # counts the changes the page is told of
        self._seen = 0  # the latest version a page was sent
        self._asked = 0  # questions asked: the number of the one being asked
        self._question: Optional[Dict[str, Any]] = None  # the one being asked; None between questions
        self._names: List[str] = []
        self._reply: Optional[Reply] = None
        self._news: List[str] = []
        self._ended = False
        self._server = _Server((HOST, port), self)
        # Polled often, so that close() is quick.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="graphseq web oracle",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/?token={self.token}"

    def ask(self, question: Question) -> Reply:
        if self.closed:
            return QUIT
        shown = page_question(question, self._asked + 1)  # its images encoded before the lock is taken
        with self._changed:
            self._asked += 1
            self._question, self._names, self._reply = shown, shown["classes"], None
            self._change()
        if self._asked == 1:
            self.announce(f"label in your browser: {self.url}")
        with self._changed:
            # A timed wait, so that Ctrl-C is not held up by a lock.
            while self._reply is None:
                self._changed.wait(0.5)
            reply = self._reply
        if reply is QUIT:
            self.closed = True
        return reply

    def tell(self, text: str) -> None:
        with self._changed:
            self._news.append(textwrap.dedent(text).strip("\n"))
            del self._news[:-NEWS]
            self._change()

    def restrict(self, pool):
        return pool

    def close(self) -> None:
        """Tells the page the run has ended, then stops the server."""
        with self._changed:
            if self._ended:
                return
            self._ended, self._question = True, None
            self._change()
            if self._seen:  # A page has asked for news: let it hear the last (what q said, how to continue).
                self._changed.wait_for(lambda: self._seen >= self._version, timeout=self.linger)
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "WebOracle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # What the server's threads call ------------------------------------- #

    def _change(self) -> None:
        self._version += 1
        self._changed.notify_all()

    def _state(self, after: int) -> Dict[str, Any]:
        """The page's view, once it differs from version ``after`` (or after ``WAIT`` seconds)."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != after or self._ended, timeout=WAIT)
            return {"version": self._version, "question": self._question, "news": list(self._news),
                    "ended": self._ended}

    def _sent(self, version: int) -> None:
        """A page was sent the view of ``version``."""
        with self._changed:
            self._seen = max(self._seen, version)
            self._changed.notify_all()

    def _answer(self, number: Any, text: Any) -> Tuple[HTTPStatus, str]:
        """Takes ``text`` as the reply to question ``number``, or says why not."""
        if not isinstance(number, int) or not isinstance(text, str):
            return HTTPStatus.BAD_REQUEST, 'expected {"question": a number, "reply": text}'
        with self._changed:
            if self._question is None or number != self._asked:
                return HTTPStatus.CONFLICT, "that question is no longer asked; the page shows the one that is"
            try:
                reply = parse_reply(text, self._names)
            except ValueError as problem:
                return HTTPStatus.BAD_REQUEST, str(problem)
            if reply == "?":
                return HTTPStatus.BAD_REQUEST, "the keys are listed under the question"
            self._reply, self._question = reply, None
            self._change()
        return HTTPStatus.OK, ""


class _Server(ThreadingHTTPServer):
    # Its request threads are daemons (ThreadingHTTPServer's default): closing waits for none,
    # as a browser may hold a connection open that sends nothing.

    def __init__(self, address: Tuple[str, int], oracle: WebOracle):
        self.oracle = oracle
        self.page = resources.files(__package__).joinpath("web.html").read_bytes()
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address) -> None:
        # A page closed or reloaded while it waited for news: nothing went wrong.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = WAIT + 10  # seconds a connection may take to send its request

    def do_GET(self) -> None:
        path, query = self._checked()
        if path == "/":
            self._send(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8")
        elif path == "/state":
            try:
                after = int(query.get("after", ["-1"])[0])
            except ValueError:
                after = -1  # a version no view has: the view at once
            state = self.server.oracle._state(after)
            self._send_json(HTTPStatus.OK, state)
            self.server.oracle._sent(state["version"])
        elif path is not None:
            self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        path, _ = self._checked()
        if path is None:
            return
        if path != "/answer":
            self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain; charset=utf-8")
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > LARGEST_REQUEST:
            self._send_json(HTTPStatus.BAD_REQUEST, {"problem": f"a reply is sent as JSON of at most "
                                                                f"{LARGEST_REQUEST} bytes"})
            return
        try:
            sent = json.loads(self.rfile.read(int(length)))
        except ValueError:  # not JSON, or not UTF-8
            sent = None
        if not isinstance(sent, dict):
            sent = {}
        status, problem = self.server.oracle._answer(sent.get("question"), sent.get("reply"))
        self._send_json(status, {"problem": problem})

    def _checked(self) -> Tuple[Optional[str], Dict[str, List[str]]]:
        """The request's path and query, or (None, {}) where its token is
        not the oracle's (the refusal then sent)."""
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        token = query.get("token", [""])[0].encode("utf-8", "replace")
        if not secrets.compare_digest(token, self.server.oracle.token.encode("ascii")):
            self._send(HTTPStatus.FORBIDDEN, b"this page needs the address with its token that graphseq printed",
                       "text/plain; charset=utf-8")
            return None, {}
        return parts.path, query

    def _send_json(self, status: HTTPStatus, value: Dict[str, Any]) -> None:
        self._send(status, json.dumps(value).encode("utf-8"), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", POLICY)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # The person's terminal is no access log.
