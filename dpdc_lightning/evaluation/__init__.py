"""Evaluation of synthetic sets: train fresh networks on them, test on the real test split.

protocol.py (the protocol: settings, schedule, batches, optimiser), engines/ (how the runs are
trained: lightning, sequential, stacked), train_test.py (the entry points), results.py and plot.py
(tables, eval.json, figures), progress.py, command.py (``evaluate.py``), image_file.py (its
``--images FILE``).

Names are imported on first use (PEP 562): ``evaluate.py --help`` must not load torch.
"""

from __future__ import annotations

from dpdc_lightning.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        "PRIVATE_TEST_NOTE": "results",
        "REDUCED_BANNER": "results",
        "ModelResult": "results",
        "format_table": "results",
        "protocol_line": "results",
        "results_to_json": "results",
        "EvalProtocol": "protocol",
        "PAPER_EPOCHS": "protocol",
        "PAPER_RUNS": "protocol",
        "EvalProgress": "progress",
        "COMPILE_MODES": "engines",
        "ENGINES": "engines",
        "EvalTask": "dpdc_lightning.evaluation.engines.base",
        "resolve_device": "dpdc_lightning.evaluation.engines.base",
        "resolve_engine": "dpdc_lightning.evaluation.engines.base",
        "train_and_test": "train_test",
        "train_network": "train_test",
    },
)
