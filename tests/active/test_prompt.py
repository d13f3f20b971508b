"""The prompt as piped answers and a terminal reach it: a byte-order mark,
bytes that are no UTF-8, keys typed while no question was shown, and closed
standard streams."""
import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphseq.active.oracles import Question
from graphseq.active.prompt import HumanOracle, parse_reply
from graphseq.errors import GraphseqError

REPO = Path(__file__).resolve().parents[2]
CLASSES = ["Theory", "Reinforcement_Learning", "Genetic_Algorithms", "Rule_Learning"]


def question(item=5):
    return Question(item, CLASSES, ["  some detail"], "age: 3 of 10 labels, round 1")


def test_a_byte_order_mark_before_the_first_answer_is_no_part_of_it():
    # Windows editors and PowerShell's pipes start a file with one; the answers must stay on their items.
    oracle = HumanOracle(io.StringIO("\ufeffge\nru\n"), io.StringIO())
    assert [oracle.ask(question()), oracle.ask(question())] == [2, 3]
    assert parse_reply("\ufeff ru ", CLASSES) == 3


class CtrlC(io.StringIO):
    """A terminal at which the person presses Ctrl-C instead of answering."""

    def readline(self, *args):
        raise KeyboardInterrupt


def test_ctrl_c_at_the_prompt_ends_the_line_once_and_says_so():
    # The prompt ends the "label> ^C" line itself; the command's last word then needs no second line end.
    output = io.StringIO()
    with pytest.raises(KeyboardInterrupt) as interrupt:
        HumanOracle(CtrlC(), output).ask(question())
    assert output.getvalue().endswith("label> \n")
    assert getattr(interrupt.value, "line_ended", False)


def test_undecodable_piped_bytes_are_an_answer_that_is_no_class():
    # What cli.main makes of a byte that is no UTF-8 (stdin read with errors="surrogateescape"): asked
    # again, not a UnicodeDecodeError; the next line answers the same item.
    output = io.StringIO()
    piped = io.TextIOWrapper(io.BytesIO(b"\xffge\nru\n"), encoding="utf-8", errors="surrogateescape")
    assert HumanOracle(piped, output).ask(question()) == 3
    assert "'\\udcffge' is no class" in output.getvalue()


class Terminal:
    """A pseudo-terminal whose person types ``typed_ahead`` before the
    question and ``answer`` once the prompt shows (no timing involved: the
    answer is typed when the oracle writes ``label> ``)."""

    def __init__(self, typed_ahead, answer):
        self.master, slave = pty.openpty()
        self.input = open(slave, "r", encoding="utf-8", closefd=True)
        self.text, self.answer = "", answer
        os.write(self.master, typed_ahead.encode())

    def write(self, text):
        self.text += text
        if text == "label> ":
            os.write(self.master, (self.answer + "\n").encode())
        return len(text)

    def flush(self):
        pass

    def close(self):
        self.input.close()
        os.close(self.master)


def test_keys_typed_while_the_model_retrained_answer_no_question():
    terminal = Terminal(typed_ahead="th\n", answer="ge")
    try:
        assert terminal.input.isatty()
        assert HumanOracle(terminal.input, terminal, width=80).ask(question()) == 2
    finally:
        terminal.close()


@pytest.mark.parametrize("input, output, problem", [
    (None, io.StringIO(), "reads your answers from standard input, which is closed"),
    (io.StringIO("q\n"), None, "shows its questions on standard output, which is closed"),
])
def test_closed_standard_streams_are_refused_by_name(input, output, problem):
    from graphseq.active.prompt import check_streams

    closed = io.StringIO()
    closed.close()
    for stream in (None, closed):
        with pytest.raises(GraphseqError, match=problem):
            check_streams(stream if input is None else input, stream if output is None else output)
    check_streams(io.StringIO(), io.StringIO())


@pytest.mark.parametrize("text", ["neural networks", "Neural  Networks", "neural n", "neural-networks"])
def test_a_class_name_may_be_typed_with_spaces_for_its_underscores(text):
    assert parse_reply(text, CLASSES + ["Neural_Networks"]) == 4
    assert parse_reply(text.replace(" ", "_"), ["Theory", "Neural Networks"]) == 1


@pytest.mark.parametrize("typo", ["-1", "_2", "1-", "--0", "- 3", "+1", "2."])
def test_a_number_with_stray_punctuation_is_no_class(typo):
    # Stripping the hyphens and underscores made "-1" class 1: a typo stored as a label.
    for names in (CLASSES, ["0", "1", "2", "3"]):  # a few-shot episode's classes are numbers
        with pytest.raises(ValueError, match="is no class"):
            parse_reply(typo, names)


def test_a_typo_is_asked_again_and_the_class_stored_is_said(tmp_path):
    from graphseq.active.loop import store_answer
    from graphseq.active.store import LabelStore

    output = io.StringIO()
    oracle = HumanOracle(io.StringIO("-1\n_2\nrein\ns\n"), output)
    with LabelStore(tmp_path / "labels.sqlite") as store:
        for item in (5, 6):
            store_answer(store, "margin", item, oracle.ask(question(item)), CLASSES, oracle, "test")
        assert [(a.item, a.label) for a in store.answers("margin", skips=True)] == [
            (5, "Reinforcement_Learning"), (6, None)]
    text = output.getvalue()
    assert "'-1' is no class" in text and "'_2' is no class" in text
    assert re.findall(r"^  stored: (.*)$", text, re.M) == ["Reinforcement_Learning", "skipped (no label)"]


@pytest.mark.slow
def test_the_terminal_prompt_edits_lines_with_readline(tmp_path):
    # At a terminal, Ctrl-A goes to the line's start, as in a shell; without readline it was a
    # character of the answer (and the Up arrow "^[[A").
    script = ("import sys; from graphseq.active.oracles import Question; "
              "from graphseq.active.prompt import HumanOracle; "
              "print('REPLY', HumanOracle(sys.stdin, sys.stdout, width=80).ask(Question(5, ['Theory', 'Rule'])))")
    master, slave = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", script], stdin=slave, stdout=slave, stderr=slave,
                               env={**os.environ, "TERM": "xterm"}, cwd=REPO)
    os.close(slave)
    try:
        seen = read_until(master, "label> ")
        os.write(master, b"heory\x01T\n")  # typed "heory", then Ctrl-A and the T it lacked
        seen = read_until(master, "\n", seen="")
        os.write(master, b"q\n")  # asked again where the line was not edited
        assert "REPLY 0" in read_until(master, "REPLY", seen) + read_until(master, "\n", "")
    finally:
        process.kill()
        process.wait()
        os.close(master)


def read_until(master, text, seen=""):
    deadline = time.monotonic() + 60
    while text not in seen:
        assert time.monotonic() < deadline, f"no {text!r} in {seen!r}"
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                seen += os.read(master, 4096).decode(errors="replace")
            except OSError:  # the process ended
                break
    return seen


def test_input_with_nothing_to_read_is_refused_before_any_training(tmp_path):
    from graphseq.active.prompt import check_streams

    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "answers.txt").write_text("1\nq\n")
    for nothing in (os.devnull, tmp_path / "empty.txt"):
        with open(nothing) as stream, pytest.raises(GraphseqError, match="holds nothing to read"):
            check_streams(stream, io.StringIO())
    with open(tmp_path / "answers.txt") as stream:
        check_streams(stream, io.StringIO())  # answers to read: asked as piped
