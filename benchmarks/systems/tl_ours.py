"""This project's turboloader: TarDataset or ImageFolder through torch's DataLoader, or the
thread backend (``turboloader.DataLoader(..., backend="threads")``) once it exists.

``--variant tar|folder|threads``. The transforms are ``turboloader.transforms`` with
torchvision's names, which the datasets fuse into one native decode -> crop/resize -> flip ->
normalise call per sample. Train shuffles (TarDataset shuffles itself; ImageFolder through the
DataLoader's sampler); val reads in order. ``on_error="skip", max_failures=2`` is used in the
corrupt-sample pass only (the default, "raise", everywhere else).
"""
import glob

import torch

import _harness as H


def transform(pipeline):
    from turboloader import transforms as T

    if pipeline == "train":
        head = [T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()]
    else:
        head = [T.Resize(256, antialias=True), T.CenterCrop(224)]
    return T.Compose([*head, T.ToImage(), T.ToDtype(torch.float32, scale=True),
                      T.Normalize(H.MEAN, H.STD)])


class Unavailable(RuntimeError):
    pass


class Loader:
    def __init__(self, args, pipeline, root, on_error="raise", max_failures=None):
        import turboloader as tl

        train = pipeline == "train"
        self.variant = args.variant
        tf = transform(pipeline)
        pol = {"on_error": on_error}
        if max_failures is not None:
            pol["max_failures"] = max_failures
        if args.variant == "tar":
            urls = sorted(glob.glob(f"{root}/shards/*.tar"))
            self.ds = tl.TarDataset(urls, tf, shuffle=train, seed=args.seed, **pol)
            self.dl = torch.utils.data.DataLoader(
                self.ds, batch_size=args.batch, num_workers=args.workers,
                persistent_workers=args.workers > 0)
            self.note = (f"TarDataset({len(urls)} shards, shuffle={train}, {pol}), "
                         f"fused turboloader.transforms, DataLoader(num_workers={args.workers}, "
                         "persistent_workers=True), set_epoch each epoch")
        elif args.variant == "folder":
            self.ds = tl.ImageFolder(f"{root}/folder", tf, seed=args.seed, **pol)
            self.dl = torch.utils.data.DataLoader(
                self.ds, batch_size=args.batch, shuffle=train, num_workers=args.workers,
                persistent_workers=args.workers > 0)
            self.note = (f"ImageFolder({pol}), fused turboloader.transforms, "
                         f"DataLoader(shuffle={train}, num_workers={args.workers}, "
                         "persistent_workers=True), set_epoch each epoch")
        elif args.variant == "threads":
            DataLoader = getattr(tl, "DataLoader", None)
            if DataLoader is None:  # written but not yet exported from the package
                try:
                    from turboloader.loader import DataLoader
                except ImportError:
                    raise Unavailable("not available yet: turboloader has no DataLoader "
                                      "(thread backend) in this checkout") from None
            urls = sorted(glob.glob(f"{root}/shards/*.tar"))
            self.ds = tl.TarDataset(urls, tf, shuffle=train, seed=args.seed, **pol)
            self.dl = DataLoader(self.ds, batch_size=args.batch, num_workers=args.workers,
                                 backend="threads")
            self.note = (f"turboloader.DataLoader(TarDataset, backend='threads', "
                         f"num_workers={args.workers})")
        else:
            raise ValueError(f"unknown variant {args.variant!r}")

    def epoch(self, e):
        if hasattr(self.ds, "set_epoch"):
            self.ds.set_epoch(e)
        if hasattr(self.dl, "set_epoch"):
            self.dl.set_epoch(e)
        return iter(self.dl)

    def failure_report(self):
        st = self.ds.stats() if hasattr(self.ds, "stats") else {}
        keys = [k for k in ("skipped", "failures", "failed") if k in st]
        return "stats(): " + (", ".join(f"{k}={st[k]!r}"[:200] for k in keys) if keys
                              else str(st)[:200])

    def close(self):
        del self.dl


def build(args, pipeline, root):
    return Loader(args, pipeline, root)


def build_corrupt(args, pipeline, root):
    # the default budget (1 % of a process's samples) is 0 for a 32-image set; allow 2
    return Loader(args, pipeline, root, on_error="skip", max_failures=2)


def versions():
    import turboloader as tl
    from turboloader.decode import jpeg
    v = {"turboloader": tl.__version__, "torch": torch.__version__}
    for name in ("LIBJPEG_TURBO_VERSION", "libjpeg_turbo_version", "__libjpeg_version__"):
        if hasattr(jpeg, name):
            v["turboloader libjpeg-turbo"] = str(getattr(jpeg, name))
    return v


if __name__ == "__main__":
    H.main("turboloader", build, versions, build_corrupt=build_corrupt)
