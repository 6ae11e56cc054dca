"""Condense a private dataset: python train.py [group=name ...] [key=value ...] [--print-config]

    python train.py --help
    python train.py method=ndpdc
    python train.py method=ndpdc dataset=fashion_mnist privacy.target_epsilon=1 trainer.devices=2
    python train.py -m method=ndpdc privacy.target_epsilon=0.5,1,2,5 seed=0,1 --evaluate eval=quick
    python train.py forget=RUN_DIR   # delete an abandoned run's secret (it can then not be resumed)

The same command is installed as ``dpdc-train`` (dpdc_lightning/cli/commands.py).
"""

from dpdc_lightning.errors import main_entry


def main(argv: list[str]) -> int | None:
    """The command, imported inside :func:`main_entry`'s run: a Ctrl-C while it loads ends as
    any Ctrl-C does (one line, exit code 130)."""
    from dpdc_lightning.cli.commands import train_main

    return train_main(argv)


if __name__ == "__main__":
    main_entry(main)
