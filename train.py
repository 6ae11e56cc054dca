"""Condense a private dataset: python train.py [group=name ...] [key=value ...] [--print-config]

    python train.py method=ndpdc
    python train.py method=ndpdc dataset=fashion_mnist privacy.target_epsilon=1 trainer.devices=2
    python train.py forget=RUN_DIR   # delete an abandoned run's secret (it can then not be resumed)
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
    forget = [a for a in argv if a.startswith("forget=")]
    if forget:
        if len(argv) != 1 or not forget[0].partition("=")[2]:
            raise UserError("usage: python train.py forget=RUN_DIR (nothing else on the line)")
        from pathlib import Path

        from dpdc_lightning.training import forget_run

        print(forget_run(Path(forget[0].partition("=")[2])))
        return 0
    config = compose([a for a in argv if not a.startswith("-")])
    if flags:
        print(to_yaml(config), end="")
        return 0
    from dpdc_lightning.training import end_of_run_line, train

    run_dir = train(config)
    if os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0":
        print(end_of_run_line(run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
