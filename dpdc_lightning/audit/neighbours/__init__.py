"""The neighbouring-run harness: D and D' (one record removed, or replaced) through train.py's code
in process with the same secret; every output compared against the release ledger and every call
of the Gaussian mechanism against its sensitivity (:mod:`.harness` says how).

- :mod:`.harness` one case: D, D' with the same secret, D' with coupled releases; its verdict
  (read this first: it is the check's logic);
- :mod:`.cases` what a case is and the cases ``audit.py check`` runs for one method;
- :mod:`.records` the data of the cases; :mod:`.changes` D' built from D;
- :mod:`.running` one execution of train.py in process; D's data and run, made once; the secret;
- :mod:`.coupling` the tap on the mechanism and the coupled Poisson sampling;
- :mod:`.draws` every draw of the noise streams, logged;
- :mod:`.calls` the checks on mechanism calls and noise draws (keys, std, control flow,
  sensitivity, partition isolation);
- :mod:`.events` every call's event spent once, every spend a call's; noise keyed by the whole
  secret;
- :mod:`.probe` worst-case records added through the method's own rows (no other row may move);
  :mod:`.search` the one of them searched by gradient ascent through the rows;
- :mod:`.outputs` every output of a run, flattened; :mod:`.compare` two runs against the ledger;
- :mod:`.patches` temporary replacements, undone after each run;
- :mod:`.selection` neighbouring private SELECTIONS (``audit.py check ... select=private``), their
  configuration in :mod:`.selection_case`, the taps on the selection's driver in
  :mod:`.selection_taps`.
"""

from dpdc_lightning.audit.neighbours.calls import ROUNDING
from dpdc_lightning.audit.neighbours.cases import Case, check_cases
from dpdc_lightning.audit.neighbours.harness import Verdict, run_case
from dpdc_lightning.audit.neighbours.running import SECRET, reference, train_tokens

__all__ = [
    "ROUNDING",
    "SECRET",
    "Case",
    "Verdict",
    "check_cases",
    "reference",
    "run_case",
    "train_tokens",
]
