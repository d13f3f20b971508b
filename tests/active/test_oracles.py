import io

import pytest
import torch

from graphseq.active.oracles import QUIT, SKIP, UNDO, FileOracle, Question, SimulatedOracle, parse_class
from graphseq.active.prompt import HumanOracle
from graphseq.errors import GraphseqError

CLASSES = ["Theory", "Reinforcement_Learning", "Genetic_Algorithms", "Rule_Learning"]


def question(item=5):
    return Question(item, CLASSES, ["  some detail"], "age: 3 of 10 labels, round 1")


@pytest.mark.parametrize("text,index", [("Theory", 0), ("theory", 0), ("t", 0), ("GEN", 2),
                                        ("re", 1), ("ru", 3), ("3", 3), (" 0 ", 0)])
def test_parse_class_accepts_names_unique_prefixes_and_numbers(text, index):
    assert parse_class(text, CLASSES) == index


@pytest.mark.parametrize("text,problem", [("r", "could be Reinforcement_Learning or Rule_Learning"),
                                          ("4", "no class number 4"), ("xyz", "is no class"),
                                          ("\u00b2", "is no class")])
def test_parse_class_says_what_is_wrong(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_class(text, CLASSES)


def test_human_oracle_asks_again_after_garbage_and_reads_commands():
    output = io.StringIO()
    oracle = HumanOracle(io.StringIO("banana\n\n9\n?\nge\ns\nu\nq\n"), output)
    assert oracle.ask(question()) == 2
    assert oracle.ask(question()) is SKIP
    assert oracle.ask(question()) is UNDO
    assert oracle.ask(question()) is QUIT
    text = output.getvalue()
    assert "'banana' is no class" in text
    assert "type a class name or number" in text
    assert "no class number 9" in text
    assert "save and quit" in text  # the help
    assert "some detail" in text and "age: 3 of 10 labels" in text


@pytest.mark.parametrize("typed, said", [
    ("ru\n", "(end of input: your answers are saved)"),
    # A stream cut off after "2" of "2x..." must not store class 2 (nor a unique prefix's class).
    ("ru\n2", "(end of input: your answers are saved; the last line, '2', has no line end and was not taken "
               "as an answer)"),
])
def test_human_oracle_treats_the_end_of_input_as_quit_and_stays_closed(typed, said):
    output = io.StringIO()
    oracle = HumanOracle(io.StringIO(typed), output)
    assert oracle.ask(question()) == 3
    assert oracle.ask(question()) is QUIT
    assert oracle.ask(question()) is QUIT
    assert said in " ".join(output.getvalue().split())


def test_human_oracle_shortens_a_long_garbage_answer():
    output = io.StringIO()
    oracle = HumanOracle(io.StringIO("x" * 150 + "\nq\n"), output, width=60)
    assert oracle.ask(question()) is QUIT
    lines = output.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 60
    assert "label> " + "x" * 50 + "..." in lines
    assert any(line.startswith(f"  {'x' * 40!r}... is no class;") for line in lines)
    with pytest.raises(ValueError, match=r"^'x{40}'\.\.\. is no class"):
        parse_class("x" * 150, CLASSES)


@pytest.mark.parametrize("width", [40, 41, 60, 200])
def test_human_oracle_never_splits_the_commands_entry_of_the_classes_line(width):
    output = io.StringIO()
    assert HumanOracle(io.StringIO("q\n"), output, width=width).ask(question()) is QUIT
    lines = output.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    assert any(line.strip().endswith("(? help, s skip, u undo, q quit)") for line in lines)


def test_simulated_oracle_answers_the_truth_without_noise():
    truth = torch.tensor([0, 1, 2, 3, 0, 1])
    oracle = SimulatedOracle(truth)
    assert [oracle.ask(question(i)) for i in range(6)] == truth.tolist()


def test_simulated_oracle_noise_rate_is_seeded_and_never_gives_the_truth_when_wrong():
    truth = torch.zeros(2000, dtype=torch.long)
    oracle, same_seed = SimulatedOracle(truth, noise=0.3, seed=1), SimulatedOracle(truth, noise=0.3, seed=1)
    answers = [oracle.ask(question(i)) for i in range(2000)]
    again = [same_seed.ask(question(i)) for i in range(5)]
    wrong = sum(a != 0 for a in answers) / len(answers)
    assert 0.26 < wrong < 0.34
    assert answers[:5] == again
    assert set(answers) == {0, 1, 2, 3}


def test_simulated_oracle_noisy_answer_for_an_item_does_not_depend_on_what_was_asked_before():
    # A run killed and resumed asks the items after the kill of a fresh oracle: the same answers.
    truth = torch.zeros(200, dtype=torch.long)
    oracle, resumed = SimulatedOracle(truth, noise=0.5, seed=3), SimulatedOracle(truth, noise=0.5, seed=3)
    answers = [oracle.ask(question(i)) for i in range(200)]
    assert [resumed.ask(question(i)) for i in reversed(range(100, 200))] == answers[100:][::-1]
    assert [resumed.ask(question(i)) for i in range(100)] == answers[:100]
    assert [oracle.ask(question(7)) for _ in range(3)] == [answers[7]] * 3
    assert answers != [SimulatedOracle(truth, noise=0.5, seed=4).ask(question(i)) for i in range(200)]


def test_file_oracle_reads_names_and_numbers_and_skips_unknown_items(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("item,label\n5,gen\n7,3\n")
    oracle = FileOracle(path)
    assert oracle.ask(question(5)) == 2
    assert oracle.ask(question(7)) == 3
    assert oracle.ask(question(8)) is SKIP
    assert oracle.restrict(torch.tensor([4, 5, 6, 7])).tolist() == [5, 7]


@pytest.mark.parametrize("header", ["episode,class\n", "item,label\n", ""])
def test_a_few_shot_labels_file_reads_as_its_docstring_says(tmp_path, header):
    # Its docstring said episode,class rows, yet that header was refused as a bad row.
    from graphseq.stages.fewshot_oracle import LABELS_COLUMNS

    path = tmp_path / "labels.csv"
    path.write_text(header + "0,3\n4,1\n")
    oracle = FileOracle(path, LABELS_COLUMNS)
    oracle.check(["0", "1", "2", "3", "4"], torch.arange(5))
    assert [oracle.ask(Question(e, ["0", "1", "2", "3", "4"])) for e in range(5)] == [3, SKIP, SKIP, SKIP, 1]
    path.write_text(header + "0,3\nfirst,1\n")
    with pytest.raises(GraphseqError, match="expected episode,class with a whole-number episode, got 'first,1'"):
        FileOracle(path, LABELS_COLUMNS).check(["0", "1"], torch.arange(5))


def test_file_oracle_names_a_bad_line(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("item,label\n5,gen\nfive,Theory\n")
    oracle = FileOracle(path)
    for refuse in (lambda: oracle.ask(question(5)), lambda: oracle.check(CLASSES, torch.arange(8))):
        with pytest.raises(GraphseqError, match="line 3"):
            refuse()


def test_file_oracle_check_lists_the_problems_of_reading_with_its_own_in_line_order(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("item,label\n1371,theory\n99999,x\n5,zzz\nfive\n1371,gen\n")
    oracle = FileOracle(path)  # rows that are read are checked against the task before the error
    with pytest.raises(GraphseqError) as error:
        oracle.check(CLASSES, torch.arange(2000))
    assert str(error.value) == (
        f"{path}: 5 problems: line 3: item 99999 is not among the items that may be labelled; "
        f"line 3: 'x' is no class; the classes are {', '.join(CLASSES)}; "
        f"line 4: 'zzz' is no class; the classes are {', '.join(CLASSES)}; "
        f"line 5: expected item,label with a whole-number item, got 'five'; "
        f"line 6: item 1371 again (first on line 2); "
        f"the items that may be labelled are the pool of this task (2,000 items: 0-1999)")


@pytest.mark.parametrize("content, problem", [
    (b"", "holds no answers"),
    (b"item,label\n", "holds no answers"),
    (b"item,label\n5,gen\n5,theory\n", "line 3: item 5 again (first on line 2)"),
    (b"5,gen,extra\n", "line 1: expected item,label"),
    (b"5,\n", "line 1: expected item,label"),
    (b"-5,gen\n", "line 1: expected item,label with a whole-number item"),
    ("\u00b2,gen\n".encode(), "line 1: expected item,label with a whole-number item"),  # isdigit, not int
    (b"5,gen\n6," + b"x" * 200_000 + b"\n", "line 2: field larger than field limit"),
    (b"item,label\n5,R\xe9sum\xe9\n", "line 2: not UTF-8 text (byte 0xe9); save the file as UTF-8"),
    ("".join(f"x{i},gen\n" for i in range(8)).encode(), "8 problems: line 1: "),
    # A stray quote swallowed the rows after it into one field.
    (b'item,label\n1176,"Theory\n5,gen\n', 'line 2: a quote (") opens a field that no quote closes'),
    (b'item,label\n5,gen\n6,"The"ory\n', "line 3: ',' expected after '\"'"),
    (b'item,label\n1176,"Theory\n5,gen"\n7,ru\n', "1 problem: line 2: a quoted field runs on to line 3"),
])
def test_file_oracle_refuses_a_bad_file_whole_in_one_line(tmp_path, content, problem):
    path = tmp_path / "labels.csv"
    path.write_bytes(content)
    with pytest.raises(GraphseqError) as error:
        FileOracle(path).check(CLASSES, torch.arange(8))  # refused when made, or by check
    assert problem in str(error.value) and str(path) in str(error.value)
    assert "\n" not in str(error.value)
    assert path.read_bytes() == content


def test_file_oracle_reads_a_byte_order_mark_and_windows_line_ends(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_bytes("\ufeffitem,label\r\n5,gen\r\n7,Theory\r\n".encode("utf-8"))
    oracle = FileOracle(path)
    assert oracle.rows == {5: "gen", 7: "Theory"}


def test_file_oracle_check_names_unknown_items_and_labels(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("item,label\n5,gen\n9,Theory\n6,banana\n")
    oracle = FileOracle(path)
    with pytest.raises(GraphseqError) as error:
        oracle.check(CLASSES, torch.arange(8))
    message = str(error.value)
    assert "2 problems" in message and "line 3: item 9 is not among the items" in message
    assert "line 4: 'banana' is no class" in message
    assert message.endswith("the items that may be labelled are the pool of this task (8 items: 0-7)")


def test_file_oracle_check_reads_the_label_of_a_row_whose_item_is_refused_too(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("item,label\n5,gen\n9,banana\n")
    with pytest.raises(GraphseqError) as error:
        FileOracle(path).check(CLASSES, torch.tensor([0, 1, 2, 5, 6, 7, 10, 12, 14, 20]))
    message = str(error.value)
    assert "2 problems: line 3: item 9 is not among the items that may be labelled; " \
           "line 3: 'banana' is no class" in message
    assert message.endswith("(10 items: 0-2, 5-7, 10, ..., 20)")


def test_simulated_noise_with_one_class_is_refused():
    with pytest.raises(GraphseqError, match="label noise needs at least two classes, got 1"):
        SimulatedOracle(torch.zeros(4, dtype=torch.long), noise=0.5).ask(Question(0, ["only"]))


def test_simulated_oracle_checks_the_truth_of_the_pool_only():
    truth = torch.tensor([0, 1, -1, 2])  # -1: PyG's mark of an unknown label
    oracle = SimulatedOracle(truth)
    oracle.check(["a", "b", "c"], torch.tensor([0, 1, 3]))
    with pytest.raises(GraphseqError, match=r"label -1 for item 2 is no class \(0..2\)"):
        oracle.check(["a", "b", "c"], torch.arange(4))
    with pytest.raises(GraphseqError, match=r"label -1 for item 2 is no class \(0..2\)"):
        oracle.ask(Question(2, ["a", "b", "c"]))


def test_human_oracle_fits_every_line_to_a_narrow_terminal():
    names = ["Case_Based", "Genetic_Algorithms", "Probabilistic_Methods", "Reinforcement_Learning"]
    long_detail = "  degree 4 (citations); neighbours' known labels: Case_Based x2, Genetic_Algorithms x1"
    output = io.StringIO()
    oracle = HumanOracle(io.StringIO("?\nq\n"), output, width=40)
    assert oracle.ask(Question(5, names, [long_detail])) is QUIT
    lines = output.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 40
    assert "3 Reinforcement_Learning" in output.getvalue()  # a class's number stays with its name
    assert "      (or skip) and be asked it again" in lines  # the help's hanging indent
    assert ["  degree 4 (citations); neighbours'", "  known labels: Case_Based x2,",
            "  Genetic_Algorithms x1"] == lines[lines.index("item 5") + 1:lines.index("item 5") + 4]
    wide = io.StringIO()
    HumanOracle(io.StringIO("q\n"), wide, width=200).ask(Question(5, names, [long_detail]))
    assert long_detail in wide.getvalue().splitlines()


@pytest.mark.parametrize("width", [40, 50, 51, 52, 80])
def test_human_oracle_keeps_item_and_its_number_on_one_line(width):
    # At 51 columns the header used to end in "... round] item", its number alone on the next line.
    output = io.StringIO()
    question = Question(60, CLASSES, [], "entropy: 0 of 6 labels, random first round")
    assert HumanOracle(io.StringIO("q\n"), output, width=width).ask(question) is QUIT
    lines = output.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    assert any(line.endswith("item 60") for line in lines) and "60" not in lines and "\u00a0" not in "".join(lines)
