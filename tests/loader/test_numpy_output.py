"""``turboloader.DataLoader(output="numpy")``: batches as NumPy arrays over the batch memory
(no copy), on both backends, kept intact however long they are held, and usable by JAX."""

import numpy as np
import pytest
import torch
from helpers import kept

import turboloader


@pytest.fixture(scope="module")
def want():
    return kept.oracle()


def epochs(ds, dl, n=2):
    out = []
    for e in range(n):
        ds.set_epoch(e)
        dl.set_epoch(e)
        out.append(list(dl))
    return out


@pytest.mark.parametrize("backend", ["threads", "processes"])
@pytest.mark.parametrize("kind", ["tar", "folder"])
def test_numpy_batches_are_the_torch_batches_and_stay_intact(want, kind, backend, tmp_path):
    ds = kept.make_dataset(kind, tmp_path)
    make = lambda output: turboloader.DataLoader(  # noqa: E731
        ds, batch_size=kept.B, num_workers=2, backend=backend, output=output,
        shuffle=None if kind == "tar" else False)
    runs = epochs(ds, make("numpy"))  # every batch kept to the end
    ref = epochs(ds, make("torch"))
    for e, (got, exp) in enumerate(zip(runs, ref)):
        assert len(got) == len(exp)
        seen = []
        for (images, labels), (timages, tlabels) in zip(got, exp):
            assert type(images) is np.ndarray and images.dtype == np.float32
            assert type(labels) is np.ndarray and labels.dtype == np.int64
            np.testing.assert_array_equal(images, timages.numpy())
            np.testing.assert_array_equal(labels, tlabels.numpy())
            for img, y in zip(images, labels.tolist()):
                assert torch.equal(torch.from_numpy(img), want[(e, y)])
                seen.append(y)
        assert sorted(seen) == list(range(kept.N))


def test_numpy_output_converts_what_a_collate_returns(tmp_path):
    ds = kept.make_dataset("tar", tmp_path)
    dl = turboloader.DataLoader(ds, batch_size=4, output="numpy", num_workers=1,
                                collate_fn=lambda b: {"images": torch.stack([x for x, _ in b]),
                                                      "labels": [y for _, y in b]})
    batch = next(iter(dl))
    assert isinstance(batch["images"], np.ndarray) and batch["images"].shape[0] == 4
    assert batch["labels"] == [int(y) for y in batch["labels"]]


def test_bad_output_is_refused(tmp_path):
    with pytest.raises(ValueError, match="output"):
        turboloader.DataLoader(kept.make_dataset("tar", tmp_path), output="jax")


def test_jax_recipe(want, tmp_path):
    """README's JAX recipe: NumPy batches to JAX arrays (device_put, or DLPack without a
    copy on the CPU), then a jitted step."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    ds = kept.make_dataset("tar", tmp_path)
    ds.set_epoch(0)
    loader = turboloader.DataLoader(ds, batch_size=kept.B, num_workers=2, output="numpy")
    loader.set_epoch(0)

    @jax.jit
    def mean_image(x):
        return jnp.mean(x, axis=(1, 2, 3))

    for images, labels in loader:
        x = jax.device_put(images)
        y = jax.dlpack.from_dlpack(labels)
        assert x.shape == images.shape and x.dtype == jnp.float32
        if not jax.config.jax_enable_x64:  # the guide: JAX's default gives an int32 copy
            assert jnp.asarray(labels).dtype == jnp.int32 and labels.dtype == np.int64
        np.testing.assert_array_equal(np.asarray(y), labels)
        np.testing.assert_allclose(np.asarray(mean_image(x)), images.mean(axis=(1, 2, 3)),
                                   rtol=1e-5)
        for img, label in zip(np.asarray(x), labels.tolist()):
            np.testing.assert_array_equal(img, want[(0, label)].numpy())
