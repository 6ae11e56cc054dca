"""Evaluate a synthetic set: python evaluate.py RUN_DIR [model=convnet,mlp] [eval.runs=5] [eval.epochs=1000]

    python evaluate.py --images FILE.pt dataset=NAME [model=...] [eval.*=...]
    python evaluate.py --baseline random-real dataset=digits method.ipc=10
"""

import sys

from dpdc_lightning.cli import run


def main(argv: list[str]) -> int:
    from dpdc_lightning.evaluation.command import evaluate_main

    return evaluate_main(argv)


if __name__ == "__main__":
    sys.exit(run(main))
