"""Public names: ``__all__`` lists exactly them; no deprecation shims (the package was never
released: old paths and old coordinate orders are gone, not aliased); one meaning of
``max_pixels``; the top-level names and DataLoader; the single decode entry against Pillow."""

import ast
import importlib
import io
import sys
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
from PIL import Image

import turboloader
from turboloader.decode import (
    DEFAULT_MAX_PIXELS,
    decode_image,
    decode_jpeg,
    decode_resized_crop,
    decode_window,
    pick_scale,
    scaled_size,
    window_scale,
)
from turboloader.errors import DecodeError
from turboloader.io import Codec

from helpers.images import jpeg_bytes, png_bytes
from helpers.graph import ALIASES, MODULES


def _public_modules():
    for name, path in sorted(MODULES.items()):
        if path is None or name == "turboloader.__main__":
            continue
        if any(part.startswith("_") for part in name.split(".")[1:]):
            continue
        yield name, path


def _defined_public(path):
    """Public names a module defines itself (functions, classes, assignments)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("name,path", list(_public_modules()), ids=lambda v: str(v))
def test_all_lists_exactly_the_public_names(name, path):
    if name == "turboloader.lightning":
        pytest.importorskip("lightning")
    module = importlib.import_module(name)
    names = module.__all__
    assert len(set(names)) == len(names), f"{name}.__all__ has duplicates"
    missing = _defined_public(path) - set(names)
    assert not missing, f"{name} defines public names not in __all__: {sorted(missing)}"
    private = [n for n in names if n.startswith("_") and n != "__version__"]
    assert not private, f"{name}.__all__ lists private names {private}"
    for n in names:  # every listed name resolves (lazy tables included)
        assert getattr(module, n) is not None


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_old_module_paths_are_gone(old):
    """No shim answers for the paths before the layout: an import fails as for any name."""
    importlib.import_module(ALIASES[old])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)


def test_no_file_is_left_at_an_old_path():
    # the moves are renames (version control carries others' edits across them)
    for old, new in ALIASES.items():
        assert old not in MODULES and new in MODULES, (old, new)


# -- coordinates: torchvision's order, the only one ---------------------------------------


def test_decode_jpeg_window_is_top_left_height_width():
    data = jpeg_bytes(96, 128, seed=3)
    full = decode_jpeg(data)
    got = decode_jpeg(data, window=(10, 20, 30, 40))
    np.testing.assert_array_equal(got, full[10:40, 20:60])
    with pytest.raises(TypeError, match="crop"):
        decode_jpeg(data, crop=(20, 10, 40, 30))   # the old (x, y, width, height) keyword


def test_scale_helpers_take_height_width():
    assert scaled_size((750, 1001), Fraction(3, 8)) == (282, 376)
    assert pick_scale((768, 1024), (224, 200)) == Fraction(1, 2)
    assert pick_scale((768, 1024), (97, 128)) == Fraction(1, 4)  # height is what limits
    assert pick_scale((1024, 768), (97, 128)) == Fraction(1, 4)
    assert window_scale((300, 900), (150, 224)) == 4
    assert window_scale((300, 900), (151, 224)) == 8
    # the old width-first positional forms are no longer accepted
    for call in (lambda: scaled_size(1001, 750, Fraction(3, 8)),
                 lambda: pick_scale(1024, 768, 97, 128),
                 lambda: window_scale(900, 300, 224, 151),
                 lambda: decode_window((10, 20, 310, 320), False, (224, 224), 640, 480,
                                       (0.5, 0.25), 1)):
        with pytest.raises(TypeError):
            call()


# -- decode_image: one codec dispatch --------------------------------------------------------


def test_decode_image_dispatches_on_the_codec():
    data = jpeg_bytes(40, 56, seed=1)
    np.testing.assert_array_equal(decode_image(data), decode_jpeg(data))
    png, pixels = png_bytes(33, 21, seed=2)
    np.testing.assert_array_equal(decode_image(png), pixels)  # Pillow, lossless
    np.testing.assert_array_equal(decode_image(png, codec="png"), pixels)
    raw = decode_image(pixels.tobytes(), codec=Codec.RAW, size=(33, 21))
    np.testing.assert_array_equal(raw, pixels)
    gray = Image.fromarray(pixels[:, :, 0])
    buf = io.BytesIO()
    gray.save(buf, "BMP")  # not a codec of ours: Pillow identifies it
    np.testing.assert_array_equal(decode_image(buf.getvalue()),
                                  np.asarray(gray.convert("RGB")))
    with pytest.raises(ValueError, match="size"):
        decode_image(pixels.tobytes(), codec="raw")
    with pytest.raises(ValueError, match="bytes"):
        decode_image(pixels.tobytes()[:-1], codec="raw", size=(33, 21))
    with pytest.raises(ValueError, match="unknown codec"):
        decode_image(data, codec="gif")
    with pytest.raises(DecodeError):
        decode_image(b"\xff\xd8\xff" + b"junk" * 10)


def test_max_pixels_has_one_meaning():
    data = jpeg_bytes(40, 50, seed=4)
    png, _ = png_bytes(40, 50, seed=5)
    for blob in (data, png):
        with pytest.raises(DecodeError, match="max_pixels"):
            decode_image(blob, max_pixels=1999)
        assert decode_image(blob, max_pixels=2000).shape == (40, 50, 3)
        assert decode_image(blob, max_pixels=None).shape == (40, 50, 3)  # None: no limit
    with pytest.raises(DecodeError, match="max_pixels"):
        decode_resized_crop(data, 0, 0, 40, 50, 8, max_pixels=1999)
    assert decode_resized_crop(data, 0, 0, 40, 50, 8, max_pixels=None).shape == (3, 8, 8)
    from turboloader import transforms as T

    plan = T.plan(T.Compose([T.CenterCrop(8), T.ToImage()]))
    with pytest.raises(DecodeError, match="max_pixels"):
        plan.from_jpeg(data, max_pixels=1999)
    # None: no limit, here as everywhere (no FutureWarning: the package was never released)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plan.from_jpeg(data, max_pixels=None).shape == (3, 8, 8)
    keys = np.zeros(1, np.uint64)
    assert plan.prepare_batch([data], keys, max_pixels=1999).status.tolist() == [2]
    assert plan.prepare_batch([data], keys, max_pixels=None).status.tolist() == [0]
    assert DEFAULT_MAX_PIXELS == 178956970


# -- the top level: the core, and the seed names outside __all__ -----------------------------


def test_top_level_names_the_core_and_no_torchvision_transform_names():
    """``__all__`` / ``dir()`` / ``import *`` of the top level list the core; no name there
    shadows one of torchvision's transforms (the oracle: ``torchvision.transforms.v2``'s own
    names). The seed documents' classes still resolve, as the seeds use them."""
    from torchvision.transforms import v2

    listed = set(turboloader.__all__) | set(dir(turboloader))
    shadowing = sorted(n for n in listed if hasattr(v2, n) and not n.startswith("_"))
    assert not shadowing, shadowing
    for core in ("TarDataset", "ImageFolder", "DataLoader", "transforms", "DecodeError",
                 "decode_image"):
        assert core in turboloader.__all__, core
    namespace = {}
    exec("from turboloader import *", namespace)
    assert "Resize" not in namespace and "TarDataset" in namespace
    from turboloader.compat import seeds

    for name in ("Resize", "Compose", "ToTensor", "CenterCrop", "Pipeline", "TransformConfig"):
        assert getattr(turboloader, name) is getattr(seeds, name)   # the seeds run unchanged
    assert turboloader.transforms.Resize is not turboloader.Resize
    with pytest.raises(TypeError, match=r"turboloader\.transforms\.Resize\(224\)"):
        turboloader.Resize(224)


# -- the top-level DataLoader ------------------------------------------------------------------


def test_dataloader_of_a_dataset_is_a_turboloader_dataloader():
    from turboloader.loader import DataLoader as Core

    loader = turboloader.DataLoader(torch.utils.data.TensorDataset(torch.arange(6)), 4)
    assert isinstance(loader, turboloader.DataLoader) and isinstance(loader, Core)
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5]]


def test_dataloader_of_a_path_is_seed_001s_batch_loader(tmp_path):
    from helpers.shards import labelled_members, write_tar
    from turboloader.compat import SampleBatchLoader

    path = write_tar(tmp_path / "s.tar", labelled_members(range(5)))
    loader = turboloader.DataLoader(str(path), batch_size=2, num_workers=0)
    assert isinstance(loader, SampleBatchLoader)  # documented: a different class
    batches = list(loader)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert sorted(s["label"] for b in batches for s in b) == [0, 1, 2, 3, 4]


def test_sample_rng_is_public():
    from turboloader.transforms import current_rng, sample_rng, using_rng

    assert turboloader.sample_rng is sample_rng
    rng = sample_rng(0, 1, 2)
    with using_rng(rng):
        assert current_rng() is rng
    assert sample_rng(0, 1, 2).random() == sample_rng(0, 1, 2).random()


def test_presets_are_defined_once():
    from turboloader.compat import seeds
    from turboloader.transforms import presets

    assert seeds.IMAGENET_MEAN is presets.IMAGENET_MEAN
    assert seeds.imagenet_train_transform is presets.imagenet_train_transform
    val = presets.imagenet_val_transform(224)
    assert [type(t).__name__ for t in val.transforms] == ["Resize", "CenterCrop", "ToTensor",
                                                        "Normalize"]


def test_no_warning_on_the_new_paths():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = jpeg_bytes(24, 24, seed=0)
        decode_jpeg(data, window=(0, 0, 8, 8))
        pick_scale((24, 24), (8, 8))
        importlib.import_module("turboloader.io.tar")
        importlib.import_module("turboloader.compat.seeds")


def test_the_converter_resizes_through_the_slot_entry_exactly_as_the_functional():
    # the converter's --max-short-side resize now goes through resample_into_slot (CHW uint8
    # slot): bit-identical to transforms.functional.resize, which it used before
    from turboloader.tools.convert import _shrink
    from turboloader.transforms import functional as F

    rng = np.random.default_rng(7)
    for h, w, short in ((97, 211, 40), (300, 120, 64), (64, 64, 63)):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        np.testing.assert_array_equal(_shrink(img, short), F.resize(img, short, "bicubic"))
