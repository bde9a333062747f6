"""One rank of the multi-node test, launched by torchrun (see test_multinode.py).

phase "full": a whole epoch, then a run stopped after --stop-after batches whose state
rank 0 saves (as a checkpoint would); phase "resume": a new process loads rank 0's state
and finishes the epoch. Each rank writes what it saw to --out/<phase>-rank<r>.json.
"""

import argparse
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

from helpers.shards import size_of
from turboloader.data import TarDataset

BATCH, WORKERS, EPOCH = 2, 2, 1


def epoch_batches(ds, stop=None):
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, timeout=60)
    out = []
    for _, labels in loader:
        out.append(labels.tolist())
        if stop is not None and len(out) == stop:
            break
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shards", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--phase", choices=["full", "resume"], required=True)
    p.add_argument("--stop-after", type=int, default=2)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
    rank, world = dist.get_rank(), dist.get_world_size()
    make = lambda: TarDataset(args.shards, size_of, seed=7)  # noqa: E731
    result = {"rank": rank, "world_size": world}
    if args.phase == "full":
        ds = make()
        ds.set_epoch(EPOCH)
        result["full"] = epoch_batches(ds)
        ds = make()
        ds.set_epoch(EPOCH)
        result["head"] = epoch_batches(ds, stop=args.stop_after)
        state = ds.state_dict(batches=args.stop_after, batch_size=BATCH, num_workers=WORKERS)
        if rank == 0:
            with open(os.path.join(args.out, "state.json"), "w") as fh:
                json.dump(state, fh)
    else:
        with open(os.path.join(args.out, "state.json")) as fh:
            state = json.load(fh)
        ds = make()
        ds.load_state_dict(state)
        ds.set_epoch(EPOCH)
        result["tail"] = epoch_batches(ds)
    counts = [None] * world
    n = len(result.get("full", result.get("tail")))
    dist.all_gather_object(counts, n)  # every rank agrees on the batch counts it saw
    result["all_counts"] = counts
    with open(os.path.join(args.out, f"{args.phase}-rank{rank}.json"), "w") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
