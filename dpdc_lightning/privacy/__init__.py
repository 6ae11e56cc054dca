"""Differential privacy: the DP-critical surface of the package (sampling included). Pure: no
Lightning, no data loading; after Opacus, mechanism, analysis and accountant are apart.

- :mod:`.sampling` Poisson subsampling of private steps (fixed-size sampling for baselines).
- :mod:`.mechanisms` clipping and the Gaussian mechanism; the only code that noises private values
  and the source of every :class:`PrivacyEvent`. Never imports the accountant.
- :mod:`.per_example` PSG's private gradient: per-example gradients (torch.func), flat clipping to
  C, one Gaussian sum divided by the expected batch size; the batch-norm refusal of private methods.
- :mod:`.noise` where the noise comes from: a SHAKE-256 stream keyed by the run's secret, 53-bit
  uniforms, Box-Muller in float64 (or, NOT private, a seeded torch generator).
- :mod:`.secret` the run's secret seed (OS entropy, kept owner-only until the bundle is written).
- :mod:`.counts` class sizes released by the Gaussian mechanism (``privacy.class_sizes=private``).
- :mod:`.plan` the run's plan (:class:`StepSchedule`, :class:`PrivacyPlan`, plan.json);
  :mod:`.planner` ``make_plan``: sample rates, δ < 1/N, the noise multiplier or step count fixed.
- :mod:`.analysis` pure ε computations over histories, wrapping Opacus (RDP, PRV).
- :mod:`.accounting` :class:`PrivacyAccountant`, the stateful history with phases.
- :mod:`.calibration` noise multiplier for a target ε; largest step count within a target.
- :mod:`.budget` the plan enforced and the events spent composed, step by step.
- :mod:`.composition` the cost of publishing several releases of one data set (a sweep).
- :mod:`.report`, :mod:`.inputs`, :mod:`.ledger` privacy.json: the guarantee, every input with its
  privacy status, and every output an accounted mechanism released.
- ``python -m dpdc_lightning.privacy`` the calculator (:mod:`.__main__`).

Names are imported lazily (PEP 562) so that the calculator answers argument errors without
first loading torch and Opacus.
"""

from __future__ import annotations

from dpdc_lightning.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        "PrivacyEvent": "mechanisms",
        "clip_rows": "mechanisms",
        "gaussian_noise_like": "mechanisms",
        "gaussian_sum": "mechanisms",
        "noisy_clipped_sum": "mechanisms",
        "noisy_clipped_mean": "mechanisms",
        "per_example_gradients": "per_example",
        "clipped_gradient_sum": "per_example",
        "private_gradient": "per_example",
        "refuse_batch_norm": "per_example",
        "NoiseStream": "noise",
        "KeyedNoise": "noise",
        "SeededNoise": "noise",
        "noise_source": "noise",
        "ACCOUNTANTS": "analysis",
        "epsilon_from_history": "analysis",
        "epsilon_from_rdp": "analysis",
        "rdp_vector": "analysis",
        "PrivacyAccountant": "accounting",
        "calibrate_noise_multiplier": "calibration",
        "max_steps": "calibration",
    },
)
