"""This project's turboloader: TarDataset or ImageFolder through torch's DataLoader, or the
thread backend (``turboloader.DataLoader(..., backend="threads")``) once it exists.

``--variant tar|tar-batched|folder|threads|threads-seekable|threads-cache-fill|threads-cache``.
``threads-seekable`` is the thread backend on the ``shards-seekable/`` copy that run.py makes
with ``turboloader convert SRC DST --seekable``. ``threads-cache-fill`` and ``threads-cache``
are the thread backend with ``TarDataset(..., cache=--cache,
cache_short_side=--cache-short-side)``: ``-fill`` starts every epoch with a new dataset and loader (an empty cache; built before the
epoch's clock starts), so each timed epoch is a filling one; ``threads-cache`` keeps one
loader, whose first (warm-up) epoch fills the cache, so the timed epochs are served from it
(the thread backend keeps its decode threads' readers, and so their caches, across epochs).

The transforms are ``turboloader.transforms`` with torchvision's names, which the datasets
fuse into one native decode -> crop/resize -> flip -> normalise call per sample. Train shuffles (TarDataset shuffles itself; ImageFolder through the
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
        elif args.variant == "tar-batched":
            urls = sorted(glob.glob(f"{root}/shards/*.tar"))
            self.ds = tl.TarDataset(urls, tf, shuffle=train, seed=args.seed, **pol)
            self.dl = torch.utils.data.DataLoader(
                self.ds.batched(args.batch, num_workers=args.workers), batch_size=None,
                num_workers=args.workers, persistent_workers=args.workers > 0)
            self.note = (f"TarDataset({len(urls)} shards, shuffle={train}, {pol}).batched("
                         f"{args.batch}): whole batches decoded in each worker into shared "
                         f"memory, DataLoader(batch_size=None, num_workers={args.workers}, "
                         "persistent_workers=True), set_epoch each epoch")
        elif args.variant == "folder":
            self.ds = tl.ImageFolder(f"{root}/folder", tf, seed=args.seed, **pol)
            self.dl = torch.utils.data.DataLoader(
                self.ds, batch_size=args.batch, shuffle=train, num_workers=args.workers,
                persistent_workers=args.workers > 0)
            self.note = (f"ImageFolder({pol}), fused turboloader.transforms, "
                         f"DataLoader(shuffle={train}, num_workers={args.workers}, "
                         "persistent_workers=True), set_epoch each epoch")
        elif args.variant.startswith("threads"):
            DataLoader = getattr(tl, "DataLoader", None)
            if DataLoader is None:  # written but not yet exported from the package
                try:
                    from turboloader.loader import DataLoader
                except ImportError:
                    raise Unavailable("not available yet: turboloader has no DataLoader "
                                      "(thread backend) in this checkout") from None
            sub = "shards-seekable" if args.variant == "threads-seekable" else "shards"
            urls = sorted(glob.glob(f"{root}/{sub}/*.tar"))
            if not urls:
                raise Unavailable(f"no shards in {root}/{sub}")
            if args.variant.startswith("threads-cache"):
                pol["cache"] = args.cache
                pol["cache_short_side"] = args.cache_short_side or None

            def make():
                ds = tl.TarDataset(urls, tf, shuffle=train, seed=args.seed, **pol)
                return ds, DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                      backend="threads")
            self._make = make
            self.ds, self.dl = make()
            self._used = False
            self.note = (f"turboloader.DataLoader(TarDataset({sub}/, {len(urls)} shards, "
                         f"shuffle={train}, {pol}), backend='threads', "
                         f"num_workers={args.workers})")
            if args.variant == "threads-seekable":
                self.note += "; shards from `turboloader convert shards/ shards-seekable/ --seekable`"
            elif args.variant == "threads-cache-fill":
                self.note += "; a new dataset + loader (empty cache) before every epoch: each epoch fills"
            elif args.variant == "threads-cache":
                self.note += "; one loader: the warm-up epoch fills the cache, timed epochs read it"
        else:
            raise ValueError(f"unknown variant {args.variant!r}")

    def before_epoch(self, e, timed):
        """Untimed set-up of epoch ``e`` (called by the harness before the clock starts)."""
        if self.variant == "threads-cache-fill" and self._used:
            self.close()
            self.ds, self.dl = self._make()  # an empty cache
        elif self.variant == "threads-cache" and timed and not self._used:
            for _ in self.epoch(e):  # --warmup 0: fill the cache anyway, untimed
                pass
        self._used = True

    def cache_note(self):
        if not self.variant.startswith("threads-cache"):
            return ""
        st = self.ds.stats()
        hits, misses = st.get("cache_hits", 0), st.get("cache_misses", 0)
        rate = st.get("cache_hit_rate")
        rate = f" (hit rate {rate:.2f})" if isinstance(rate, float) else ""
        return (f"cache over this loader's epochs: {hits} hits, {misses} misses{rate}, "
                f"{st.get('cache_bytes', 0) / 2**20:.0f} MiB held")

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
        dl = self.__dict__.pop("dl", None)
        close = getattr(dl, "close", None) or getattr(dl, "shutdown", None)
        if close:
            close()


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
