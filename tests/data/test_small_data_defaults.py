"""Small runs: the default failure budget allows a skip in a small share;
ResumableSampler works in a single process."""

import pytest
import torch
from helpers.shards import labelled_members, size_of, write_tar

from turboloader import TarDataset
from turboloader.data import ResumableSampler
from turboloader.data.policy import FailurePolicy
from turboloader.errors import FailureBudgetExceeded


@pytest.mark.parametrize("n, allowed", [(1, 1), (40, 1), (99, 1), (199, 1), (200, 2), (500, 5)])
def test_fractional_budget_allows_at_least_one(n, allowed):
    assert int(FailurePolicy("skip", 0.01).budget(n)) == allowed
    assert FailurePolicy("skip", 0).budget(n) == 0
    assert FailurePolicy("skip", 0.0).budget(n) == 0
    assert FailurePolicy("skip", 3).budget(n) == 3


def _bad_tar(tmp_path, bad):
    members = labelled_members(range(30))
    for i in bad:
        members[2 * i] = (members[2 * i][0], b"not a jpeg")
    return write_tar(tmp_path / "small.tar", members)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_bad_file_in_a_small_share_is_skipped_with_the_default(tmp_path, num_workers):
    ds = TarDataset(_bad_tar(tmp_path, [7]), size_of, on_error="skip")  # default 0.01
    ds.set_epoch(0)
    got = [lab for _, y in torch.utils.data.DataLoader(ds, batch_size=4,
                                                       num_workers=num_workers)
           for lab in y.tolist()]
    assert len(got) == 30 and 7 not in got and set(got) == set(range(30)) - {7}
    assert [s["key"] for s in ds.stats()["skipped"]] == ["000007"]


def test_two_bad_files_in_a_small_share_exceed_the_default(tmp_path):
    ds = TarDataset(_bad_tar(tmp_path, [3, 9]), size_of, shuffle=False, on_error="skip")
    with pytest.raises(FailureBudgetExceeded):
        list(ds)


def test_resumable_sampler_outside_distributed():
    ds = list(range(10))
    s = ResumableSampler(ds)
    assert (s.num_replicas, s.rank) == (1, 0)
    s.set_epoch(2)
    ref = torch.utils.data.DistributedSampler(ds, num_replicas=1, rank=0, seed=0)
    ref.set_epoch(2)
    assert list(s) == list(ref) and sorted(s) == ds
    state = s.state_dict(batches=2, batch_size=3)
    s2 = ResumableSampler(ds)
    s2.load_state_dict(state)
    assert list(s2) == list(ref)[6:]
