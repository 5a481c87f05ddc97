"""The study of where the equivalence ends (``experiments/_boundary.py``, its models and result), its figure."""

import io
import json
import math

import numpy as np
import pytest

from sk_deq.experiments import BOUNDARY_MODELS, BoundaryResult, where_equivalence_ends
from sk_deq.experiments._boundary_models import deq_param_count, explicit_param_count, matched_width
from sk_deq.plotting import plot_where_equivalence_ends

SMALL = dict(
    n_train=96,
    n_hidden=8,
    n_hidden_readout=128,
    max_epochs=20,
    n_grid=21,
    n_lines=2,
)


@pytest.fixture(scope="module")
def tiny():
    return where_equivalence_ends(sharpness=[1, 8], dims=[2, 5], seeds=[0, 1], **SMALL)


def test_structure(tiny):
    assert isinstance(tiny, BoundaryResult)
    assert tiny.config["models"] == list(BOUNDARY_MODELS)
    assert tiny.config["sharpness"] == [1.0, 8.0] and tiny.config["dims"] == [2, 5]
    # one record per d x seed x sharpness x model
    assert len(tiny.records) == 2 * 2 * 2 * 4
    keys = {(r["d"], r["seed"], r["sharpness"], r["model"]) for r in tiny.records}
    assert len(keys) == len(tiny.records)
    assert len(tiny.grid) == 21 and tiny.grid[0] == -2.0 and tiny.grid[-1] == 2.0
    for r in tiny.records:
        assert math.isfinite(r["linf"]) and math.isfinite(r["l2"]) and math.isfinite(r["train_rmse"])
        # the root mean square over the test points never exceeds their largest error
        assert 0.0 <= r["l2"] <= r["linf"] + 1e-12
        assert r["fit_seconds"] > 0 and r["n_epochs"] >= 1
        if r["seed"] == 0:
            assert len(r["profile"]) == 21 and all(math.isfinite(v) for v in r["profile"])
        else:
            assert r["profile"] is None
        if r["model"].startswith("deq"):
            assert r["solver"]["converged"] in (True, False) and r["solver"]["mean_iter"] > 0
            assert ("adjoint" in r["solver"]) == (r["model"] == "deq_all")
        else:
            assert r["solver"] is None
    rows = tiny.summary()
    assert len(rows) == 2 * 2 * 4
    for row in rows:
        assert row["n_seeds"] == 2 and len(row["linf"]) == 2
        assert row["linf_std"] >= 0 and row["l2_mean"] <= row["linf_mean"] + 1e-12


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_parameter_counts_match_the_modules(tiny):
    from sk_deq import DEQRegressor, ExplicitRegressor

    by = {(r["d"], r["model"]): r for r in tiny.records}
    for d in (2, 5):
        assert by[d, "deq_all"]["n_params"] == deq_param_count(d, 8) == 8 * 8 + 8 * d + 8 + 1
        assert by[d, "deq_all"]["n_trainable"] == by[d, "deq_all"]["n_params"]
        # two layers of the DEQ's width: the same count
        assert by[d, "explicit_all"]["n_hidden"] == 8
        assert by[d, "explicit_all"]["n_params"] == explicit_param_count(d, 8, 2) == deq_param_count(d, 8)
        # readout-trained: the whole network is counted, only the readout trained
        assert by[d, "deq_readout"]["n_params"] == deq_param_count(d, 128)
        for model in ("deq_readout", "matched_readout"):
            assert by[d, model]["n_trainable"] == 128 + 1
        assert by[d, "matched_readout"]["n_params"] == explicit_param_count(d, 128, 2)  # ReLU: two leaky-ReLU layers
    # against torch modules built here
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((30, 7)), rng.standard_normal(30)
    deq = DEQRegressor(n_hidden=6, trainable="all", max_iter=1, random_state=0).fit(X, y)
    assert sum(p.numel() for p in deq.module_.parameters()) == deq_param_count(7, 6)
    for layers in (("relu",), ("relu", "relu"), ("tanh", "relu", "relu")):
        w = matched_width(7, 6, len(layers))
        net = ExplicitRegressor(layers, n_hidden=w, trainable="all", max_iter=1, random_state=0).fit(X, y)
        count = sum(p.numel() for p in net.module_.parameters())
        assert count == explicit_param_count(7, w, len(layers))
        # no other width comes closer to the DEQ's count
        target = deq_param_count(7, 6)
        assert all(
            abs(count - target) <= abs(explicit_param_count(7, c, len(layers)) - target) for c in range(1, 3 * w + 3)
        )
    assert matched_width(7, 6, 2) == 6


def test_readout_models_agree(tiny):
    """The equivalence: the readout-trained DEQ and its matched net are much closer to each other than to a constant."""
    for r in tiny.records:
        if r["model"] == "matched_readout":
            assert r["rms_to_deq_readout"] is not None
            assert r["rms_to_deq_readout"] < 0.5 * r["baseline_l2"], r
        elif r["model"] == "deq_readout":
            assert r["rms_to_deq_readout"] is None
            # another weight draw of the same DEQ: the finite-width noise floor, also far below the constant's error
            assert 0.0 < r["rms_redrawn_deq"] < 0.5 * r["baseline_l2"], r
        else:
            assert r["rms_to_deq_readout"] >= 0.0
        if r["model"] != "deq_readout":
            assert r["rms_redrawn_deq"] is None
        if r["model"].endswith("_readout"):
            assert r["alpha"] in tiny.config["alpha_readout"]
        else:
            assert r["alpha"] == tiny.config["alpha_trained"]


def test_errors_grow_with_sharpness(tiny):
    """A random-feature model fits the gentle target better than the steep one."""
    rows = {(r["d"], r["sharpness"], r["model"]): r for r in tiny.summary()}
    for d in (2, 5):
        for model in ("deq_readout", "matched_readout"):
            assert rows[d, 1.0, model]["linf_mean"] < rows[d, 8.0, model]["linf_mean"]


def test_table_and_json_round_trip(tiny, tmp_path):
    text = str(tiny)
    for word in ("d = 2", "d = 5", "DEQ, readout", "explicit, all weights", "constant", "DEQ-DEQ'", "DEQ fixed points"):
        assert word in text
    path = tmp_path / "boundary.json"
    js = tiny.to_json(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data == json.loads(js)
    assert len(data["summary"]) == len(tiny.summary())
    back = BoundaryResult.from_dict(data)
    assert back.records == tiny.records and back.config == tiny.config and back.grid == tiny.grid
    assert str(back) == text
    # where the figures come from: the record every results file carries, first in the file
    assert next(iter(data)) == "provenance" and back.provenance == tiny.provenance
    assert (
        data["provenance"]["schema"] == "sk_deq.provenance/1" and data["provenance"]["benchmark"] == "sk-deq boundary"
    )


def test_subset_of_models_and_adam():
    res = where_equivalence_ends(
        sharpness=4,
        dims=3,
        seeds=[2],
        models=["explicit_all", "matched_readout"],
        optimizer="adam",
        explicit_layers=("tanh",),
        **{**SMALL, "max_epochs": 3},
    )
    assert res.config["models"] == ["matched_readout", "explicit_all"]  # table order
    assert [r["model"] for r in res.records] == ["matched_readout", "explicit_all"]
    assert all(r["rms_to_deq_readout"] is None for r in res.records)  # no DEQ to compare with
    one = res.records[1]
    assert one["n_hidden"] == matched_width(3, 8, 1)
    assert abs(one["n_params"] - deq_param_count(3, 8)) <= 3
    assert "DEQ fixed points" not in str(res)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sharpness": []}, "sharpness must hold"),
        ({"sharpness": [0]}, "positive finite"),
        ({"sharpness": [1, 1]}, "distinct"),
        ({"dims": [0]}, "dims must be positive integers"),
        ({"dims": [2.5]}, "dims must be positive integers"),
        ({"seeds": [-1]}, "non-negative"),
        ({"models": ["deq"]}, "unknown model"),
        ({"optimizer": "sgd"}, "optimizer must be one of"),
        ({"n_train": 5}, "n_train must be an integer of at least 10"),
        ({"n_hidden": 0}, "n_hidden must be"),
        ({"n_grid": 1}, "n_grid must be"),
        ({"grid_radius": -1.0}, "grid_radius"),
        ({"explicit_layers": ()}, "explicit_layers"),
        ({"explicit_layers": ("nope",)}, "nope"),
        ({"activation": "nope"}, "nope"),
        ({"n_threads": 0}, "n_threads"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        where_equivalence_ends(**{"sharpness": [1], "dims": [2], "seeds": [0], **kwargs})


def test_fixed_readout_penalty():
    res = where_equivalence_ends(
        sharpness=[2], dims=[2], seeds=[0], models=["deq_readout"], alpha_readout=1e-3, **SMALL
    )
    assert res.config["alpha_readout"] == [1e-3] and res.records[0]["alpha"] == 1e-3
    assert res.records[0]["rms_redrawn_deq"] is None  # no matched network in the run
    assert "alpha 0.001." in str(res)
    with pytest.raises(ValueError, match="alpha_readout"):
        where_equivalence_ends(sharpness=[2], dims=[2], seeds=[0], alpha_readout=[])
    with pytest.raises(ValueError, match="alpha_readout"):
        where_equivalence_ends(sharpness=[2], dims=[2], seeds=[0], alpha_readout=-1.0)


def test_a_diverging_fit_is_recorded_not_raised(monkeypatch):
    """Training can move a DEQ out of its contraction region; the run records that fit as failed and goes on."""
    from sk_deq import DEQRegressor
    from sk_deq.nn import DEQDivergenceError

    fit = DEQRegressor.fit

    def diverging_fit(self, X, y, **kwargs):
        if self.trainable == "all" and self.random_state == 1:
            raise DEQDivergenceError("diverged (test)")
        return fit(self, X, y, **kwargs)

    monkeypatch.setattr(DEQRegressor, "fit", diverging_fit)
    res = where_equivalence_ends(
        sharpness=[2], dims=[2], seeds=[0, 1], models=["deq_all", "explicit_all"], **{**SMALL, "max_epochs": 3}
    )
    bad = [r for r in res.records if r["error"]]
    assert len(bad) == 1 and bad[0]["seed"] == 1 and bad[0]["model"] == "deq_all"
    assert bad[0]["linf"] is None and bad[0]["n_params"] == deq_param_count(2, 8)
    row = next(r for r in res.summary() if r["model"] == "deq_all")
    assert row["n_seeds"] == 1 and row["n_failed"] == 1 and math.isfinite(row["linf_mean"])
    text = str(res)
    assert "1 fit(s) stopped with an error" in text and "diverged (test)" in text and "*" in text
    back = BoundaryResult.from_dict(json.loads(res.to_json()))
    assert back.summary() == res.summary()


def test_progress_display():
    out = io.StringIO()
    where_equivalence_ends(
        sharpness=[1], dims=[2], seeds=[0], models=["matched_readout"], progress=True, stream=out, **SMALL
    )
    assert "done" in out.getvalue()


def test_plot(tiny):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plot_where_equivalence_ends(tiny, title="tiny")
    assert len(fig.axes) == 3 * 2
    fig2 = plot_where_equivalence_ends(json.loads(tiny.to_json()), show_profiles=False)
    assert len(fig2.axes) == 2 * 2
    _, axes = plt.subplots(2, 2)
    assert plot_where_equivalence_ends(tiny, show_profiles=False, axes=axes) is axes[0, 0].figure
    with pytest.raises(TypeError, match="BoundaryResult"):
        plot_where_equivalence_ends({"records": []})
    empty = BoundaryResult(config=tiny.config, environment={}, grid=tiny.grid)
    with pytest.raises(ValueError, match="no measurements"):
        plot_where_equivalence_ends(empty)
    plt.close("all")


def test_the_example_runs_the_small_version():
    """The gallery example spells out the settings of ``sk-deq boundary --quick``: the same ones."""
    import ast
    from pathlib import Path

    from sk_deq.experiments._boundary import QUICK

    source = (Path(__file__).resolve().parents[2] / "examples" / "plot_where_equivalence_ends.py").read_text()
    call = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "where_equivalence_ends"
    )
    assert {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords} == QUICK
