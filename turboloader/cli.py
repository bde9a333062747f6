"""The ``turboloader`` command line."""

import argparse
import sys

__all__ = ["main"]


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="turboloader", description="Fast image data loading for PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo", help="generate photograph-like JPEGs and compare turboloader with Pillow + torchvision",
        description="Generates photograph-like JPEGs in memory, runs the ImageNet train-sample path "
                    "(decode, RandomResizedCrop 224, flip, normalize) through turboloader and through "
                    "Pillow + torchvision v2, checks they agree, and prints images/s and the ratio.")
    demo.add_argument("-n", "--num-images", type=int, default=300, help="images to generate (default 300)")
    demo.add_argument("--seed", type=int, default=0, help="seed for the images and the crops (default 0)")
    demo.add_argument("--threads", type=int, default=None,
                      help="threads for the multi-threaded row (default: CPU count)")
    demo.add_argument("--repeat", type=int, default=3, help="timed passes per pipeline; the best is kept")
    return parser


def main(argv=None):
    """Run the command line; return the process exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "demo":
        from turboloader.demo import run_demo

        return run_demo(num_images=args.num_images, seed=args.seed, threads=args.threads,
                        repeat=args.repeat)
    return 2  # unreachable: argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
