"""2 nodes x 2 processes on loopback (two torchrun invocations, c10d rendezvous, gloo),
2 DataLoader workers each, over uneven shards; then a stop and a resume in new processes."""

import collections
import json
import os
import socket
import subprocess
import sys

import pytest

from helpers import subprocess_env
from helpers.shards import write_shards

# two torchrun launches of up to 240 s each, and their clean-up
pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.timeout(900)]

SIZES = [7, 3, 11, 5, 9]  # 35 samples: 4 ranks x 9, one padding repeat
N = sum(SIZES)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(phase, shards, out, timeout=240):
    """Both nodes' torchrun agents; every wait is bounded, stragglers are killed."""
    port = free_port()
    env = subprocess_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    procs = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
               "--nproc-per-node=2", f"--node-rank={node}", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=scale-test", "--max-restarts=0",
               "--rdzv-conf=join_timeout=120", "--monitor-interval=0.5",
               os.path.join(HERE, "ddp_job.py"), "--shards", shards, "--out", out,
               "--phase", phase]
        log = open(os.path.join(out, f"{phase}-node{node}.log"), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       cwd=ROOT), log))
    try:
        for p, _ in procs:
            p.wait(timeout=timeout)
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
            log.close()
    for node, (p, _) in enumerate(procs):
        if p.returncode != 0:
            with open(os.path.join(out, f"{phase}-node{node}.log")) as fh:
                pytest.fail(f"torchrun node {node} ({phase}) exited {p.returncode}:\n"
                            f"{fh.read()[-4000:]}")
    return {r: json.load(open(os.path.join(out, f"{phase}-rank{r}.json"))) for r in range(4)}


def test_two_nodes_two_procs_two_workers(tmp_path):
    shards = write_shards(str(tmp_path / "shards"), SIZES, name="train")
    pattern = os.path.join(os.path.dirname(shards[0]), "train-{0000..0004}.tar")
    out = str(tmp_path / "out")
    os.makedirs(out)
    full = launch("full", pattern, out)
    assert sorted(full) == [0, 1, 2, 3] and all(f["world_size"] == 4 for f in full.values())
    # equal batch counts on every rank: 9 samples = 4 + 5 per worker = 2 + 3 batches of 2
    assert all(f["all_counts"] == [5, 5, 5, 5] for f in full.values())
    seen = collections.Counter(v for f in full.values() for b in f["full"] for v in b)
    assert set(seen) == set(range(N)) and sum(seen.values()) == 36
    assert sorted(seen.values()).count(2) == 1  # the one documented padding repeat
    # a stop after 2 batches, rank 0's state in the checkpoint, a restart of every process
    tail = launch("resume", pattern, out)
    for r in range(4):
        assert full[r]["head"] == full[r]["full"][:2]
        assert full[r]["head"] + tail[r]["tail"] == full[r]["full"], r
        assert tail[r]["all_counts"] == [3, 3, 3, 3]
