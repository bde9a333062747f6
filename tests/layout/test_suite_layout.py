"""The suite's own layout: test modules are imported by basename (``rootdir`` imports, no
``__init__.py`` in the test folders), so two with one name in different folders stop the
whole run with ``import file mismatch`` when one pytest process collects both."""

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_names_are_unique():
    where = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(str(path.relative_to(TESTS)))
    assert len(where) > 100  # the walk sees the suite
    assert not {n: p for n, p in where.items() if len(p) > 1}
