"""torchvision's classification training recipes (references/classification/presets.py,
copied in classification_presets.py with turboloader.transforms in place of torchvision's)
run through turboloader: every ``--auto-augment`` choice, random erasing on and off, the
eval preset. Oracles: the same file built on torchvision v2 under the same torch seed (the
draws are torchvision's own, so the outputs are bit-identical on PIL images), and for the
datasets the fused plan / the generic path on the same decoded image and per-sample
generator. What fuses is what docs/guide/transforms.md says.
"""

import io
import tarfile
import warnings

import classification_presets as P
import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from turboloader import ImageFolder, TarDataset, decode_jpeg
from turboloader import transforms as T
from turboloader.errors import UnfusedWarning
from turboloader.tools.synthetic import synthetic_image
from turboloader.transforms._random import sample_rng, using_rng

AUTO_AUGMENT = [None, "ra", "ta_wide", "augmix", "imagenet", "cifar10", "svhn"]
# what each --auto-augment choice adds to the pipeline (the member that stops fusion)
ADDED = {"ra": "RandAugment", "ta_wide": "TrivialAugmentWide", "augmix": "AugMix",
         "imagenet": "AutoAugment", "cifar10": "AutoAugment", "svhn": "AutoAugment"}
CROP = 56


def _torchvision_presets():
    """The same presets file, built on torchvision.transforms.v2 (the oracle)."""
    path = P.__file__
    with open(path) as f:
        source = f.read()
    adapted = ("from turboloader import transforms as autoaugment, transforms  # adapted: was "
               "from torchvision.transforms import autoaugment, transforms\n")
    assert source.count(adapted) == 1
    ns = {}
    exec(compile(source.replace(adapted, "from torchvision.transforms import v2 as transforms\n"
                                         "autoaugment = transforms\n"), path, "exec"), ns)
    return ns


TV = _torchvision_presets()


def _train(module, aa, erase):
    cls = P.ClassificationPresetTrain if module is P else module["ClassificationPresetTrain"]
    return cls(crop_size=CROP, auto_augment_policy=aa, random_erase_prob=erase)


def _eval(module):
    cls = P.ClassificationPresetEval if module is P else module["ClassificationPresetEval"]
    return cls(crop_size=CROP, resize_size=64)


def _fuses(aa, erase):
    return aa is None and erase == 0


@pytest.fixture(scope="module")
def pil():
    return Image.fromarray(synthetic_image(np.random.default_rng(2), 120, 150))


@pytest.mark.parametrize("erase", [0.0, 0.5])
@pytest.mark.parametrize("aa", AUTO_AUGMENT)
def test_train_preset_on_pil_is_torchvision_v2(pil, aa, erase):
    ours, theirs = _train(P, aa, erase), _train(TV, aa, erase)
    for seed in range(6):
        torch.manual_seed(seed)
        a = ours(pil)
        torch.manual_seed(seed)
        b = theirs(pil)
        assert type(a) is torch.Tensor and a.dtype == torch.float32 and a.shape == (3, CROP, CROP)
        assert torch.equal(a, b.as_subclass(torch.Tensor)), (aa, erase, seed)


def test_eval_preset_on_pil_is_torchvision_v2(pil):
    a, b = _eval(P)(pil), _eval(TV)(pil)
    assert a.shape == (3, CROP, CROP) and torch.equal(a, b.as_subclass(torch.Tensor))


@pytest.mark.parametrize("erase", [0.0, 0.5])
@pytest.mark.parametrize("aa", AUTO_AUGMENT)
def test_what_fuses_and_why_not(aa, erase):
    preset = _train(P, aa, erase)
    reason = T.explain(preset)
    assert (T.plan(preset) is not None) == _fuses(aa, erase) == (reason is None)
    if aa is not None:
        assert f"member 2, {ADDED[aa]}(" in reason
    elif erase:
        assert "member 5, RandomErasing(" in reason
    assert T.plan(_eval(P)) is not None and T.explain(_eval(P)) is None


def test_newer_v2_preset_shapes_fuse():
    """The current upstream presets add antialias=True, ToDtype(scale=True), ToPureTensor;
    their "tensor" backend converts first, which runs unfused (said so)."""
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    pil_backend = T.Compose([T.RandomResizedCrop(CROP, antialias=True), T.RandomHorizontalFlip(),
                             T.PILToTensor(), T.ToDtype(torch.float, scale=True),
                             T.Normalize(mean, std), T.ToPureTensor()])
    assert T.plan(pil_backend) is not None
    tensor_backend = T.Compose([T.PILToTensor(), T.RandomResizedCrop(CROP, antialias=True),
                                T.ToDtype(torch.float, scale=True), T.Normalize(mean, std)])
    assert T.plan(tensor_backend) is None
    assert "member 1, RandomResizedCrop(" in T.explain(tensor_backend)


# ---------------------------------------------------------------------------------------
# inside the datasets
# ---------------------------------------------------------------------------------------

def _jpeg(i):
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(np.random.default_rng(100 + i), 90 + 7 * i, 110)).save(
        buf, "JPEG", quality=90)
    return buf.getvalue()


N = 6


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("presets")
    files = []
    for i in range(N):
        path = root / "folder" / f"class{i % 2}" / f"{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_jpeg(i))
        files.append(path)
    tar = root / "shard-000.tar"
    with tarfile.open(tar, "w") as tf:
        for i in range(N):
            for name, blob in ((f"{i:06d}.jpg", _jpeg(i)), (f"{i:06d}.cls", str(i % 2).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tf.addfile(info, io.BytesIO(blob))
    return {"folder": str(root / "folder"), "tar": str(tar)}


def _make(cls, source, preset):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = cls(source, preset, seed=3) if cls is ImageFolder else cls(
            source, preset, seed=3, rank=0, world_size=1)
    return ds, [w for w in caught if issubclass(w.category, UnfusedWarning)]


@pytest.mark.parametrize("erase", [0.0, 0.5])
@pytest.mark.parametrize("aa", AUTO_AUGMENT)
def test_train_presets_in_image_folder(data, aa, erase):
    preset = _train(P, aa, erase)
    ds, unfused = _make(ImageFolder, data["folder"], preset)
    assert len(unfused) == (0 if _fuses(aa, erase) else 1)
    if unfused:
        text = str(unfused[0].message)
        assert text.startswith("ImageFolder: the transform is not fused") and T.explain(preset) in text
    ds.set_epoch(0)
    plan = T.plan(preset)
    for i in range(N):
        x, label = ds[i]
        assert x.shape == (3, CROP, CROP) and x.dtype == torch.float32 and label == ds.samples[i][1]
        with open(ds.samples[i][0], "rb") as f:
            blob = f.read()
        if plan is not None:  # the fused call, with the sample's generator
            ref = plan.from_jpeg(blob, rng=sample_rng(3, 0, i))
        else:  # the preset itself on the decoded image, with the sample's generator
            with using_rng(sample_rng(3, 0, i)):
                ref = preset(Image.fromarray(decode_jpeg(blob)))
        assert torch.equal(x, ref), (aa, erase, i)


@pytest.mark.parametrize("erase", [0.0, 0.5])
@pytest.mark.parametrize("aa", AUTO_AUGMENT)
def test_train_presets_in_tar_dataset(data, aa, erase):
    ds, unfused = _make(TarDataset, data["tar"], _train(P, aa, erase))
    assert len(unfused) == (0 if _fuses(aa, erase) else 1)
    ds.set_epoch(0)
    samples = list(ds)
    assert sorted(label for _, label in samples) == sorted(i % 2 for i in range(N))
    assert all(x.shape == (3, CROP, CROP) and x.dtype == torch.float32 for x, _ in samples)
    ds.set_epoch(1)
    assert not all(torch.equal(a, b) for (a, _), (b, _) in zip(samples, ds))  # fresh epoch


def test_eval_preset_in_both_datasets(data):
    preset = _eval(P)
    for cls, source in ((ImageFolder, data["folder"]), (TarDataset, data["tar"])):
        ds, unfused = _make(cls, source, preset)
        assert not unfused
        batches = list(DataLoader(ds, batch_size=3))
        assert sum(len(b[0]) for b in batches) == N
        assert batches[0][0].shape == (3, 3, CROP, CROP)


def test_unfused_warning_is_issued_once_not_per_worker(data, capfd):
    preset = _train(P, "ta_wide", 0.0)
    ds, unfused = _make(ImageFolder, data["folder"], preset)
    assert len(unfused) == 1
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        n = sum(len(b[0]) for b in DataLoader(ds, batch_size=2, num_workers=2))
    assert n == N
    assert not [w for w in caught if issubclass(w.category, UnfusedWarning)]
    assert "UnfusedWarning" not in capfd.readouterr().err  # nor from the worker processes
