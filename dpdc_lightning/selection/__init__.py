"""Private hyperparameter selection (Papernot & Steinke, "Hyperparameter Tuning with Rényi
Differential Privacy", ICLR 2022): K ~ law trials over a grid of members, each a whole private
condensation scored by a noisy count, and only the best released.

- :mod:`.settings` ``select=...`` and ``select.*`` (not part of a run's config);
- :mod:`.grid` the members, composed and checked from public inputs before anything runs;
- :mod:`.run` the selection in order: split, calibration, draws, trials, release of the winner;
- :mod:`.trials` the keyed validation split, each member's plan, one trial in process, the
  winner's folder;
- :mod:`.score` a trial's noisy score; :mod:`.estimate` how long a trial takes (public stand-in).

Its privacy (the law of K, the RDP of repeat-and-select, the per-trial budget, the score's share)
is the accountant's: privacy/selection/, which ``dpdc-privacy verify`` reads without running a
trial. The command line's part is cli/select.py, the report's section report/selection.py, the
neighbouring check audit/neighbours/selection.py.
"""
