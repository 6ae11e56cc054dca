"""Evaluate synthetic sets:

    python evaluate.py RUN_DIR [RUN_DIR ... | SWEEP_DIR] [model=convnet,mlp] [eval.runs=5]

    python evaluate.py --help
    python evaluate.py --images FILE.pt dataset=NAME [model=...] [eval.*=...]
    python evaluate.py --baseline random-real dataset=digits method.ipc=10

The same command is installed as ``dpdc-evaluate`` (dpdc_lightning/evaluation/command.py).
"""

from dpdc_lightning.cli.commands import evaluate_main as main
from dpdc_lightning.errors import main_entry

if __name__ == "__main__":
    main_entry(main)
