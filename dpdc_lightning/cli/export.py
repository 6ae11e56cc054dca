"""``python -m dpdc_lightning.export RUN_DIR --to DIR [--scale fixed|per-image]`` (``dpdc-export``):
a bundle as an ImageFolder of PNGs, labels.csv and the exact tensors."""

from __future__ import annotations

from dpdc_lightning.cli.parser import Parser
from dpdc_lightning.errors import UserError

USAGE = "usage: python -m dpdc_lightning.export RUN_DIR --to DIR [--scale fixed|per-image]"


def export_main(argv: list[str]) -> int:
    from dpdc_lightning.engine.bundle import export_image_folder

    parser = Parser("python -m dpdc_lightning.export", USAGE)
    parser.add_argument("--to", metavar="a folder")
    parser.add_argument("--scale", default="fixed")
    args = parser.parse(argv)
    if args.help:
        print(USAGE + "\n\n" + (export_image_folder.__doc__ or ""))
        return 0
    if len(args.rest) != 1 or not args.to:
        raise UserError(USAGE)
    print(export_image_folder(args.rest[0], args.to, scale=args.scale))
    return 0
