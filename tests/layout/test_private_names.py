"""No private name crosses a room: what one room (``turboloader.io``, ``.decode``,
``.transforms``, ``.data``, ``.loader``, ...) needs from another is public in its home.

Counted over the AST of every module: ``from turboloader.<room>.<module> import <name>`` from
another room, where the module path has a private part (``_plan``) or the name is private
(``_decode_array``). The compiled extensions (``turboloader._native``) are the floor every room
stands on and are not counted. The crossings still left are listed below, to remove one by one
(making the name public in its home); a new one fails.
"""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "turboloader"

# the crossings left when this test came (issue 41), each to make public in its home
KNOWN = {
    "turboloader -> turboloader._version.__version__",
    "turboloader.data.buckets -> turboloader.transforms._geometry.RandomResizedCrop",
    "turboloader.data.buckets -> turboloader.transforms._geometry._setup_size",
    "turboloader.data.cache -> turboloader.decode.image._decode_array",
    "turboloader.data.cache -> turboloader.decode.image._decode_rgb",
    "turboloader.data.cache -> turboloader.transforms._random.using_rng",
    "turboloader.data.fields -> turboloader.transforms._containers.Compose",
    "turboloader.data.fields -> turboloader.transforms._containers.RandomApply",
    "turboloader.data.fields -> turboloader.transforms._containers.RandomChoice",
    "turboloader.data.fields -> turboloader.transforms._containers.RandomOrder",
    "turboloader.data.fields -> turboloader.transforms._random.using_rng",
    "turboloader.data.fields -> turboloader.transforms._transform.Transform",
    "turboloader.data.fields -> turboloader.decode._mask.png_mask_header",
    "turboloader.data.fields -> turboloader.decode._mask.png_masks_nearest",
    "turboloader.data.fields -> turboloader.transforms._annotations.boxes_batch",
    "turboloader.data.fields -> turboloader.transforms._annotations.nearest_maps",
    "turboloader.data.reader -> turboloader.transforms._plan._warn_unfused",
    "turboloader.data.step -> turboloader.transforms._random.sample_key",
    "turboloader.data.step -> turboloader.transforms._random.sample_keys",
    "turboloader.data.step -> turboloader.transforms._random.sample_rng",
    "turboloader.data.tar_reader -> turboloader.io.shards._FIELDS_HINT",
    "turboloader.data.video -> turboloader.transforms._random.SampleRandom",
    "turboloader.data.video -> turboloader.transforms._random.using_rng",
    "turboloader.loader._dataloader -> turboloader.data._buffers.BufferPool",
    "turboloader.loader._dataloader -> turboloader.data._buffers.env_budget",
    "turboloader.loader._dataloader -> turboloader.data._buffers.workers_exited",
    "turboloader.prefetch -> turboloader.data._buffers.BufferPool",
    "turboloader.tools.cli -> turboloader._version.__version__",
    "turboloader.tools.demo -> turboloader._version.__version__",
    "turboloader.tools.manifests -> turboloader.io.shards._shard_set_file",
}


def _room(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def private_crossings():
    """``{"importer -> module.name"}`` of every private name imported across rooms."""
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        me = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.startswith("turboloader."):
                if _room(node.module) in (_room(me), "_native"):
                    continue
                private_module = any(p.startswith("_") for p in node.module.split(".")[2:])
                for alias in node.names:
                    if private_module or alias.name.startswith("_"):
                        found.add(f"{me} -> {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    t = alias.name
                    if t.startswith("turboloader.") and _room(t) not in (_room(me), "_native") \
                            and any(p.startswith("_") for p in t.split(".")[2:]):
                        found.add(f"{me} -> {t}")
    return found


def test_the_count_sees_crossings():
    # a parser that finds nothing cannot fail: the known ones are found
    assert "turboloader.data.cache -> turboloader.decode.image._decode_array" in \
        private_crossings() or not (PKG / "data" / "cache.py").read_text().count("_decode_array")


def test_no_new_private_name_crosses_a_room():
    new = sorted(private_crossings() - KNOWN)
    assert not new, ("private names imported from another room (make them public in their "
                     "home, listed in its __all__):\n" + "\n".join(new))


def test_the_list_of_known_crossings_only_shrinks():
    # a crossing removed from the code is removed from KNOWN too, so none comes back quietly
    gone = sorted(KNOWN - private_crossings())
    assert not gone, "remove from KNOWN:\n" + "\n".join(gone)
