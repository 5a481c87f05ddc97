"""Write the pickles of sk_deq 0.1.0 that tests/persistence reads (run once; the files are committed).

0.1.0 is the tree of commit 85d9c87, the last before the changes listed under 0.2.0 in CHANGELOG.md::

    git archive 85d9c87 | tar -x -C /tmp/sk_deq-0.1.0
    PYTHONPATH=/tmp/sk_deq-0.1.0 python tests/persistence/make_v010_pickles.py tests/persistence/pickles_0.1.0

Each object is small (width 4, 30 samples of 3 features); ``outputs.json`` holds what 0.1.0 computed with them
on ``Z`` (4 samples drawn after the training samples from the same seed).
"""

import json
import pickle
import sys
from pathlib import Path


def main(folder: str) -> None:
    import numpy as np

    import sk_deq

    assert sk_deq.__version__ == "0.1.0", sk_deq.__file__
    from sk_deq import DEQClassifier, DEQRegressor, ExplicitClassifier, ImplicitCKKernel

    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(30, 3)), rng.normal(size=(4, 3))
    y = np.arange(30) % 2
    objects = {
        "DEQClassifier": DEQClassifier(n_hidden=4, max_iter=3, random_state=0).fit(X, y),
        "DEQRegressor": DEQRegressor(n_hidden=4, random_state=0).fit(X, X[:, 0]),
        "ExplicitClassifier": ExplicitClassifier(n_hidden=4, max_iter=3, random_state=0).fit(X, y),
        "ImplicitCKKernel": ImplicitCKKernel(),
    }
    outputs = {
        "DEQClassifier": objects["DEQClassifier"].predict_proba(Z).tolist(),
        "ImplicitCKKernel": objects["ImplicitCKKernel"](Z).tolist(),
    }
    out = Path(folder)
    for name, obj in objects.items():
        (out / f"{name}.pkl").write_bytes(pickle.dumps(obj, protocol=4))
    (out / "outputs.json").write_text(json.dumps(outputs, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
