"""Active learning with a person in the loop: the model asks for the labels
that help it most, someone (or something) answers, every answer is stored
at once, and the model is retrained.

- :mod:`.measures`   how unsure the model is about each item (entropy, margin, ...)
- :mod:`.strategies` which items to ask about: ``(probabilities, pool, k, ...) -> indices``
- :mod:`.oracles`    who answers: the ground truth (with noise), a CSV file
- :mod:`.prompt`     a person at the terminal (or a pipe), never ``input()``
- :mod:`.web`        a person in the browser: a page on 127.0.0.1 behind a token
- :mod:`.store`      every answer in SQLite, committed before the next question
- :mod:`.loop`       query, ask, store, retrain, until the budget is spent
- :mod:`.learners`   fits the model retrained each round (:class:`graphseq.models.GCN`)
- :mod:`.tasks`      the tasks: Cora's papers, sentence-polarity snippets
- :mod:`.curves`     learning-curve plots, mean and spread over seeds
"""
from .curves import plot_learning_curves, plot_run
from .loop import Task, active_learning
from .measures import entropy, least_confidence, margin
from .oracles import QUIT, SKIP, UNDO, FileOracle, Question, SimulatedOracle
from .prompt import HumanOracle
from .store import LabelStore, labels_csv
from .strategies import STRATEGIES, get_strategy
from .web import WebOracle

__all__ = ["Task", "active_learning", "entropy", "margin", "least_confidence", "STRATEGIES",
           "get_strategy", "SimulatedOracle", "FileOracle", "HumanOracle", "WebOracle", "Question", "SKIP",
           "UNDO", "QUIT", "LabelStore", "labels_csv", "plot_learning_curves", "plot_run"]
