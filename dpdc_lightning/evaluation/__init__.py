"""Evaluation of synthetic sets: train fresh networks on them, test on the real test split."""

from dpdc_lightning.evaluation.results import (
    REDUCED_BANNER,
    ModelResult,
    format_table,
    protocol_line,
    results_to_json,
)
from dpdc_lightning.evaluation.train_eval import (
    EvalProtocol,
    SyntheticClassifier,
    train_and_test,
    train_network,
)

__all__ = [
    "REDUCED_BANNER",
    "EvalProtocol",
    "ModelResult",
    "SyntheticClassifier",
    "format_table",
    "protocol_line",
    "results_to_json",
    "train_and_test",
    "train_network",
]
