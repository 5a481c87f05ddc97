"""The six estimators' docstrings say the same thing, in the same words, wherever their parameters are the same.

Each estimator keeps its whole docstring, literal and readable in its module
(``sk_deq/estimators/_deq.py``, ``_matched.py``, ``_explicit.py``), so the
text a parameter shares with other estimators is written several times.  This
test parses the numpydoc Parameters and Attributes sections of the six and
fails where a shared entry (type and description) differs between
estimators, except for the differences listed below: words that name the task
or the network (:data:`SAME_WORDS`), and entries whose meaning differs by the
kind of network or by the task (:data:`ALLOWED`).
"""

import difflib

import pytest
from numpydoc.docscrape import ClassDoc

import sk_deq

#: The six estimators: (network, task) of each.
ESTIMATORS = {
    "DEQClassifier": ("deq", "classifier"),
    "DEQRegressor": ("deq", "regressor"),
    "MatchedExplicitClassifier": ("matched", "classifier"),
    "MatchedExplicitRegressor": ("matched", "regressor"),
    "ExplicitClassifier": ("explicit", "classifier"),
    "ExplicitRegressor": ("explicit", "regressor"),
}

SECTIONS = ("Parameters", "Attributes")

#: Spellings of one thing in otherwise shared text: the task's or the network's own name for it.
SAME_WORDS = [
    ("DEQClassifier", "DEQRegressor"),  # "As in :class:`DEQClassifier`" of the explicit estimators' attributes
    ("MLPClassifier", "MLPRegressor"),  # the scikit-learn counterpart of the task
    ("validation accuracy", "validation R²"),  # a classifier's and a regressor's validation score
    ("Validation accuracy", "Validation R²"),
    (":class:`sk_deq.nn.DEQLayer`", ":class:`sk_deq.nn.ExplicitNet`"),  # the feature module of the network
]

#: Entries whose text may differ beyond :data:`SAME_WORDS`, and between which estimators: ``'network'``
#: -- by the kind of network (DEQ, matched, explicit; the same for its classifier and its regressor),
#: ``'task'`` -- between the classifiers and the regressors (the same for the three networks of a task).
ALLOWED = {
    # the network: a DEQ defines its own activation and weights, a matched net those of the DEQ it matches
    "activation": "network",
    "sigma_a2": "network",
    "sigma_b2": "network",
    "n_hidden": "network",  # the DEQ's one width, or the width of every layer
    "trainable": "network",  # A and B of a DEQ, or W_1 .. W_L
    "fixed_point_info_": "network",  # a DEQ's solves; None for the explicit networks, which have none
    # the task: the optimizer, step sizes and penalty were chosen for each (closed-form ridge for a regressor)
    "solver": "task",
    "learning_rate_init": "task",
    "alpha": "task",
    "early_stopping": "task",  # a stratified or a random split, the cross-entropy or the squared error
    "warm_start": "task",  # what a warm start keeps: the classes, or the target scaling and outputs
}


def _normalised(text: str) -> str:
    """``text`` with its whitespace collapsed and the words of :data:`SAME_WORDS` spelled one way."""
    text = " ".join(text.split())
    for i, words in enumerate(SAME_WORDS):
        for word in words:
            text = text.replace(word, f"<same-{i}>")
    return text


def _entries(docstrings: dict) -> dict:
    """``{(section, name): {estimator: normalised 'type :: description'}}`` of every entry of the six docstrings."""
    table: dict = {}
    for est, doc in docstrings.items():
        parsed = ClassDoc(None, doc=doc, config={"show_class_members": False})
        for section in SECTIONS:
            for p in parsed[section]:
                table.setdefault((section, p.name), {})[est] = _normalised(f"{p.type} :: {' '.join(p.desc)}")
    return table


def _groups(names, scope):
    """The estimators among ``names`` whose entries must agree: all, or those of one network or one task."""
    if scope is None:
        return [sorted(names)]
    axis = 0 if scope == "network" else 1
    keys = sorted({ESTIMATORS[n][axis] for n in names})
    return [sorted(n for n in names if ESTIMATORS[n][axis] == key) for key in keys]


def _drift(docstrings: dict) -> list[str]:
    """Every shared entry whose text differs where it should not, with the differing words."""
    problems = []
    for (section, name), texts in sorted(_entries(docstrings).items()):
        if len(texts) < 2:
            continue
        for group in _groups(texts, ALLOWED.get(name)):
            first = group[0]
            for other in group[1:]:
                if texts[other] != texts[first]:
                    diff = list(difflib.ndiff(texts[first].split(), texts[other].split()))
                    only_first = " ".join(d[2:] for d in diff if d[0] == "-")
                    only_other = " ".join(d[2:] for d in diff if d[0] == "+")
                    problems.append(
                        f"{section} {name!r}: {first} says {only_first!r} where {other} says {only_other!r}"
                    )
    return problems


@pytest.fixture(scope="module")
def docstrings():
    return {name: getattr(sk_deq, name).__doc__ for name in ESTIMATORS}


def test_shared_parameters_and_attributes_say_the_same_in_the_six_estimators(docstrings):
    assert _drift(docstrings) == []


def test_every_allowed_difference_is_one(docstrings):
    """The table holds no entry that is not shared, or not different: each exception is needed."""
    entries = {name: texts for (_, name), texts in _entries(docstrings).items()}
    for name in ALLOWED:
        texts = entries.get(name, {})
        assert len(texts) > 1, f"{name!r} is not shared: it needs no allowance"
        assert len(set(texts.values())) > 1, f"{name!r} reads the same everywhere: remove it from ALLOWED"


def test_every_spelling_of_the_same_words_is_used(docstrings):
    joined = "\n".join(docstrings.values())
    for words in SAME_WORDS:
        assert all(word in joined for word in words), words


@pytest.mark.parametrize(
    ("estimator", "old", "new"),
    [
        ("ExplicitRegressor", "Size of the validation split.", "Fraction held out for validation."),
        ("MatchedExplicitClassifier", "Width ``m`` of every layer.", "Width ``m`` of each layer."),
        ("DEQRegressor", "Number of input features.", "Number of features seen in fit."),
    ],
)
def test_a_changed_word_in_one_docstring_is_found(docstrings, estimator, old, new):
    assert old in docstrings[estimator]
    edited = {**docstrings, estimator: docstrings[estimator].replace(old, new, 1)}
    problems = _drift(edited)
    assert problems and all(estimator in p for p in problems), problems
