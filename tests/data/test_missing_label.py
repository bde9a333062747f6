"""Unlabelled shards (``tar -cf train.tar *.jpg``, as the seed guides build them)."""

import tarfile

import pytest

from turboloader import SampleError, TarDataset
from helpers.shards import jpeg, labels_of, size_of, write_tar


def test_missing_label_is_an_error_by_default_and_a_value_when_asked(tmp_path):
    url = write_tar(tmp_path / "bare.tar", [(f"{i:04d}.jpg", jpeg(i)) for i in range(5)])
    with pytest.raises(SampleError, match="no label member"):
        list(TarDataset(url, size_of, shuffle=False))
    ds = TarDataset(url, size_of, shuffle=False, missing_label=-1)
    assert labels_of(ds) == [-1] * 5


def test_seed000_step1_archive_reads_every_image(tmp_path):
    # seed 000, step 1: tarfile.open(..., 'w') and add(file, arcname=file)
    for i in range(4):
        (tmp_path / f"img{i}.jpg").write_bytes(jpeg(i))
    with tarfile.open(tmp_path / "train.tar", "w") as tar:
        for i in range(4):
            tar.add(tmp_path / f"img{i}.jpg", arcname=f"img{i}.jpg")
    import turboloader

    config = turboloader.TransformConfig()
    pipeline = turboloader.Pipeline(tar_paths=[str(tmp_path / "train.tar")], num_workers=1,
                                    decode_jpeg=True, transform_config=config)
    pipeline.start()
    seen = []
    while True:
        batch = pipeline.next_batch(3)
        if len(batch) == 0:
            break
        seen += [sample.get_image().shape for sample in batch]
    pipeline.stop()
    assert len(seen) == 4 and all(shape[-1] == 3 for shape in seen)
