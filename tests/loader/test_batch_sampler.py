"""``batch_sampler=`` and ``sampler=`` on both backends, and one collation of variable-size
fields: the calls torchvision's detection reference makes (GroupedBatchSampler, its
``collate_fn``), with torch's own DataLoader over the same dataset as the oracle."""

import pytest
import torch

from helpers.detection import (GroupedBatchSampler, aspect_ratios, collate_fn,
                               create_aspect_ratio_groups, make_detection_manifest,
                               seeded_sampler)

import turboloader
from turboloader import BoxesField, ManifestDataset
from turboloader import transforms as T

BACKENDS = ["threads", "processes"]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return make_detection_manifest(str(tmp_path_factory.mktemp("det")), n=12)


def _dataset(manifest):
    # the reference's "hflip" policy without the random flip: images keep their sizes
    return ManifestDataset(manifest, transform=T.Compose([T.ToImage(),
                                                          T.ToDtype(torch.float32, scale=True)]),
                           fields=("path", BoxesField("boxes"), "labels", "id"))


def _grouped(ds, manifest, seed=7):
    groups = create_aspect_ratio_groups(aspect_ratios(manifest), k=3)
    return GroupedBatchSampler(seeded_sampler(ds, seed), groups, 2)


def _same(a, b):
    assert type(a) is type(b) or (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)))
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape and torch.equal(a.as_subclass(torch.Tensor),
                                                  b.as_subclass(torch.Tensor))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_batch_sampler_as_the_detection_reference_builds_it(manifest, backend):
    ds = _dataset(manifest)
    oracle = list(torch.utils.data.DataLoader(ds, batch_sampler=_grouped(ds, manifest),
                                              num_workers=0, collate_fn=collate_fn))
    loader = turboloader.DataLoader(ds, batch_sampler=_grouped(ds, manifest), num_workers=2,
                                    collate_fn=collate_fn, backend=backend)
    assert loader.batch_size is None and len(loader) == len(oracle) == 6
    got = list(loader)
    assert len(got) == len(oracle)
    expected_ids = [list(i) for i in _grouped(ds, manifest)]
    for batch, want, ids in zip(got, oracle, expected_ids):
        images, boxes, labels, sample_ids = batch
        assert list(sample_ids) == ids
        # one aspect-ratio group per batch, as the sampler made them
        assert len({tuple(im.shape) for im in images}) == 1 or len(set(ids)) == 1
        _same(list(batch), list(want))


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_sampler_and_batch_size(manifest, backend):
    ds = _dataset(manifest)
    def sampler():
        return torch.utils.data.SubsetRandomSampler(
            [1, 3, 5, 7, 9, 11], generator=torch.Generator().manual_seed(3))

    want = list(torch.utils.data.DataLoader(ds, batch_size=2, sampler=sampler(),
                                            collate_fn=collate_fn))
    got = list(turboloader.DataLoader(ds, batch_size=2, sampler=sampler(), num_workers=2,
                                      collate_fn=collate_fn, backend=backend))
    assert [list(b[3]) for b in got] == [list(b[3]) for b in want]
    _same([list(b) for b in got], [list(b) for b in want])


def test_both_backends_collate_variable_sizes_alike_by_default(manifest):
    # images of several sizes and different box counts: lists where torch's default_collate
    # cannot stack, on both backends (the process backend used to raise torch's stack error)
    ds = _dataset(manifest)
    runs = {b: list(turboloader.DataLoader(ds, batch_size=4, num_workers=2, backend=b))
            for b in BACKENDS}
    for a, b in zip(*runs.values()):
        images, boxes, labels, ids = a
        assert isinstance(images, list) and isinstance(boxes, list) and isinstance(labels, list)
        assert isinstance(ids, torch.Tensor)  # what default_collate can stack, it stacks
        _same(a, b)
    assert sorted(i for batch in runs["threads"] for i in batch[3].tolist()) == list(range(12))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pairs_of_several_sizes_and_target_dicts(manifest, backend):
    # (image, target) pairs as the detection reference's dataset returns them: by default a
    # list of images and a list of target dicts on both backends; the reference's collate_fn
    # gives its tuples
    class Pairs(torch.utils.data.Dataset):
        def __init__(self, ds):
            self.ds = ds

        def __len__(self):
            return len(self.ds)

        def __getitem__(self, i):
            image, boxes, labels, ident = self.ds[i]
            return image, {"boxes": boxes, "labels": torch.tensor(labels), "image_id": ident}

    pairs = Pairs(_dataset(manifest))
    images, targets = next(iter(turboloader.DataLoader(pairs, batch_size=4, num_workers=2,
                                                       backend=backend)))
    assert isinstance(images, list) and [t["image_id"] for t in targets] == [0, 1, 2, 3]
    for k, (im, t) in enumerate(zip(images, targets)):
        want_im, want_t = pairs[k]
        _same(im, want_im)
        _same(t["boxes"], want_t["boxes"])
    images, targets = next(iter(turboloader.DataLoader(pairs, batch_size=4, num_workers=2,
                                                       backend=backend,
                                                       collate_fn=collate_fn)))
    assert isinstance(images, tuple) and len(targets) == 4
