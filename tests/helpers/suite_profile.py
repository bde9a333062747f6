"""Where the suite's CPU goes: a pytest plugin that records each test's CPU and its process.

    ./dev.sh test -p helpers.suite_profile          (writes into $TURBOLOADER_SUITE_PROFILE,
                                                     default /tmp/turboloader-suite-profile)
    python tests/helpers/suite_profile.py DIR [N]   (the summary: each process's span and
                                                     busy time, the N costliest tests, modules)

Each pytest process (each xdist worker) writes one JSON line per test: its node id (with
xdist's ``@group`` suffix), wall start and end, the process's own CPU (``RUSAGE_SELF``: every
thread) and its children's (``RUSAGE_CHILDREN``) over setup, call and teardown. A child's CPU
is counted when it is waited for, so a server a session fixture started lands on the test
during whose teardown it exits. CPU seconds are the figure to compare on a shared machine;
wall time there is the machine's load. Nothing here changes what a test does.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time

import pytest

_OUT = os.environ.get("TURBOLOADER_SUITE_PROFILE", "/tmp/turboloader-suite-profile")
_file = None


def _cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _write(record):
    _file.write(json.dumps(record) + "\n")


def pytest_configure(config):
    global _file
    os.makedirs(_OUT, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _file = open(os.path.join(_OUT, f"{worker}.jsonl"), "a", buffering=1)
    own, kids = _cpu()
    _write({"event": "start", "t": time.time(), "self": own, "child": kids})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, (own0, kids0) = time.time(), _cpu()
    yield
    t1, (own1, kids1) = time.time(), _cpu()
    _write({"id": item.nodeid, "t0": t0, "t1": t1, "self": own1 - own0, "child": kids1 - kids0})


def pytest_unconfigure(config):
    if _file is not None:
        own, kids = _cpu()
        _write({"event": "end", "t": time.time(), "self": own, "child": kids})
        _file.close()


def summary(folder: str, top: int = 40) -> None:
    tests = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".jsonl") or name == "main.jsonl":
            continue
        rows = [json.loads(line) for line in open(os.path.join(folder, name))]
        start = next(r for r in rows if r.get("event") == "start")
        end = next((r for r in rows if r.get("event") == "end"), None)
        mine = [dict(r, w=name[:-6]) for r in rows if "id" in r]
        if not mine:
            continue
        print(f"{name[:-6]}: {len(mine)} tests, first at {mine[0]['t0'] - start['t']:.1f} s "
              f"(import and collection), last ends at {mine[-1]['t1'] - start['t']:.1f} s, "
              f"CPU in tests {sum(r['self'] for r in mine):.1f} own + "
              f"{sum(r['child'] for r in mine):.1f} children"
              + (f"; whole process {end['self']:.1f} + {end['child']:.1f}" if end else ""))
        tests += mine
    ends = collections.defaultdict(float)
    for r in tests:
        ends[r["w"]] = max(ends[r["w"]], r["t1"])
    if len(ends) > 1:
        print(f"the processes' last tests end {max(ends.values()) - min(ends.values()):.1f} s apart")
    print(f"\n{top} costliest tests (CPU s: own + children, wall s, process):")
    for r in sorted(tests, key=lambda r: -(r["self"] + r["child"]))[:top]:
        print(f"{r['self'] + r['child']:7.1f} = {r['self']:6.1f} + {r['child']:6.1f} "
              f"{r['t1'] - r['t0']:7.1f} {r['w']} {r['id']}")
    modules = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in tests:
        m = modules[r["id"].partition("::")[0]]
        m[0] += r["self"]
        m[1] += r["child"]
        m[2] += 1
    print(f"\n{top} costliest modules (CPU s: own + children, tests):")
    for name, (own, kids, n) in sorted(modules.items(), key=lambda kv: -sum(kv[1][:2]))[:top]:
        print(f"{own + kids:7.1f} = {own:6.1f} + {kids:6.1f} {n:5d} {name}")


if __name__ == "__main__":
    summary(sys.argv[1] if len(sys.argv) > 1 else _OUT, int(sys.argv[2]) if len(sys.argv) > 2 else 40)
