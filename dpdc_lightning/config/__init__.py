"""Configuration: the schemas of every config group (plain dataclasses, no torch), the YAML groups
in ``dpdc_lightning/conf/``, and composition, overrides and sweeps on Hydra.

    from dpdc_lightning.config import compose
    config = compose(["method=ndpdc", "privacy.target_epsilon=2"])   # a validated RunConfig

- :mod:`.schema` the group schemas (dataset, privacy, eval, model, augment, RunConfig);
- :mod:`.methods` the built-in methods' schemas; :mod:`.registry` every method's name, schema and
  code (built-in, installed plug-ins, registered at runtime: ``METHOD_SCHEMAS``);
- :mod:`.store` their registration in Hydra's ConfigStore;
- :mod:`.composition` Hydra's compose API behind :func:`compose`, errors as one ``UserError`` line;
- :mod:`.validation` the one validator: a composed config to typed objects;
- :mod:`.locations` where the data lives: kept in the run's owner-only .provenance.json, left
  out of config.yaml and every other released file; ``config_hash``, the digest of config.yaml;
- :mod:`.help` the ``--help`` page.

Names are imported on first use (PEP 562).
"""

from __future__ import annotations

from dpdc_lightning.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        "CONF_DIR": "schema",
        "GROUPS": "schema",
        "AugmentConfig": "schema",
        "DatasetConfig": "schema",
        "EvalConfig": "schema",
        "ModelConfig": "schema",
        "PrivacyConfig": "schema",
        "RunConfig": "schema",
        "require_composed": "schema",
        "METHOD_SCHEMAS": "registry",
        "MethodConfig": "methods",
        "compose": "composition",
        "compose_resume": "composition",
        "validate": "validation",
        "to_yaml": "validation",
        "config_hash": "locations",
        "released_yaml": "locations",
        "data_locations": "locations",
        "read_locations": "locations",
    },
)
