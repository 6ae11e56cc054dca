"""What the releases cost: pure ε computations and the state that composes them.

- :mod:`.analysis` ε of histories of Poisson-subsampled Gaussian mechanisms (wraps Opacus' RDP,
PRV);
- :mod:`.accountant` ``PrivacyAccountant``, the stateful history with phases;
- :mod:`.calibration` the noise multiplier for a target ε; the largest step count within one;
- :mod:`.budget` one run's plan enforced and its events composed, step by step;
- :mod:`.composition` the cost of publishing several releases of one data set (a sweep);
- :mod:`.crosscheck` ε of a history by Google's dp-accounting, the verifier's second opinion.
"""
