"""The engine: the only package that imports Lightning. It runs a method (methods/) on a Trainer:
the LightningModule adapter (``method_module``), the privacy callback around the run's budget
(``privacy_callback``), the private data stream (``datamodule``), trainer construction
(``trainer``), run folders and bundles (``run_folder``, ``bundle``), progress, TensorBoard and image
grids, checkpoint IO, the plan of a run (``planning``), :func:`condense` and :func:`train`; and the
Lightning side of ``eval.engine=lightning`` (``evaluation_module``, called by evaluation/engines/lightning.py).

Names are imported on first use (PEP 562).
"""

from __future__ import annotations

from dpdc_lightning.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        "Condensation": "dpdc_lightning.engine.condense",
        "CondensedSet": "dpdc_lightning.engine.condense",
        "train": "dpdc_lightning.engine.training",
        "load_bundle": "dpdc_lightning.engine.bundle",
        "plan_run": "dpdc_lightning.engine.planning",
        "load_data": "dpdc_lightning.engine.planning",
    },
)
