"""The package's import graph: acyclic and layered, data flowing downward.

shard -> bytes -> decode -> transform -> batch -> device:

    base (errors, _native, _version, _lazy) < io < decode < transforms < data < loader < prefetch
    < compat, lightning (adapters over the chain) < tools < the package's front door

Every import counts, including deferred ones inside functions and the module names of the
lazy ``_LAZY`` tables the packages resolve with importlib. A module may import only its own
layer's group or lower layers; nothing in the package imports a deprecated alias.
"""

import pytest

from helpers.graph import ALIASES, GRAPH

# (module prefix, layer): the longest matching prefix wins
LAYERS = [
    ("turboloader.errors", 0),
    ("turboloader._version", 0),
    ("turboloader._lazy", 0),
    ("turboloader._deprecated", 9),  # the old paths' hook: installed by the front door
    ("turboloader._native", 0),
    ("turboloader.io", 1),
    ("turboloader.decode", 2),
    ("turboloader.transforms", 3),
    ("turboloader.data", 4),
    ("turboloader.loader", 5),
    ("turboloader.prefetch", 6),
    ("turboloader.compat", 7),
    ("turboloader.lightning", 7),
    ("turboloader.tools", 8),
    ("turboloader.__main__", 9),
    ("turboloader", 9),
]


def _layer(module):
    best = max((p for p, _ in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return dict(LAYERS)[best], best


def test_the_graph_is_not_trivial():
    # the parser sees the imports it must: a test that finds no edge cannot fail
    assert "turboloader.io.tar" in GRAPH["turboloader.data.tar_dataset"] or \
        "turboloader.io.shards" in GRAPH["turboloader.data.tar_dataset"]
    assert "turboloader.decode._slot" in GRAPH["turboloader.transforms._plan"]
    assert "turboloader.compat" in GRAPH["turboloader"]  # a _LAZY table entry
    assert "turboloader.io.tar" in GRAPH["turboloader.io.shards"]  # a deferred import


def test_no_import_cycle():
    # depth-first search with colours; report one cycle in full
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(GRAPH.get(m, ())):
            if state.get(n) == "open":
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_data_flows_downward():
    wrong = []
    for m, targets in sorted(GRAPH.items()):
        layer, group = _layer(m)
        for t in sorted(targets):
            if t in ALIASES:
                wrong.append(f"{m} imports the deprecated alias {t}")
                continue
            t_layer, t_group = _layer(t)
            # same layer: only inside one group (the front door is one group)
            if t_layer > layer or (t_layer == layer and t_group != group and layer != 9):
                wrong.append(f"{m} (layer {layer}) imports {t} (layer {t_layer})")
    assert not wrong, "\n".join(wrong)


def test_io_needs_nothing_above_it():
    # the readers stay importable without the decoders, the transforms, torch or datasets
    for m, targets in GRAPH.items():
        if m.startswith("turboloader.io"):
            assert all(_layer(t)[0] <= 1 for t in targets), (m, targets)
