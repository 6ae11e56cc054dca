"""What touches private values, and only that: every private query is a Poisson-subsampled
Gaussian mechanism on clipped sums. Never imports the accountant.

- :mod:`.sampling` Poisson subsampling of private steps (fixed-size sampling for baselines);
- :mod:`.gaussian` clipping and the Gaussian mechanism; the only code that noises private values
  and the source of every ``PrivacyEvent``;
- :mod:`.per_example` PSG's private gradient: per-example gradients, flat clipping, one Gaussian
  sum; the batch-norm refusal of private methods;
- :mod:`.noise` where the noise comes from: a SHAKE-256 stream keyed by the run's secret;
- :mod:`.secret` the run's secret seed (OS entropy, kept owner-only until the bundle is written);
- :mod:`.counts` class sizes released by the Gaussian mechanism (``privacy.class_sizes=private``).
"""
