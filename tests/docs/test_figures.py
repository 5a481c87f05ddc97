"""Measured figures reach the README and the docs only from results files (``docs/_ext/figures``)."""

import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest

figures = pytest.importorskip("figures")  # docs/_ext, put on the path by this folder's conftest

from figures import FigureError, load, lookup, parse_table, parse_value  # noqa: E402
from figures._spec import named_tables  # noqa: E402
from figures import _load  # noqa: E402
from figures.audit import typed_figures  # noqa: E402
from figures.readme import render_readme  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: the docs' own pages (sphinx-gallery writes sg_execution_times.rst, ignored by git, at each build)
DOCS = sorted(p for p in (ROOT / "docs").glob("*.rst") if p.name != "sg_execution_times.rst")
PAGES = [ROOT / "README.md", *DOCS]

#: figures that match the pattern of a measurement but are none: (file, the text around it, why)
NOT_MEASURED = [
    ("benchmarks.rst", "ridge --only defaults", "a command line: the ridges it tries"),
    ("cli.rst", "--tol 0.05|none", "a default tolerance of the command"),
    ("cli.rst", "below 0.05", "the significance level the table marks"),
    ("install.rst", "Python 3.10", "a version"),
    (
        "user_guide.rst",
        "the largest 1 % of the training rows",
        "a threshold of the outlier warning (tests/test_scaling_outliers.py)",
    ),
    (
        "user_guide.rst",
        "spread less than 1 % of it",
        "a threshold of the outlier warning (tests/test_scaling_outliers.py)",
    ),
    ("install.rst", "more than 30 s of CPU time", "the default limit of SK_DEQ_EXAMPLE_LIMIT_S, a setting"),
    (
        "user_guide.rst",
        "0.01 for a regressor's",
        "the step size learning_rate_init='auto' takes for a regressor's readout, a default; "
        "tests/estimators/test_partial_fit.py::test_auto_learning_rate_is_large_for_the_readout_alone_and_small_for_hidden_weights",
    ),
    (
        "user_guide.rst",
        "0.1 (classifiers) or 0.01 (regressors)",
        "the same default step sizes, checked by the same test",
    ),
    (
        "user_guide.rst",
        "``--learning-rates 0.001 0.01 0.1 0.3``",
        "the step sizes a benchmark's command sweeps, settings",
    ),
    ("user_guide.rst", "0.9, 0.999 and 1e-8", "torch's Adam defaults (betas and eps), settings"),
    ("user_guide.rst", "``match_tol`` (0.05)", "the default of match_tol, a setting"),
    (
        "user_guide.rst",
        "compares ``p`` with ``alpha`` (0.05)",
        "the default significance level of compare_estimators, a setting",
    ),
    (
        "theory.rst",
        "closest to plain: distance 0.363",
        "computed: the distance of the chosen ReLU root to plain, "
        "tests/matching/test_match.py::test_the_relu_roots_the_theory_page_quotes",
    ),
    ("theory.rst", "(0.381)", "computed: the other root's distance, checked by the same test"),
    ("theory.rst", "are 1.4–2.5 %", "computed: the nearby non-root's residuals, checked by the same test"),
    (
        "kernel_ridge.rst",
        "an 80 GB card (80",
        "a card's size, the input of the rows it holds, computed from the memory plan: "
        "tests/kernel_ridge/test_device.py::test_what_a_card_holds_on_the_page_is_the_plan_s",
    ),
]


def _allowed(page: Path, line: str) -> bool:
    return any(page.name == f and text in line for f, text, _ in NOT_MEASURED)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_measured_figure_is_typed_by_hand(page):
    typed = [(no, fig, line) for no, fig, line in typed_figures(page) if not _allowed(page, line)]
    assert not typed, (
        f"{page.name}: measured-looking figures typed by hand (render them from a results file with the "
        "results-table directive or the result role, see docs/_ext/figures; or, if one is no measurement, "
        "add it to NOT_MEASURED with the reason):\n"
        + "\n".join(f"  line {no}: {fig!r} in {line!r}" for no, fig, line in typed[:40])
    )


def test_not_measured_entries_are_used():
    """Every exception of NOT_MEASURED still matches a line (no stale permission)."""
    for name, text, _ in NOT_MEASURED:
        page = next(p for p in PAGES if p.name == name)
        assert text in page.read_text(encoding="utf-8"), f"{name}: {text!r} is no longer there; drop it"


def test_readme_figures_are_those_of_their_files():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert render_readme(text) == text, "README.md differs from its results files: run `python docs/_ext/figures`"


_DIRECTIVE = re.compile(r"^([ \t]*)\.\. results-table:: (.+)\n((?:\1[ \t]+:.*\n|\1[ \t]{4,}.*\n)*)", re.M)
_ROLE = re.compile(r":result:`([^`]+)`")


def _declared(page):
    text = page.read_text(encoding="utf-8")
    tables = [(m.group(2), m.group(3).splitlines()) for m in _DIRECTIVE.finditer(text)]
    values = [m.group(1) for m in _ROLE.finditer(text)]
    return tables, values


def test_the_declarations_are_found_with_their_options(tmp_path):
    """A directive after a paragraph (a blank line above it) keeps its options; so does a nested one."""
    page = tmp_path / "p.rst"
    page.write_text(
        "Text.\n\n.. results-table:: a.json\n   :rows: records\n   :columns:\n      act: {act}\n\n"
        "- item\n\n  .. results-table:: b.json\n     :columns:\n        r: {ratio}\n\nMore :result:`b.json:x`.\n"
    )
    tables, values = _declared(page)
    assert tables == [
        ("a.json", ["   :rows: records", "   :columns:", "      act: {act}"]),
        ("b.json", ["     :columns:", "        r: {ratio}"]),
    ]
    assert values == ["b.json:x"]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_figure_of_the_docs_renders(page):
    """Each table and value has its results file, with provenance, and selects what it names."""
    tables, values = _declared(page)
    for arg, lines in tables:
        table = parse_table(arg, lines).render()
        assert table.rows and all(len(r) == len(table.header) for r in table.rows)
        assert all(p.commit and p.date and p.machine and p.command for p in table.sources)
    for spec in values:
        assert parse_value(spec).text


def test_the_table_with_the_exact_kernel_is_the_readme_table_and_one_column():
    """The README's accuracy table as its files render it, with the column of the exact kernel (a dash without)."""
    plain = parse_table("accuracy-width-1024", []).render()
    exact = parse_table("accuracy-width-1024-exact-kernel", []).render()
    assert exact.header == [*plain.header, "exact kernel %"]
    assert [row[:-1] for row in exact.rows] == plain.rows and exact.sources == plain.sources


def test_every_provenance_sidecar_has_its_file():
    for side in _load.RESULTS.glob("*.provenance.json"):
        data = side.with_name(side.name.replace(".provenance.json", ".json"))
        assert data.is_file(), f"{side.name} describes no results file"
        assert "provenance" not in json.loads(data.read_text()), f"{data.name} has its own provenance"


# ------------------------------------------------------------------------- the mechanism


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A results folder of two files: one with its own provenance, one with a sidecar."""
    res = tmp_path / "benchmarks" / "results"
    res.mkdir(parents=True)
    prov = {
        "schema": "sk_deq.provenance/1",
        "created_utc": "2026-01-02T03:04:05+00:00",
        "command": "bench.py --repeats 3",
        "git": {"commit": "0123456789abcdef", "clean": True},
        "machine": {"cpu_model": "Intel(R) Xeon(R) Processor", "cpus_usable": 2, "memory_gib": 23.5, "gpu": None},
        "benchmark": "kernels.cores",
    }
    rows = [
        {"act": "relu", "n": 1000, "s": 1.234, "models": {"deq": {"acc": 0.9312}}},
        {"act": "tanh", "n": 2000, "s": 2.5},
    ]
    (res / "a.json").write_text(json.dumps({"provenance": prov, "records": rows}))
    (res / "b.json").write_text(json.dumps({"summary": {"ratio": 3.14159}}))
    (res / "b.provenance.json").write_text(json.dumps({**prov, "git": {"commit": "fedcba9876543210", "clean": False}}))
    (res / "c.json").write_text(json.dumps({"x": 1}))
    monkeypatch.setattr(_load, "RESULTS", res)
    monkeypatch.setattr(_load, "ROOT", tmp_path)
    load.cache_clear()
    yield res
    load.cache_clear()


def test_provenance_from_the_file_or_its_sidecar(results):
    a, b = load("a.json").provenance, load("b.json").provenance
    assert (a.file, a.commit, a.date, a.benchmark) == (
        "benchmarks/results/a.json",
        "0123456",
        "2026-01-02",
        "kernels.cores",
    )
    assert a.machine == "2 cores of an Intel Xeon, 24 GiB"
    assert b.commit == "fedcba9 (with uncommitted changes)"
    with pytest.raises(FigureError, match="records no provenance"):
        load("c.json")
    with pytest.raises(FigureError, match="no results file"):
        load("missing.json")


def test_lookup_selects_one_row_or_says_why(results):
    data = load("a.json").data
    assert lookup(data, "records[act=tanh].s") == 2.5
    assert lookup(data, "records[1].n") == 2000
    assert lookup(data, "records[act=relu,n=1000].models.deq.acc") == 0.9312
    with pytest.raises(FigureError, match="matches 0 rows"):
        lookup(data, "records[act=gelu].s")
    with pytest.raises(FigureError, match="no 'nope'"):
        lookup(data, "records[0].nope")
    with pytest.raises(FigureError, match="matches 2 rows"):
        lookup({"r": [{"a": 1}, {"a": 1}]}, "r[a=1]")
    assert lookup({"r": [{"x": 0.2, "y": 5}]}, "r[x=0.2].y") == 5  # a dot inside brackets is no separator


def test_a_table_renders_its_rows_with_their_sources(results):
    spec = parse_table(
        "a.json",
        [
            ":rows: records",
            ":where: act=relu",
            ":columns:",
            "   act: {act}",
            "   acc %: {100*get('models.deq.acc'):.2f}",
            "   at: {commit} {date}",
        ],
    )
    table = spec.render()
    assert table.header == ["act", "acc %", "at"] and table.rows == [["relu", "93.12", "0123456 2026-01-02"]]
    assert [p.file for p in table.sources] == ["benchmarks/results/a.json"]
    with pytest.raises(FigureError, match="no rows"):
        parse_table("a.json", [":rows: records", ":where: act=gelu", ":columns:", "   act: {act}"]).render()
    with pytest.raises(FigureError, match="header: template"):
        parse_table("a.json", [":rows: records", ":columns:", "   {act}"])
    with pytest.raises(FigureError, match="no table"):
        parse_table("no-such-table", [])


def test_a_table_without_rows_has_one_row_per_file(results):
    """A table across runs: each file is a row, its commit and date beside what its templates pick."""
    table = parse_table(
        "a.json b.json",
        [":columns:", "   at: {commit} {date}", "   n: {len(top('records') if 'records' in row else [])}"],
    ).render()
    assert table.rows == [["0123456 2026-01-02", "2"], ["fedcba9 (with uncommitted changes) 2026-01-02", "0"]]
    assert [p.file for p in table.sources] == ["benchmarks/results/a.json", "benchmarks/results/b.json"]


def test_a_value_renders_with_its_source(results):
    v = parse_value("b.json:summary.ratio|{v:.1f}×")
    assert v.text == "3.1×" and v.source.file == "benchmarks/results/b.json"
    assert parse_value("a.json:records[act=tanh].n|{v:,}").text == "2,000"
    with pytest.raises(FigureError, match="template"):
        parse_value("b.json:summary.ratio|{open('x')}")  # nothing but the listed functions in scope


def test_a_template_reads_a_path_that_may_be_absent(results):
    spec = parse_table(
        "a.json",
        [":rows: records", ":columns:", "   acc: {get('models.deq.acc', '–')}", "   r: {top('ratio', 0)}"],
    )
    assert spec.render().rows == [["0.9312", "0"], ["–", "0"]]
    with pytest.raises(FigureError, match="no 'models'"):  # without a default, the path must be there
        parse_table("a.json", [":rows: records", ":columns:", "   acc: {get('models.deq.acc')}"]).render()


def _compare_file(path, exact: bool):
    """A results file of sk-deq compare (CompareResult's JSON) at width 1024, with or without its exact kernel."""
    from sk_deq.experiments import CompareResult

    prov = {"created_utc": "2026-01-02T03:04:05+00:00", "command": "sk-deq compare", "commit": "0123456789"}
    prov["machine"] = "a test"
    config = {"datasets": ["toy", "fixed"], "activations": ["relu", "tanh"], "widths": [1024], "repeats": 2}
    config.update(trainable="readout", exact_kernel="feature" if exact else None)
    datasets = {
        name: {"n_train": 1200, "n_test": 300, "split": split}
        for name, split in (("toy", "random"), ("fixed", "fixed"))
    }
    res = CompareResult(config, {}, datasets, provenance=prov)
    for dataset in config["datasets"]:
        for act, base in (("relu", 0.90), ("tanh", 0.80)):
            for r in (0, 1):
                for k, model in enumerate(("deq", "matched", "plain")):
                    acc = base - 0.01 * k + 0.002 * r
                    rec = {"dataset": dataset, "activation": act, "width": 1024, "repeat": r, "model": model}
                    res.records.append({**rec, "accuracy": acc, "seconds": 1.0, "warnings": []})
            fits = [[0], [1]] if dataset == "toy" else [[0, 1]]
            for i, repeats in enumerate(fits if exact else []):
                rec = {"dataset": dataset, "activation": act, "repeats": repeats, "kernel": "feature"}
                res.exact_kernel_records.append(
                    {**rec, "accuracy": base + 0.05 + 0.01 * i, "seconds": 9.0, "alpha": 0.01}
                )
    res.to_json(path)


def test_the_exact_kernel_column_renders_from_a_compare_file_that_has_it(results):
    _compare_file(results / "exact.json", True)
    _compare_file(results / "networks.json", False)
    _, lines = named_tables()["accuracy-width-1024-exact-kernel"]
    table = parse_table("exact.json networks.json", lines).render()
    assert table.header[-1] == "exact kernel %"
    column = [row[-1] for row in table.rows]
    # toy: a new split per repeat, two fits (mean ± std); fixed: one fit for both repeats; no exact kernel: a dash
    assert column == ["95.50 ± 0.71", "85.50 ± 0.71", "95.00", "85.00"] + ["–"] * 4
    assert table.rows[0][:3] == ["toy (1,200 / 300)", "readout (L-BFGS)", "relu"]


def test_the_readme_regions_render_and_check(results, tmp_path, capsys):
    from figures.readme import main

    readme = tmp_path / "README.md"
    readme.write_text(
        "Ratio <!-- result b.json:summary.ratio|{v:.2f}× -->old<!-- end result --> here.\n\n"
        "<!-- results-table a.json\n:rows: records\n:columns:\n   act: {act}\n   s: {s:.1f}\n-->\nstale\n"
        "<!-- end results-table -->\n"
    )
    assert main(["--check", "--readme", str(readme)]) == 1
    assert main(["--readme", str(readme)]) == 0
    text = readme.read_text()
    assert '[3.14×](benchmarks/results/b.json "commit fedcba9 (with uncommitted changes), 2026-01-02' in text
    assert "| act | s |\n|---|---|\n| relu | 1.2 |\n| tanh | 2.5 |\n" in text
    assert "Source: [`benchmarks/results/a.json`]" in text and "`bench.py --repeats 3`" in text
    assert main(["--check", "--readme", str(readme)]) == 0
    assert render_readme(text) == text


def test_the_audit_finds_typed_figures_but_not_rendered_ones(tmp_path):
    page = tmp_path / "p.rst"
    page.write_text(
        textwrap.dedent(
            """\
            Fit in 2.3 s, 4× faster; accuracy 93.10 %.

            .. results-table:: a.json
               :columns:
                  s: 9.99 s

            Quoted :result:`a.json:x|1.23 s` and :math:`0.125` are not typed.

            .. math::

               x = 0.125
            """
        )
    )
    assert [(no, fig) for no, fig, _ in typed_figures(page)] == [(1, "2.3 s"), (1, "4×"), (1, "93.10 %")]


def test_sphinx_renders_tables_values_and_their_sources(results, tmp_path):
    """A tiny Sphinx project using the extension: the table, the value and the provenance reach the HTML."""
    sphinx = pytest.importorskip("sphinx.cmd.build")
    src = tmp_path / "docs"
    src.mkdir()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'docs' / '_ext')!r})\nextensions = ['figures']\n"
    )
    (src / "index.rst").write_text(
        "Page\n====\n\n.. results-table:: a.json\n   :rows: records\n   :columns:\n      act: {act}\n      s: {s:.2f} s\n\n"
        "The ratio is :result:`b.json:summary.ratio|{v:.2f}×`.\n\n"
        ".. results-table:: a.json b.json\n   :columns:\n      run: {commit}\n"
    )
    out = tmp_path / "html"
    assert sphinx.build_main(["-q", "-W", "-b", "html", str(src), str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "1.23 s" in html and "2.50 s" in html and "3.14×" in html
    assert "commit <code" in html and "0123456" in html  # the table's source line
    assert "Where the figures quoted on this page come from" in html and "fedcba9" in html
    # a table over two files lists both sources, one item each
    sources = html[html.index("Sources:") : html.index("Where the figures quoted")]
    assert sources.count("<li>") == 2 and "a.json" in sources and "b.json" in sources
    shutil.rmtree(out)
