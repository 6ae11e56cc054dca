"""Differential privacy: the DP-critical surface of the package (sampling included). Pure: no
Lightning, no data loading; after Opacus, mechanism, analysis and accountant are apart.

- :mod:`.mechanisms` what touches private values: Poisson sampling, clipping and the Gaussian
  mechanism (the source of every :class:`PrivacyEvent`), PSG's per-example gradients, the keyed
  noise, the run's secret, the released class sizes. Never imports the accountant.
- :mod:`.accounting` what the releases cost: ε of histories (wrapping Opacus), the stateful
  accountant, calibration, the run's budget, the composition of several releases, and ε by
  Google's dp-accounting as a cross-check.
- :mod:`.planning` the run's plan (:class:`StepSchedule`, :class:`PrivacyPlan`, plan.json), fixed
  before any data is read by ``make_plan``; the settings whose ε promises nothing.
- :mod:`.receipts` what a run writes about its privacy: privacy.json (report, inputs, release
  ledger), the digests that tie the files together, the run folder's file list, manifest.json and
  the owner's signature.
- :mod:`.verification` ``dpdc-privacy verify``: the receipt's shape, the files checked against each
  other, plan.json against config.yaml, every ε recomputed, the verdict.
- :mod:`.selection` private hyperparameter selection's law of the number of trials, its RDP, its
  budget, the score's share and its verification.
- :mod:`.display` how an ε and a run's privacy steps are written for a reader (every output).
- ``python -m dpdc_lightning.privacy`` the calculator (:mod:`.__main__`).

Names are imported lazily (PEP 562) so that the calculator answers argument errors without
first loading torch and Opacus.
"""

from __future__ import annotations

from dpdc_lightning.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        "PrivacyEvent": "dpdc_lightning.privacy.mechanisms.gaussian",
        "clip_rows": "dpdc_lightning.privacy.mechanisms.gaussian",
        "gaussian_noise_like": "dpdc_lightning.privacy.mechanisms.gaussian",
        "gaussian_sum": "dpdc_lightning.privacy.mechanisms.gaussian",
        "noisy_clipped_sum": "dpdc_lightning.privacy.mechanisms.gaussian",
        "noisy_clipped_mean": "dpdc_lightning.privacy.mechanisms.gaussian",
        "per_example_gradients": "dpdc_lightning.privacy.mechanisms.per_example",
        "clipped_gradient_sum": "dpdc_lightning.privacy.mechanisms.per_example",
        "private_gradient": "dpdc_lightning.privacy.mechanisms.per_example",
        "refuse_batch_norm": "dpdc_lightning.privacy.mechanisms.per_example",
        "NoiseStream": "dpdc_lightning.privacy.mechanisms.noise",
        "KeyedNoise": "dpdc_lightning.privacy.mechanisms.noise",
        "SeededNoise": "dpdc_lightning.privacy.mechanisms.noise",
        "noise_source": "dpdc_lightning.privacy.mechanisms.noise",
        "ACCOUNTANTS": "dpdc_lightning.privacy.accounting.analysis",
        "epsilon_from_history": "dpdc_lightning.privacy.accounting.analysis",
        "epsilon_from_rdp": "dpdc_lightning.privacy.accounting.analysis",
        "rdp_vector": "dpdc_lightning.privacy.accounting.analysis",
        "PrivacyAccountant": "dpdc_lightning.privacy.accounting.accountant",
        "calibrate_noise_multiplier": "dpdc_lightning.privacy.accounting.calibration",
        "max_steps": "dpdc_lightning.privacy.accounting.calibration",
        "PrivacyPlan": "dpdc_lightning.privacy.planning.plan",
        "StepSchedule": "dpdc_lightning.privacy.planning.plan",
    },
)
