"""The package's one progress display (:mod:`sk_deq._progress`)."""

import io
import types

import pytest

from sk_deq import _progress
from sk_deq._progress import BAR, STEPS, ProgressBar


@pytest.fixture
def clock(monkeypatch):
    """A fake ``time.perf_counter`` for the progress module: set ``clock.now`` to move time."""
    fake = types.SimpleNamespace(now=100.0)
    monkeypatch.setattr(_progress, "time", types.SimpleNamespace(perf_counter=lambda: fake.now))
    return fake


def test_bar_layout_of_the_training_loop(clock):
    stream = io.StringIO()
    with ProgressBar(4, "epoch 3", stream=stream, width=8) as bar:
        clock.now += 0.5
        bar.update()
        clock.now += 0.05  # within 0.1 s of the last redraw: not drawn
        bar.update()
        clock.now += 0.2
        bar.update()
        bar.update()  # the last step is always drawn
    assert stream.getvalue() == (
        "\repoch 3 |##------| 1/4 [0.5s]"
        "\repoch 3 |######--| 3/4 [0.8s]"
        "\repoch 3 |########| 4/4 [0.8s]"
        "\repoch 3 |########| 4/4 [0.8s]\n"
    )


def test_steps_layout_of_the_experiments(clock):
    stream = io.StringIO()
    bar = ProgressBar(4, stream=stream, width=20, template=STEPS, min_interval=0.0)
    bar.set_description("digits relu: warm-up")
    clock.now += 2.0
    bar.update(refresh=False)  # counted, not drawn
    bar.set_description("a")
    clock.now += 1.0
    bar.update(3, refresh=False)
    bar.close("done")
    lines = stream.getvalue().split("\r")[1:]
    assert lines[0] == "[--------------------] 0/4 digits relu: warm-up (0s)"
    # the time left is estimated from the steps done; a shorter line blanks out the longer one before it
    assert lines[1] == "[#####---------------] 1/4 a (2s, ~6s left)" + " " * 9
    assert lines[2] == "[####################] 4/4 done (3s)" + " " * 7 + "\n"


def test_disabled_bar_prints_nothing_and_counts_are_capped():
    stream = io.StringIO()
    bar = ProgressBar(2, "x", enabled=False, stream=stream)
    bar.update(5)
    bar.set_description("y")
    bar.close("done")
    assert stream.getvalue() == "" and bar.n == 2
    assert ProgressBar(0).total == 1  # an empty run still draws a full bar


def test_default_stream_is_stdout(capsys):
    with ProgressBar(1, "features") as bar:
        bar.update()
    out = capsys.readouterr().out
    assert out.startswith("\rfeatures |") and out.endswith("1/1 [0.0s]\n")


def test_templates_and_one_class_for_training_and_experiments():
    from sk_deq import nn

    assert not hasattr(nn, "ProgressBar")  # one class, in sk_deq._progress
    assert ProgressBar(1).template == BAR
    fields = dict(desc="d", bar="##", n=1, total=2, elapsed=1.0, eta=", ~1s left")
    assert BAR.format(**fields) == "d |##| 1/2 [1.0s]"
    assert STEPS.format(**fields) == "[##] 1/2 d (1s, ~1s left)"


def test_feature_progress_bar_on_long_computations(capsys):
    from sk_deq._progress import ProgressBar

    stream = io.StringIO()
    with ProgressBar(4, "features", stream=stream) as bar:
        for _ in range(4):
            bar.update()
    assert "4/4" in stream.getvalue() and stream.getvalue().endswith("\n")
