"""The rules write the same template as before for every kernel of tests/data/naive and byo.

tests/data/rules_before holds, per kernel and backend, what the rules made of it before their
analyses became one kernel model and their rewrites passes (tests/rules_snapshot.py wrote them):
the diff of every source against the original (what `kerntune templatize` writes as template.diff;
the sources follow from it), the parameters, constraints, launch and notes. A change of behaviour
shows here as the first field that differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rules_snapshot import DATA, OUT, images  # noqa: E402

SNAPSHOTS = sorted(OUT.glob("*.json"))


def test_every_kernel_of_the_library_has_a_before_image():
    assert len(SNAPSHOTS) >= 20


@pytest.mark.parametrize("path", SNAPSHOTS, ids=[p.stem for p in SNAPSHOTS])
def test_the_rules_make_the_same_template_as_before(path):
    group, _, name = path.stem.partition("_")
    before = json.loads(path.read_text())
    now = json.loads(json.dumps(images(DATA / group / name), sort_keys=True))
    for backend in before:
        for key in sorted(before[backend]):
            assert now[backend].get(key) == before[backend][key], f"{backend} {key}"
    assert now.keys() == before.keys()
