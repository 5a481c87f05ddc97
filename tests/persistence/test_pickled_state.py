"""The names each class pickles, pinned per version in ``pickled_state_manifest.json``.

A pickle loads well only where the names it holds are the names the class reads.  When the fitted state of a
class changes (an attribute added, renamed or removed), this test fails until the version is bumped
(``sk_deq.__version__``), the changelog names the classes whose earlier pickles break, and the manifest is
written again for the new version::

    python -m tests.persistence.test_pickled_state --write
"""

import json
import sys
import warnings
from pathlib import Path

import numpy as np

import sk_deq
from sk_deq._persistence import VERSION_KEY

MANIFEST = Path(__file__).with_name("pickled_state_manifest.json")


def fitted() -> dict:
    """One small fitted object of every class that pickles its version, by class name (the kernel as built)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    y, t = np.arange(30) % 2, X[:, 0]
    objects = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter=3 stops early
        for name in ("DEQClassifier", "ExplicitClassifier", "MatchedExplicitClassifier"):
            objects[name] = getattr(sk_deq, name)(n_hidden=4, max_iter=3, random_state=0).fit(X, y)
        for name in ("DEQRegressor", "ExplicitRegressor", "MatchedExplicitRegressor"):
            objects[name] = getattr(sk_deq, name)(n_hidden=4, random_state=0).fit(X, t)
    objects["ImplicitCKTransformer"] = sk_deq.ImplicitCKTransformer().fit(X)
    objects["ImplicitCKNystroem"] = sk_deq.ImplicitCKNystroem(n_components=5, random_state=0).fit(X)
    objects["ImplicitCKKernel"] = sk_deq.ImplicitCKKernel()
    objects["ImplicitCKRidge"] = sk_deq.ImplicitCKRidge().fit(X, t)
    objects["ImplicitCKRidgeClassifier"] = sk_deq.ImplicitCKRidgeClassifier().fit(X, y)
    return objects


def pickled_names(obj) -> list:
    return sorted(set(obj.__getstate__()) - {VERSION_KEY})


def _write() -> None:
    classes = {name: pickled_names(obj) for name, obj in fitted().items()}
    lines = [f'  "{name}": {json.dumps(names)}' for name, names in sorted(classes.items())]
    MANIFEST.write_text(
        "{\n"
        f' "version": "{sk_deq.__version__}",\n'
        ' "about": "The names each class pickles at this version (tests/persistence/test_pickled_state.py).",\n'
        ' "classes": {\n' + ",\n".join(lines) + "\n }\n}\n"
    )


def test_the_pickled_state_of_every_class_is_the_one_pinned_for_this_version():
    manifest = json.loads(MANIFEST.read_text())
    version = sk_deq.__version__
    rewrite = "write the manifest again: python -m tests.persistence.test_pickled_state --write"
    assert manifest["version"] == version, (
        f"sk_deq.__version__ is {version}, and the manifest pins the pickled state of {manifest['version']}: {rewrite}."
    )
    objects = fitted()
    assert sorted(objects) == sorted(manifest["classes"]), f"the classes changed: {rewrite}."
    changed = []
    for name, obj in objects.items():
        now, pinned = set(pickled_names(obj)), set(manifest["classes"][name])
        if now != pinned:
            changed.append(f"{name} (added {sorted(now - pinned)}, removed {sorted(pinned - now)})")
    assert not changed, (
        f"The pickled state changed while sk_deq.__version__ stayed {version}: {'; '.join(changed)}. Pickles of "
        f"{version} written before this change may not load: bump sk_deq.__version__, add a line to CHANGELOG.md "
        f"naming the classes whose earlier pickles break, and {rewrite}."
    )


def test_the_changelog_names_the_version():
    changelog = (Path(sk_deq.__file__).parents[1] / "CHANGELOG.md").read_text()
    assert f"`sk_deq.__version__` is {sk_deq.__version__}" in changelog


if __name__ == "__main__" and "--write" in sys.argv:
    _write()
    print(f"wrote {MANIFEST}")
