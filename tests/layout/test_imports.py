"""The package's import graph: acyclic and layered, data flowing downward.

shard -> bytes -> decode -> transform -> batch -> device:

    base (errors, _native, _version, _lazy, _exit) < io < decode < transforms < data < loader < prefetch
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
    ("turboloader._exit", 0),
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
    assert "turboloader.decode.executor" in GRAPH["turboloader.transforms._plan"]
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


# -- the walk of one sample, at run time -----------------------------------------------------

# TarDataset to a batch, module by module: each step reaches the next module through the
# imports and goes down the floors or stays on one (docs/architecture.md, "The walk of a
# sample"); the loader above holds the dataset as an object, without importing it
WALK = [
    "turboloader.data.tar_dataset",
    "turboloader.data.reader",
    "turboloader.data.step",
    "turboloader.transforms._plan",
    "turboloader.transforms._batch",
    "turboloader.transforms._geometry",
    "turboloader.transforms._draws",
    "turboloader.transforms._random",
]
# the step calls the executor itself: read_sizes -> plan.draw -> plan_slots -> run_batch
DECODE_WALK = ["turboloader.data.step", "turboloader.decode.executor",
               "turboloader.decode._window"]


@pytest.mark.parametrize("walk", [WALK, DECODE_WALK], ids=["draws", "decode"])
def test_the_documented_walk_is_downward_import_edges(walk):
    for a, b in zip(walk, walk[1:]):
        seen, todo = set(), [a]
        while todo:   # what a reaches through imports
            m = todo.pop()
            for t in GRAPH.get(m, ()):
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        assert b in seen, f"{a} does not reach {b}"
        assert _layer(b)[0] <= _layer(a)[0], (a, b)


def _floor_of_frame(frame):
    name = frame.f_globals.get("__name__", "")
    if name == "turboloader" or name.startswith("turboloader."):
        return _layer(name)[0], name
    return None


@pytest.mark.parametrize("batched", [True, False], ids=["batch-path", "per-sample"])
def test_a_sample_walks_down_the_floors(tmp_path, batched):
    """Run TarDataset batches through the DataLoader and watch every call between two
    turboloader functions: the callee is never on a higher floor than its caller (no
    callback into a floor the walk left). Imports (module bodies) and finalizers are
    not steps of the walk."""
    import sys
    import threading

    from helpers.shards import write_shards

    from turboloader import transforms as T
    from turboloader.data import TarDataset
    from turboloader.loader import DataLoader

    paths = write_shards(tmp_path, [6, 5])
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                    T.ColorJitter(0.2, 0.2), T.ToTensor()])
    ds = TarDataset(paths, tf, shuffle=False)
    up, seen = set(), set()

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_name in ("<module>", "__del__"):
            return
        callee = _floor_of_frame(frame)
        caller = frame.f_back and _floor_of_frame(frame.f_back)
        if callee:
            seen.add(callee[1])
        if callee and caller and callee[0] > caller[0]:
            up.add(f"{caller[1]} -> {callee[1]}.{frame.f_code.co_name}")

    # the thread backend reads batches (__getitems__ / the batch path); iterating the
    # dataset reads sample by sample (Plan.from_jpeg)
    loader = DataLoader(ds, batch_size=4, num_workers=0) if batched else ds
    threading.setprofile(profile)   # the thread backend's threads too
    sys.setprofile(profile)
    try:
        n = sum(len(b[0]) if batched else 1 for b in loader)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert n == 11
    # the walk was watched all the way down (a test that sees nothing cannot fail)
    assert {"turboloader.data.tar_dataset", "turboloader.data.reader",
            "turboloader.transforms._draws", "turboloader.decode.executor"} <= seen, seen
    new = up - PROTOCOL_HOOKS
    assert not new, "calls up the floors:\n" + "\n".join(sorted(new))


# The thread backend's hooks (turboloader/loader/protocol.py): the loader hands the dataset
# its buffer allocator and its timing sink as objects, and the dataset calls them. These are
# the only calls up the floors; making them values the dataset returns instead would close
# the list (docs/architecture.md, "The walk of a sample").
PROTOCOL_HOOKS = {
    "turboloader.data._buffers -> turboloader.loader._iterable.give_up",
    "turboloader.data.step -> turboloader.loader.stats.timing",
    "turboloader.data.stream -> turboloader.loader._iterable.alloc",
    "turboloader.data.tar_reader -> turboloader.loader.stats.timing",
}
