"""Evaluate synthetic sets:

    python evaluate.py RUN_DIR [RUN_DIR ... | SWEEP_DIR] [model=convnet,mlp] [eval.runs=5]

    python evaluate.py --help
    python evaluate.py --images FILE.pt dataset=NAME [model=...] [eval.*=...]
    python evaluate.py --baseline random-real dataset=digits method.ipc=10

The same command is installed as ``dpdc-evaluate`` (dpdc_lightning/evaluation/command.py).
"""

from dpdc_lightning.errors import main_entry


def main(argv: list[str]) -> int | None:
    """The command, imported inside :func:`main_entry`'s run: a Ctrl-C while it loads ends as
    any Ctrl-C does (one line, exit code 130)."""
    from dpdc_lightning.cli.commands import evaluate_main

    return evaluate_main(argv)


if __name__ == "__main__":
    main_entry(main)
