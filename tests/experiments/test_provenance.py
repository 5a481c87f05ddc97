"""Every results file the experiments write says where its figures come from."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from sk_deq.experiments import compare_widths
from sk_deq.experiments._provenance import SCHEMA, provenance, provenance_line

ROOT = Path(__file__).resolve().parents[2]


def _head():
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def test_the_record_names_the_commit_machine_command_and_writer():
    p = provenance(benchmark="kernels.cores", command="bench.py --quick")
    assert p["schema"] == SCHEMA and p["benchmark"] == "kernels.cores" and p["command"] == "bench.py --quick"
    assert p["git"]["commit"] == _head()  # None outside a checkout, on both sides
    assert p["machine"]["cpu_count"] >= 1 and p["machine"]["cpus_usable"] >= 1
    assert p["created_utc"][:4].isdigit() and p["created_utc"].endswith("+00:00")
    assert p["versions"]["numpy"] == np.__version__
    line = provenance_line(p)
    assert str(p["git"]["commit"]) in line and p["created_utc"] in line


def test_the_default_command_is_this_process():
    p = provenance()
    assert p["command"].split()[0] == Path(sys.argv[0]).name or p["command"].startswith(sys.argv[0])


def test_compare_writes_its_provenance(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((120, 6)), rng.integers(0, 2, 120)
    res = compare_widths([("toy", X, y)], ["relu"], [8], repeats=1, progress=False)
    data = json.loads(res.to_json())
    assert data["provenance"]["benchmark"] == "sk-deq compare"
    assert data["provenance"]["git"]["commit"] == _head()
    assert data["provenance"]["schema"] == SCHEMA


def test_spectrum_sphere_and_demo_write_their_provenance():
    from sk_deq.experiments import demo, spectrum, sphere_spectrum

    runs = {
        "sk-deq spectrum": spectrum(["relu"], sizes=(16,), matched=(), histograms=False),
        "sk-deq spectrum --data sphere": sphere_spectrum(size=(12, 14), sizes=(8,)),
        "sk-deq demo": demo("digits", "relu", 0.2, 16, repeats=1, latency_samples=1),
    }
    for writer, res in runs.items():
        data = json.loads(res.to_json())
        assert data["provenance"]["benchmark"] == writer and data["provenance"]["schema"] == SCHEMA
        assert data["provenance"]["git"]["commit"] == _head()
        assert data["provenance"]["created_utc"] and data["provenance"]["command"]
