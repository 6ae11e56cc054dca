"""``python -m dpdc_lightning.export RUN_DIR --to DIR [--scale fixed|per-image]`` (``dpdc-export``):
a bundle as an ImageFolder of PNGs, labels.csv and the exact tensors."""

from __future__ import annotations

from dpdc_lightning.cli.parser import Parser
from dpdc_lightning.errors import UserError, refuse_missing_paths

USAGE = "usage: python -m dpdc_lightning.export RUN_DIR --to DIR [--scale fixed|per-image]"


def export_main(argv: list[str]) -> int:
    parser = Parser("python -m dpdc_lightning.export", USAGE)
    parser.add_argument("--to", metavar="a folder")
    parser.add_argument("--scale", default="fixed")
    args = parser.parse(argv)
    if args.help:
        from dpdc_lightning.engine.bundle import export_image_folder

        print(USAGE + "\n\n" + (export_image_folder.__doc__ or ""))
        return 0
    # Before torch loads; an unquoted space in the folder's name gets a hint.
    refuse_missing_paths(args.rest[:1], what="bundle folder", argv=argv)
    if len(args.rest) != 1 or not args.to:
        raise UserError(USAGE)
    from dpdc_lightning.engine.bundle import export_image_folder

    print(export_image_folder(args.rest[0], args.to, scale=args.scale))
    return 0
