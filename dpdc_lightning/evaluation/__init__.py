"""Evaluation of synthetic sets: train fresh networks on them, test on the real test split.

Names are imported on first use (PEP 562): ``evaluate.py --help`` must not load Lightning.
"""

from __future__ import annotations

from dpdc_lightning.lazy import lazy_getattr

_WHERE = {
    "REDUCED_BANNER": "results",
    "ModelResult": "results",
    "format_table": "results",
    "protocol_line": "results",
    "results_to_json": "results",
    "EvalProtocol": "train_eval",
    "SyntheticClassifier": "train_eval",
    "train_and_test": "train_eval",
    "train_network": "train_eval",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_getattr(__name__, _WHERE)
