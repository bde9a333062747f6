"""The seed documents' top-level transform names (turboloader.Resize, ToTensor, Compose,
CenterCrop, RandomCrop, RandomHorizontalFlip, ColorJitter) never mean something else than
torchvision's classes of the same name: ``.apply`` is the seed contract, calling an object is
torchvision's meaning, and constructor calls torchvision reads differently raise a TypeError
naming turboloader.transforms' class."""

import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

import turboloader
from turboloader import transforms as T
from turboloader.tools.synthetic import synthetic_image


@pytest.fixture(scope="module")
def arr():
    return synthetic_image(np.random.default_rng(8), 60, 90)


def _chw(x):
    if isinstance(x, Image.Image):
        return torch.from_numpy(np.array(x)).permute(2, 0, 1)
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x)).permute(2, 0, 1)
    return x


@pytest.mark.parametrize("call,exact", [
    ("turboloader.Resize(224)", "turboloader.transforms.Resize(224)"),
    ("turboloader.Resize((224, 224))", "turboloader.transforms.Resize((224, 224))"),
    ("turboloader.Resize(256, v2.InterpolationMode.BICUBIC)", "turboloader.transforms.Resize"),
    ("turboloader.CenterCrop((32, 48))", "turboloader.transforms.CenterCrop((32, 48))"),
    ("turboloader.RandomCrop([32, 48])", "turboloader.transforms.RandomCrop((32, 48))"),
])
def test_calls_torchvision_reads_differently_raise(call, exact):
    with pytest.raises(TypeError) as info:
        eval(call)
    assert exact in str(info.value)


@pytest.mark.parametrize("kind", ["pil", "tensor", "ndarray"])
def test_calling_an_object_is_torchvisions_meaning(arr, kind):
    img = {"pil": Image.fromarray(arr), "ndarray": arr,
           "tensor": torch.from_numpy(arr).permute(2, 0, 1).contiguous()}[kind]
    ref_img = img if kind != "ndarray" else torch.from_numpy(arr).permute(2, 0, 1).contiguous()
    # deterministic ones: equal to torchvision's class of that name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # v2.ToTensor is deprecated in favour of ToImage+ToDtype
        to_tensor = v2.ToTensor()
    pairs = [(turboloader.ToTensor(), to_tensor),
             (turboloader.CenterCrop(40), v2.CenterCrop(40)),
             (turboloader.Resize(50, 30), v2.Resize((30, 50))),
             (turboloader.RandomHorizontalFlip(1.0), v2.RandomHorizontalFlip(1.0))]
    for ours, theirs in pairs:
        # torchvision's ToTensor reads HWC arrays; its other classes pass arrays through, so
        # they get the tensor
        out = ours(img)
        ref = theirs(img if isinstance(ours, turboloader.ToTensor) else ref_img)
        if not isinstance(ours, turboloader.ToTensor):
            assert type(out) is type(img)
        tol = 1 if (kind == "ndarray" and isinstance(ours, turboloader.Resize)) else 1e-6
        assert (_chw(out).float() - _chw(ref).float()).abs().max() <= tol, ours
    # random ones: torchvision's draws under torch's RNG, so torchvision's result: the same
    # crop exactly; the same jitter (order and factors) through kernels that agree exactly
    # on PIL images and within 3 uint8 levels on tensors (a wrong draw is tens of levels off)
    for ours, theirs, tol in (
            (turboloader.RandomCrop(32), v2.RandomCrop(32), 0),
            (turboloader.ColorJitter(0.2, 0.2, 0.2), v2.ColorJitter(0.2, 0.2, 0.2),
             0 if kind == "pil" else 2),
            (turboloader.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
             0 if kind == "pil" else 3)):
        for seed in range(8):
            torch.manual_seed(seed)
            out = ours(img)
            torch.manual_seed(seed)
            ref = theirs(ref_img)
            assert _chw(out).shape == _chw(ref).shape
            assert (_chw(out).int() - _chw(ref).int()).abs().max() <= tol, (ours, seed)
    # and the draws themselves, as torchvision's make_params makes them
    for seed in range(8):
        torch.manual_seed(seed)
        ours = T.ColorJitter(0.4, 0.4, 0.4, 0.1).make_params((60, 90))
        torch.manual_seed(seed)
        theirs = v2.ColorJitter(0.4, 0.4, 0.4, 0.1).make_params([ref_img])
        assert ours["fn_idx"] == theirs["fn_idx"].tolist()
        for k in ("brightness_factor", "contrast_factor", "saturation_factor", "hue_factor"):
            assert ours[k] == pytest.approx(theirs[k], abs=1e-6)
        torch.manual_seed(seed)
        ours = T.RandomCrop(32).make_params((60, 90))
        torch.manual_seed(seed)
        theirs = v2.RandomCrop(32).make_params([ref_img])
        assert (ours["top"], ours["left"]) == (theirs["top"], theirs["left"])
    with pytest.raises(ValueError, match="larger than"):  # as torchvision, no padding
        turboloader.RandomCrop(100)(img)
    compose = turboloader.Compose([turboloader.CenterCrop(40), turboloader.ToTensor()])
    x = compose(img)
    # torchvision's ToTensor converts PIL images and arrays and passes tensors through
    dtype = torch.uint8 if kind == "tensor" else torch.float32
    assert isinstance(x, torch.Tensor) and x.dtype == dtype and x.shape == (3, 40, 40)


def test_apply_keeps_the_seed_contract(arr):
    out = turboloader.Compose([turboloader.Resize(64, 48), turboloader.RandomCrop(40, 30),
                               turboloader.ToTensor()]).apply(Image.fromarray(arr))
    assert isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.shape == (3, 30, 40)
    padded = turboloader.RandomCrop(100, 80).apply(arr)  # zero-padded, no error
    assert padded.shape == (80, 100, 3)
    assert turboloader.RandomCrop(100).apply(arr).shape == (100, 100, 3)
    assert turboloader.ToTensor().apply(arr).dtype == np.uint8
    hwc = turboloader.ToTensor(turboloader.TensorFormat.TENSORFLOW_HWC)
    assert np.array_equal(hwc(arr), arr) and np.array_equal(hwc.apply(arr), arr)
    norm = turboloader.ImageNetNormalize()
    assert np.array_equal(norm(arr), norm.apply(arr))


def test_the_seed_two_int_random_crop_refuses_to_be_called(arr):
    t = turboloader.RandomCrop(40, 30)
    with pytest.raises(TypeError, match=r"turboloader.transforms.RandomCrop\(\(30, 40\)\)"):
        t(arr)
    with pytest.raises(TypeError, match="use .apply"):
        turboloader.Compose([t])(arr)
    assert turboloader.transforms.RandomCrop is T.RandomCrop is not turboloader.RandomCrop
