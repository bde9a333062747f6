"""WebDataset (``webdataset`` from PyPI) + the same torchvision v2 transforms + torch DataLoader.

Shards are split over DataLoader workers by webdataset (``split_by_worker``); train shuffles
shard order per epoch and samples through a 1000-sample buffer (``.shuffle(1000)``), val reads
in order. Decoding is webdataset's ``.decode("pil")`` (Pillow), transforms on PIL as in the
classic baseline.
"""
import glob

import torch
from torchvision.transforms import v2

import _harness as H
from tv_folder import transform


class Loader:
    def __init__(self, args, pipeline, root):
        import webdataset as wds

        urls = sorted(glob.glob(f"{root}/shards/*.tar"))
        train = pipeline == "train"
        ds = wds.WebDataset(urls, shardshuffle=len(urls) if train else False,
                            nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker,
                            seed=args.seed, empty_check=False)
        if train:
            ds = ds.shuffle(1000)
        ds = ds.decode("pil").to_tuple("jpg", "cls").map_tuple(transform(pipeline), int)
        self.dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                              persistent_workers=args.workers > 0)
        self.note = (f"WebDataset({len(urls)} shards, split by worker"
                     + (", shardshuffle, .shuffle(1000)" if train else "")
                     + ").decode('pil').to_tuple('jpg','cls'), v2 on PIL, "
                     f"DataLoader(num_workers={args.workers}, persistent_workers=True)")

    def epoch(self, e):
        return iter(self.dl)

    def close(self):
        del self.dl


def versions():
    import PIL
    import webdataset
    return {"webdataset": webdataset.__version__, "PIL": PIL.__version__, "torch": torch.__version__}


if __name__ == "__main__":
    H.main("webdataset", Loader, versions)
