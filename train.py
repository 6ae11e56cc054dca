"""Condense a private dataset: python train.py [group=name ...] [key=value ...] [--print-config]

    python train.py method=ndpdc
    python train.py method=ndpdc dataset=fashion_mnist privacy.target_epsilon=1 trainer.devices=2
"""

import os
import sys

from dpdc_lightning.cli import run


def main(argv: list[str]) -> int:
    from dpdc_lightning.config import compose, to_yaml
    from dpdc_lightning.errors import UserError

    flags = [a for a in argv if a.startswith("-")]
    if set(flags) - {"--print-config"}:
        raise UserError(f"unknown flag {sorted(set(flags) - {'--print-config'})[0]}; "
                        "usage: python train.py [group=name ...] [key=value ...] [--print-config]")
    config = compose([a for a in argv if not a.startswith("-")])
    if flags:
        print(to_yaml(config), end="")
        return 0
    from dpdc_lightning.training import train

    run_dir = train(config)
    if os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0":
        print(f"bundle written to {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
