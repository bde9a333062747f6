"""The ``turboloader`` command line: convert, inspect, verify, index, preview, bench, demo."""

import argparse
import os
import sys

__all__ = ["main"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_SKIPPED = 0, 1, 2, 3

_EXIT_CODES = """exit codes:
  0  success
  1  error: a bad path or option, unreadable data (verify: at least one bad sample)
  2  usage error (bad arguments)
  3  convert finished, but some samples were skipped (listed in the summary)"""

_FORMATS_HELP = """formats (detected from the path, or given with --from / --to):
  folder  an ImageFolder tree: ROOT/<class>/<image>.jpg; label = class index (sorted)
  tar     WebDataset TAR shards: <key>.jpg + <key>.cls; a .tar file, a directory of them,
          a brace pattern ('train-{00000..00099}.tar') or a glob; as output, a '%'
          pattern ('out/train-%05d.tar'), a directory (with --to tar) or one .tar file
  tbl     a TBL file (*.tbl): random access, optional pre-resizing; see docs/tbl-format.md"""

_PATH_HELP = ("the dataset: an ImageFolder root, TAR shards (a .tar, a directory of them, a "
              "brace pattern or glob) or a .tbl file")


def _pipeline_input(parser):
    """PATH, --from and --transform: what preview and bench run their pipeline on."""
    parser.add_argument("path", metavar="PATH", help=_PATH_HELP)
    parser.add_argument("--from", dest="src_format", choices=("folder", "tar", "tbl"),
                        help="input format (default: detected)")
    parser.add_argument("--transform", choices=("train", "val"), default="train",
                        help="train: RandomResizedCrop + flip; val: Resize + CenterCrop "
                             "(default train)")


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="turboloader", description="Fast image data loading for PyTorch.",
        epilog=_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    from turboloader._version import __version__
    from turboloader.errors import DISTRIBUTION

    parser.add_argument("--version", action="version",
                        version=f"turboloader {__version__} (distribution {DISTRIBUTION})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo", help="the main job on generated data: turboloader vs torchvision, end to end",
        description="Generates photograph-like JPEGs, writes them as TAR shards and an ImageFolder "
                    "tree, checks turboloader's samples against torchvision on the same crops, then "
                    "runs the ImageNet train pipeline (RandomResizedCrop 224, flip, ToTensor, "
                    "Normalize, labels) through torchvision + torch's DataLoader, turboloader with "
                    "worker processes, turboloader's thread backend, and its decoded-sample cache; "
                    "prints images/s, the ratios and the loader's stage table.")
    demo.add_argument("-n", "--num-images", type=int, default=512,
                      help="images to generate (default 512)")
    demo.add_argument("--seed", type=int, default=0, help="seed for the images and the augmentations")
    demo.add_argument("--workers", type=int, default=None,
                      help="worker processes / threads for every loader (default: CPU count, max 8)")
    demo.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    demo.add_argument("--epochs", type=int, default=2,
                      help="epochs per loader; the last is timed (default 2)")

    fmt = argparse.RawDescriptionHelpFormatter
    conv = sub.add_parser(
        "convert", help="convert a dataset between folder, TAR shards and TBL",
        formatter_class=fmt,
        description="Convert SRC to DST, streaming. TAR shards are written in a seeded random "
                    "order across shards (--seed; --no-shuffle keeps the source order), TBL and "
                    "folder outputs in source order (--shuffle to change). Samples whose image header cannot be read, with unsafe "
                    "names (absolute, '..'), labels or keys the output cannot store, without an "
                    "image, or that are not regular files (FIFOs, devices) or are over the "
                    "member-size limit (TURBOLOADER_MAX_FILE_BYTES, default 1 GiB) are skipped "
                    "and listed in the summary. Folder and TAR outputs get a manifest, "
                    "written last and atomically (per shard: samples, bytes, SHA-256), that "
                    "'turboloader verify' checks; TAR outputs get a classes file. One of each per "
                    "output prefix ('shards/train-%05d.tar': shards/train-manifest.json, "
                    "train-classes.json), so splits share a folder; a directory output gets "
                    "manifest.json and classes.json.\n\n"
                    + _FORMATS_HELP,
        epilog="examples:\n"
               "  turboloader convert imagenet/train train.tbl\n"
               "  turboloader convert 'shards/train-{0000..0146}.tar' train-256.tbl "
               "--max-short-side 256 --quality 90\n"
               "  turboloader convert imagenet/val 'val-shards/val-%05d.tar' --shard-size 5000\n"
               "  turboloader convert imagenet/train shards/ --to tar --seed 1   # shuffled\n"
               "  turboloader convert shards/ seekable/ --to tar --seekable   # crop-friendly\n\n"
               + _EXIT_CODES)
    conv.add_argument("src", metavar="SRC", help="input dataset")
    conv.add_argument("dst", metavar="DST", help="output: *.tbl, *.tar, a %%-pattern, or a folder")
    conv.add_argument("--image-column", default="image", metavar="NAME",
                      help="Parquet: the image column; manifest: the path column (default "
                           "'image' / 'path')")
    conv.add_argument("--label-column", default="label", metavar="NAME",
                      help="Parquet / manifest: the label column (default 'label')")
    conv.add_argument("--from", dest="src_format",
                      choices=("folder", "tar", "tbl", "parquet", "manifest"),
                      help="input format (default: detected)")
    conv.add_argument("--to", dest="dst_format", choices=("folder", "tar", "tbl"),
                      help="output format (default: from DST's name)")
    conv.add_argument("--shard-size", type=int, default=None,
                      help="samples per TAR shard (default 5000)")
    conv.add_argument("--max-short-side", type=int, default=None, metavar="PX",
                      help="re-encode images whose short side is longer, resized to PX "
                           "(e.g. 256); smaller images are copied as is")
    conv.add_argument("--max-side", type=int, default=None, metavar="PX",
                      help="re-encode images whose long side is longer, shrunk so that it is "
                           "PX (after --max-short-side, if both); smaller ones are copied")
    conv.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images (default 90)")
    conv.add_argument("--codec", choices=("keep", "jpeg", "raw"), default="keep",
                      help="keep the source codec (default), re-encode everything as JPEG, or "
                           "store decoded RGB pixels (TBL only)")
    conv.add_argument("--seekable", action="store_true",
                      help="rewrite every JPEG losslessly (same DCT coefficients) with restart "
                           "markers, so crops decode only the blocks under them; the files "
                           "stay ordinary JPEGs")
    conv.add_argument("--restart-mcus", type=int, default=0, metavar="N",
                      help="with --seekable: MCUs per restart interval (default 0: automatic, "
                           "the smallest divisor of the MCUs per row whose markers add <= ~3%% to the size)")
    conv.add_argument("--compression", choices=("auto", "none", "lz4"), default="auto",
                      help="TBL record compression (default auto: LZ4 for raw pixels, where it pays)")
    conv.add_argument("-j", "--workers", type=int, default=None,
                      help="threads (default: CPU count when re-encoding, else 1)")
    conv.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    conv.add_argument("--strict", action="store_true",
                      help="stop at the first bad sample instead of skipping it")
    conv.add_argument("--seed", type=int, default=0,
                      help="seed of the sample order (default 0)")
    order = conv.add_mutually_exclusive_group()
    order.add_argument("--shuffle", dest="shuffle", action="store_true", default=None,
                       help="write samples in a seeded random order (default for TAR output)")
    order.add_argument("--no-shuffle", dest="shuffle", action="store_false",
                       help="keep the source order (default for TBL and folder output)")
    _progress_args(conv)

    insp = sub.add_parser(
        "inspect", help="samples, keys, labels, image sizes and codecs of a dataset",
        formatter_class=fmt,
        description="Print what a dataset holds. TBL files are described from their index alone; "
                    "folders and TAR shards are scanned (image headers only).\n\n" + _FORMATS_HELP,
        epilog=_EXIT_CODES)
    insp.add_argument("path", metavar="PATH", help=_PATH_HELP)
    insp.add_argument("--from", dest="src_format", choices=("folder", "tar", "tbl"),
                      help="input format (default: detected)")
    insp.add_argument("--top", type=int, default=10, help="labels listed in the histogram (default 10)")

    ver = sub.add_parser(
        "verify", help="decode every sample and report the bad ones",
        formatter_class=fmt,
        description="Decode every image (and check every TBL record's CRC-32); print each bad "
                    "sample as SHARD: KEY: REASON. Exits 1 if any sample is bad, if a TAR shard "
                    "has no end-of-archive block, or if TAR shards (or a folder 'turboloader "
                    "convert' wrote) have no complete manifest matching them (sample counts, "
                    "sizes, SHA-256; --no-manifest skips that check). A folder without a "
                    "manifest is verified by reading every image, and the output says so.\n\n" + _FORMATS_HELP,
        epilog=_EXIT_CODES)
    ver.add_argument("path", metavar="PATH", help=_PATH_HELP)
    ver.add_argument("--from", dest="src_format", choices=("folder", "tar", "tbl"),
                     help="input format (default: detected)")
    ver.add_argument("-j", "--workers", type=int, default=None, help="threads (default: CPU count)")
    ver.add_argument("--strict", action="store_true",
                     help="treat libjpeg's recoverable-corruption warnings as errors while decoding")
    ver.add_argument("--no-manifest", dest="manifest", action="store_false",
                     help="do not require the manifest.json that 'turboloader convert' writes "
                          "(for TAR shards made by other tools)")
    _progress_args(ver)

    idx = sub.add_parser(
        "index", help="write a shard index (samples per shard) beside TAR shards, local or remote",
        formatter_class=fmt,
        description="Count the samples of every shard (remote ones read in parallel, one "
                    "connection each) and write a WebDataset 'wids' shard index "
                    "(wids-shard-index-v1 JSON: shardlist of url, nsamples, filesize). "
                    "TarDataset finds it beside the shards as <prefix>index.json "
                    "('train-index.json' for 'train-00003.tar') and starts without reading "
                    "them. SHARDS: a brace pattern, glob (local) or directory; s3://, gs://, "
                    "az://, http(s):// or local.",
        epilog=_EXIT_CODES)
    idx.add_argument("path", metavar="SHARDS", help="the shards")
    idx.add_argument("-o", "--output", default=None,
                     help="where to write the index: a path or s3:// / gs:// / az:// URL "
                          "(default: <prefix>index.json beside the first shard). Remote "
                          "shards of one folder indexed into a local file are named "
                          "relative to it: upload it beside them (HTTP stores)")
    idx.add_argument("-j", "--workers", type=int, default=None,
                     help="shards counted at once (default 32)")

    prev = sub.add_parser(
        "preview", help="save a grid of augmented samples as the model sees them",
        formatter_class=fmt,
        description="Run N samples through the train or val pipeline (RandomResizedCrop + flip, "
                    "or Resize + CenterCrop; then the tensor conversion and normalization), undo "
                    "the normalization for display and save them as one image grid.",
        epilog=_EXIT_CODES)
    _pipeline_input(prev)
    prev.add_argument("-o", "--output", default="preview.png", help="output image (default preview.png)")
    prev.add_argument("-n", "--num", type=int, default=16, help="samples (default 16)")
    prev.add_argument("--cols", type=int, default=None, help="grid columns (default: square-ish)")
    prev.add_argument("--size", type=int, default=224, metavar="PX",
                      help="the pipeline's output side: RandomResizedCrop(PX), or CenterCrop(PX) "
                           "after a resize to PX * 256/224 (default 224)")
    prev.add_argument("--seed", type=int, default=0, help="seed of the sample choice and augmentations")
    prev.add_argument("--epoch", type=int, default=0, help="epoch whose augmentations to show")

    bench = sub.add_parser(
        "bench", help="images/s of the train or val pipeline on your own data",
        formatter_class=fmt,
        description="Time each stage (read, decode, fused decode + transform) on the first N "
                    "samples of PATH, single-threaded and on all threads, then the dataset "
                    "through torch's DataLoader with its per-stage statistics.",
        epilog=_EXIT_CODES)
    _pipeline_input(bench)
    bench.add_argument("-n", "--num", type=int, default=500, help="samples to time (default 500)")
    bench.add_argument("--size", type=int, default=224, metavar="PX",
                       help="the pipeline's output side: RandomResizedCrop(PX), or CenterCrop(PX) "
                            "after a resize to PX * 256/224 (default 224)")
    bench.add_argument("--threads", type=int, default=None, help="threads (default: CPU count)")
    bench.add_argument("--workers", type=int, default=None,
                       help="DataLoader workers for the loader row (default: CPU count; 0 to skip "
                            "the row)")
    bench.add_argument("--batch-size", type=int, default=64,
                       help="batch size of the DataLoader row (default 64)")
    bench.add_argument("--repeat", type=int, default=2, help="timed passes per row; the best is kept")
    parser.commands = sub.choices   # name -> subparser, for main's usage errors
    return parser


def _parse(parser, argv):
    """``parser.parse_args(argv)``, but an unknown option is reported with the usage of its
    subcommand (argparse's own would print the top-level usage) and the close matches."""
    import difflib

    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = parser.commands[args.command]
        known = [o for a in sub._actions for o in a.option_strings]
        hints = []
        for arg in extra:
            name = arg.split("=", 1)[0]
            close = difflib.get_close_matches(name, known, n=1) if name.startswith("-") else []
            if close:
                hints.append(f"{name}: did you mean {close[0]}?")
        paths = [a for a in extra if not a.startswith("-")]
        if paths and getattr(args, "path", None) is not None:
            hints.append(f"{len(paths) + 1} paths given where one is read: an unquoted brace "
                         "pattern is expanded by the shell into one argument per file; quote "
                         "it, e.g. 'train-{0000..0099}.tar'")
        sub.error(f"unrecognized arguments: {' '.join(extra)}"
                  + (f" ({'; '.join(hints)})" if hints else ""))
    return args


def _progress_args(p):
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="draw a progress bar (default: when stderr is a terminal)")
    g.add_argument("-q", "--no-progress", dest="progress", action="store_false",
                   help="no progress bar")


def _progress(args):
    return sys.stderr.isatty() if args.progress is None else args.progress


# -- commands ---------------------------------------------------------------------------------


def _cmd_convert(args, out):
    from turboloader.tools.convert import convert

    report = convert(args.src, args.dst, src_format=args.src_format, dst_format=args.dst_format,
                     image_column=args.image_column, label_column=args.label_column,
                     shard_size=args.shard_size, max_short_side=args.max_short_side,
                     max_side=args.max_side,
                     quality=args.quality, codec=args.codec, compression=args.compression,
                     workers=args.workers, overwrite=args.overwrite, strict=args.strict,
                     progress=_progress(args), shuffle=args.shuffle, seed=args.seed,
                     seekable=args.seekable, restart_mcus=args.restart_mcus)
    out(report.summary())
    if report.written == 0:
        out("error: no sample was written")
        return EXIT_ERROR
    return EXIT_SKIPPED if report.skipped else EXIT_OK


def _quantiles(a):
    import numpy as np

    if len(a) == 0:
        return "-"
    q = np.percentile(a, [0, 5, 50, 95, 100]).round().astype(int)
    return f"min {q[0]}, p5 {q[1]}, median {q[2]}, p95 {q[3]}, max {q[4]}"


_SPLITS = ("train", "val", "valid", "validation", "test")


def _splits(path, fmt):
    """The split folders (``train/``, ``val/``, ...) of a folder that holds them, each an
    ImageFolder tree of its own (class directories); empty for anything else."""
    if fmt not in (None, "folder") or not os.path.isdir(path):
        return []
    subs = sorted(e.name for e in os.scandir(path) if e.is_dir())
    found = [s for s in subs if s.lower() in _SPLITS]
    if len(found) < 2 or not all(any(e.is_dir() for e in os.scandir(os.path.join(path, s)))
                                 for s in found):
        return []
    return [os.path.join(path, s) for s in found]


def _cmd_inspect(args, out):
    splits = _splits(args.path, args.src_format)
    if not splits:
        return _inspect_one(args.path, args, out)
    # train/ and val/ side by side: one report per split, never their classes merged
    out(f"{args.path}: {len(splits)} splits ({', '.join(os.path.basename(s) for s in splits)}), "
        "each reported on its own")
    for path in splits:
        out("")
        _inspect_one(path, args, out)
    return EXIT_OK


def _inspect_one(path, args, out):
    import numpy as np

    from turboloader.tools.convert import _human, inspect_dataset

    info = inspect_dataset(path, args.src_format)
    n = info["samples"]
    out(f"{info['path']}: {info['format']}" + (f" v{info['version'][0]}.{info['version'][1]}"
                                              if "version" in info else ""))
    out(f"samples: {n}")
    if n:
        out(f"keys: {', '.join(info['first_keys'])} ... {', '.join(info['last_keys'])}")
    labels = info["labels"]
    classes = info.get("classes")
    out(f"labels: {len(labels)} distinct" + (f", {info['unlabelled']} unlabelled"
                                             if info["unlabelled"] else "")
        + (f", {len(classes)} class names" if classes else ""))
    if labels:
        counts = np.array(list(labels.values()))
        out(f"  per label: min {counts.min()}, median {int(np.median(counts))}, max {counts.max()}")
        width = max(counts.max(), 1)
        for label, c in sorted(labels.items(), key=lambda kv: (-kv[1], kv[0]))[:args.top]:
            name = f" ({classes[label]})" if classes and 0 <= label < len(classes) else ""
            out(f"  {label:>6}{name:<20} {c:8d} {'#' * max(1, round(30 * c / width))}")
        if len(labels) > args.top:
            out(f"  ... {len(labels) - args.top} more labels")
    w, h = info["widths"], info["heights"]
    if n and w.any():
        short = np.minimum(w, h)
        out(f"width:      {_quantiles(w)}")
        out(f"height:     {_quantiles(h)}")
        out(f"short side: {_quantiles(short)}")
        edges = [0, 128, 256, 320, 400, 512, 768, 1024, 2048, np.inf]
        hist, _ = np.histogram(short, bins=edges)
        cells = [f"{'<' if i == 0 else ''}{edges[i + 1] if i == 0 else edges[i]}"
                 f"{'+' if np.isinf(edges[i + 1]) else ('-' + str(int(edges[i + 1]) - 1) if i else '')}: {c}"
                 for i, c in enumerate(hist) if c]
        out("  short side histogram: " + ", ".join(cells))
    out("codecs: " + ", ".join(f"{k} {v}" for k, v in info["codecs"].most_common()))
    if "compression" in info:
        out("compression: " + ", ".join(f"{k} {v}" for k, v in info["compression"].most_common()))
        out(f"bytes: {_human(info['bytes'])} stored ({_human(info['raw_bytes'])} uncompressed), "
            f"file {_human(info['file_bytes'])}")
        meta = {k: v for k, v in info["metadata"].items() if k != "classes"}
        if meta:
            out("metadata: " + ", ".join(f"{k}={v}" for k, v in sorted(meta.items())))
    else:
        out(f"bytes: {_human(info['bytes'])} of images"
            + (f", {_human(info['bytes'] / n)} per sample" if n else ""))
    if info["skipped"]:
        out(f"unreadable: {len(info['skipped'])} (run 'turboloader verify' for the list)")
    return EXIT_OK


def _cmd_verify(args, out):
    from turboloader.tools.convert import detect_format, find_manifest, verify_dataset

    fmt = args.src_format or detect_format(args.path)
    # a folder without a manifest (an ImageFolder tree from other tools) is verified by
    # reading every image; the summary says that nothing recorded its completeness
    unlisted = args.manifest and fmt == "folder" and find_manifest(args.path, fmt) is None
    from turboloader.errors import ManifestError

    try:
        checked, bad = verify_dataset(args.path, fmt, workers=args.workers,
                                      strict=args.strict, progress=_progress(args),
                                      manifest=args.manifest)
    except ManifestError as exc:
        if "--no-manifest" in str(exc):
            raise
        # shards written by other tools (webdataset's ShardWriter) beside a conversion's
        # manifest: every manifest failure names the way to read the data alone
        raise ManifestError(f"{exc}; to verify data that 'turboloader convert' did not write "
                            "(webdataset shards, other tools' outputs), pass --no-manifest, "
                            "which reads every sample instead") from None
    for b in bad:
        out(f"{b.source}: {b.key}: {b.reason}")
    out(f"checked {checked} samples: {checked - len(bad)} ok, {len(bad)} bad")
    if unlisted:
        out(f"{args.path}: no manifest.json, so the folder was verified by reading every image "
            f"(no record says which files it should hold)")
    return EXIT_ERROR if bad else EXIT_OK


def _standard_transform(kind, size=224):
    """The ImageNet train or val pipeline (:mod:`turboloader.transforms.presets`)."""
    from turboloader.transforms.presets import imagenet_train_transform, imagenet_val_transform

    return imagenet_train_transform(size) if kind == "train" else imagenet_val_transform(size)


def _pick_samples(path, fmt, n, seed):
    """Up to ``n`` readable samples: a seeded random choice where the format allows it."""
    import random

    from turboloader.tools.sources import (Sample, _FolderSource, _ManifestSource, _TarSource,
                                           _TBLSource, open_source)

    source = open_source(path, fmt)
    rnd = random.Random(seed)
    if isinstance(source, _TarSource):
        source.shuffle(seed)  # a seeded random choice across shards (local .tar)
        picked = []
        for item in source:
            if isinstance(item, Sample):
                item.data = bytes(item.data)
                picked.append(item)
                if len(picked) >= n:
                    break
        return picked, source.classes
    if isinstance(source, _FolderSource):
        source.files = rnd.sample(source.files, min(len(source.files), 4 * n))
    elif isinstance(source, _ManifestSource):
        source.items = rnd.sample(source.items, min(len(source.items), 4 * n))
    elif isinstance(source, _TBLSource):  # random records, read lazily
        idx = rnd.sample(range(len(source.file)), min(len(source.file), 4 * n))
        f = source.file
        picked = []
        for i in idx:
            try:
                rec = f.record(i)
            except Exception:  # noqa: BLE001 - a damaged record is simply not shown
                continue
            picked.append(Sample(rec.key, rec.data, rec.label, rec.codec, f.path,
                                 width=rec.width, height=rec.height))
            if len(picked) >= n:
                break
        return picked, source.classes
    picked = [s for s in source if isinstance(s, Sample)][:n]
    return picked, source.classes


def _apply(decoder, s, *, seed, epoch, slot):
    """Sample ``s`` through ``decoder`` (the datasets' sample step on a chunk of one), with
    the random parameters of ``sample_rng(seed, epoch, slot)``."""
    from turboloader.decode import decode_image
    from turboloader.io.codec import Codec

    data = s.data
    if s.codec == Codec.RAW:  # decoded pixels: the transform only, as TBLDataset's rows
        data = decode_image(data, codec=Codec.RAW, size=(s.height, s.width), max_pixels=None)
    return decoder(data, seed=seed, epoch=epoch, slot=slot)


def _cmd_index(args, out):
    from turboloader.io.counts import count_shards, index_candidates, write_index
    from turboloader.io.remote import is_remote
    from turboloader.io.shards import count_samples, expand_urls

    urls = expand_urls(args.path)
    output = args.output or index_candidates(urls[0])[0]
    if is_remote(output) and output.split("://")[0].lower() in ("http", "https"):
        raise ValueError(f"cannot write an index over HTTP ({output!r}): pass --output with "
                         f"a path or an s3:// / gs:// / az:// URL")
    counts = count_shards(urls, count_samples, use_index=False, workers=args.workers)
    bad = [(u, c) for u, c in zip(urls, counts) if isinstance(c, BaseException)]
    for u, c in bad:
        out(f"{u}: {type(c).__name__}: {c}")
    if bad:
        raise ValueError(f"{len(bad)} of {len(urls)} shards could not be counted; no index "
                         f"written")
    write_index(urls, output, count=counts)
    out(f"{output}: {len(urls)} shards, {sum(counts)} samples")
    return EXIT_OK


def _cmd_preview(args, out):
    import math

    import numpy as np
    from PIL import Image, ImageDraw

    from turboloader.data.step import Decoder
    from turboloader.errors import TurboLoaderError
    from turboloader.transforms.presets import IMAGENET_MEAN, IMAGENET_STD

    if args.num < 1:
        raise ValueError("--num must be >= 1")
    transform = _standard_transform(args.transform, args.size)
    decoder = Decoder(transform)
    samples, classes = _pick_samples(args.path, args.src_format, 4 * args.num, args.seed)
    tiles = []
    for i, s in enumerate(samples):
        try:
            x = _apply(decoder, s, seed=args.seed, epoch=args.epoch, slot=i)
        except TurboLoaderError as exc:
            out(f"skipped {s.source}: {s.key}: {type(exc).__name__}: {exc}")
            continue
        x = x.numpy() if hasattr(x, "numpy") else np.asarray(x)
        x = x * np.array(IMAGENET_STD, np.float32)[:, None, None] + \
            np.array(IMAGENET_MEAN, np.float32)[:, None, None]
        tile = Image.fromarray((np.clip(x, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0))
        name = classes[s.label] if classes and s.label is not None and 0 <= s.label < len(classes) \
            else s.label
        text = f"{s.key.rsplit('/', 1)[-1][:18]} | {name}"
        draw = ImageDraw.Draw(tile)
        draw.rectangle((0, 0, tile.width, 12), fill=(0, 0, 0))
        draw.text((2, 0), text, fill=(255, 255, 255))
        tiles.append(tile)
        if len(tiles) >= args.num:
            break
    if not tiles:
        out(f"error: no sample of {args.path!r} could be read")
        return EXIT_ERROR
    cols = args.cols or math.ceil(math.sqrt(len(tiles)))
    rows = math.ceil(len(tiles) / cols)
    pad = 4
    tw, th = tiles[0].size
    grid = Image.new("RGB", (cols * (tw + pad) + pad, rows * (th + pad) + pad), (40, 40, 40))
    for k, tile in enumerate(tiles):
        r, c = divmod(k, cols)
        grid.paste(tile, (pad + c * (tw + pad), pad + r * (th + pad)))
    grid.save(args.output)
    out(f"wrote {args.output}: {len(tiles)} samples, {args.transform} pipeline "
        f"({', '.join(type(t).__name__ for t in transform.transforms)}), epoch {args.epoch}, "
        f"seed {args.seed}")
    return EXIT_OK


def _best(fn, repeat):
    import time

    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _loader_row(args, transform, n):
    """images/s and per-stage stats of the matching dataset through torch's DataLoader."""
    import itertools
    import time

    import torch

    from turboloader.tools.convert import detect_format

    fmt = args.src_format or detect_format(args.path)
    if fmt == "tbl":
        from turboloader.data.tbl_dataset import TBLDataset

        ds = TBLDataset(args.path, transform, on_error="skip")
        data = torch.utils.data.Subset(ds, range(min(n, len(ds))))
    elif fmt == "folder":
        from turboloader.data import ImageFolder

        ds = ImageFolder(args.path, transform, on_error="skip")
        data = torch.utils.data.Subset(ds, range(min(n, len(ds))))
    else:
        from turboloader.tools.sources import _TarSource
        from turboloader.data import TarDataset

        ds = TarDataset(_TarSource(args.path).urls, transform, shuffle=False, on_error="skip")
        data = ds
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size,
                                         num_workers=args.workers)
    # the clock starts at the first batch: worker start-up (fork, imports) is not throughput
    t0 = time.perf_counter()
    seen = 0
    for b, (images, _) in enumerate(itertools.islice(loader, -(-n // args.batch_size))):
        if b == 0 and n > args.batch_size:
            t0 = time.perf_counter()
            continue
        seen += len(images)
    seconds = time.perf_counter() - t0
    return type(ds).__name__, seen, seconds, ds.stats()


def _cmd_bench(args, out):
    import os
    import platform
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from turboloader.tools.sources import Sample, open_source
    from turboloader.data.step import Decoder
    from turboloader.decode import decode_image
    from turboloader.io.codec import Codec
    from turboloader.tools.demo import cpu_model

    if args.num < 1:
        raise ValueError("--num must be >= 1")
    threads = args.threads or os.cpu_count() or 1
    workers = (os.cpu_count() or 1) if args.workers is None else max(0, args.workers)
    args.workers = workers
    torch.set_num_threads(1)
    transform = _standard_transform(args.transform, args.size)
    decoder = Decoder(transform)
    source = open_source(args.path, args.src_format)

    def read():
        got = []
        for item in source:
            if isinstance(item, Sample) and item.codec != Codec.RAW:
                got.append(item)
                if len(got) >= args.num:
                    break
        return got

    samples = read()
    if not samples:
        out(f"error: no encoded image could be read from {args.path!r}")
        return EXIT_ERROR
    n = len(samples)
    for s in samples:
        s.data = bytes(s.data)
    rows = []
    t = _best(read, args.repeat)
    rows.append(("read (source -> bytes)", n / t))

    def decode():
        for s in samples:
            decode_image(s.data, codec=s.codec)

    rows.append(("decode (full size)", n / _best(decode, args.repeat)))

    def pipeline_one(i):
        return decoder(samples[i].data, slot=i)

    fused = "fused plan" if decoder.plan is not None else "decode + transforms"
    base = n / _best(lambda: [pipeline_one(i) for i in range(n)], args.repeat)
    rows.append((f"{args.transform} pipeline ({fused}), 1 thread", base))
    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            rate = n / _best(lambda: list(pool.map(pipeline_one, range(n))), args.repeat)
        rows.append((f"{args.transform} pipeline ({fused}), {threads} threads", rate))
    stats = None
    if workers > 0:
        name, seen, seconds, stats = _loader_row(args, transform, n)
        rows.append((f"{name} + DataLoader, {workers} workers, batch {args.batch_size} "
                     f"(after the first batch)", seen / seconds))

    out(f"machine: {os.cpu_count()} CPUs, {cpu_model()}, {platform.system()} "
        f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}")
    out(f"data: {args.path} ({n} samples, {sum(len(s.data) for s in samples) / n / 1000:.1f} "
        f"KB/image), transform: {args.transform} {args.size}")
    width = max(len(r[0]) for r in rows)
    out(f"| {'stage':<{width}} | images/s | ms/image | vs 1-thread pipeline |")
    out(f"|{'-' * (width + 2)}|---------:|---------:|---------------------:|")
    for label, rate in rows:
        out(f"| {label:<{width}} | {rate:8.0f} | {1000 / rate:8.2f} | {rate / base:19.2f}x |")
    hint = _busy_hint(threads, base, rows[-1][1] if threads > 1 else None)
    if hint:
        out(hint)
    if stats is not None and stats.get("samples"):
        k = stats["samples"]
        out(f"loader per-stage time (summed over workers, per sample): "
            f"read {1e3 * stats['read_s'] / k:.2f} ms, decode {1e3 * stats['decode_s'] / k:.2f} ms, "
            f"transform {1e3 * stats['transform_s'] / k:.2f} ms; {len(stats['skipped'])} skipped")
    return EXIT_OK


def _busy_hint(threads, one, many) -> str | None:
    """A note when ``threads`` threads decoded no faster than one: the decode scales with
    cores, so the cores were not free (other processes) or fewer than asked."""
    if many is None or many > one:
        return None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return (f"note: {threads} threads were not faster than 1 ({many / one:.2f}x): the decode "
            f"scales with free cores, so this machine's were busy"
            + (f" (load average {load:.1f} on {os.cpu_count()} CPUs)" if load is not None
               else "") + " or fewer than --threads; rerun on an idle machine, or pass "
            "--threads with the number of free cores")


def main(argv=None):
    """Run the command line; return the process exit code.

    Example:
        >>> main(["inspect", "train.tbl"])     # doctest: +SKIP
        0
    """
    args = _parse(_build_parser(), argv)
    if args.command == "demo":
        from turboloader.tools.demo import run_demo

        return run_demo(num_images=args.num_images, seed=args.seed, workers=args.workers,
                        batch_size=args.batch_size, epochs=args.epochs)
    commands = {"convert": _cmd_convert, "inspect": _cmd_inspect, "verify": _cmd_verify,
                "preview": _cmd_preview, "bench": _cmd_bench, "index": _cmd_index}

    def out(line):
        print(line, flush=True)

    from turboloader.errors import TurboLoaderError

    try:
        return commands[args.command](args, out)
    except BrokenPipeError:
        # the reader went away ('turboloader inspect x | head'): exit quietly, as Unix
        # tools do; stdout is pointed at devnull so the interpreter's final flush is silent
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    except KeyboardInterrupt:
        print(f"turboloader {args.command}: interrupted", file=sys.stderr)
        return 130
    except (TurboLoaderError, OSError, ValueError) as exc:
        msg = str(exc) if not isinstance(exc, OSError) or not exc.filename else \
            f"{exc.strerror}: {exc.filename!r}"
        print(f"turboloader {args.command}: error: {msg}", file=sys.stderr)
        for note in getattr(exc, "__notes__", ()):
            print(f"  {note}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
