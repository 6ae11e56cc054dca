"""The neighbouring-run harness: D and D' (one record removed, or replaced) through train.py's code
in process with the same secret; every output compared against the release ledger and every call
of the Gaussian mechanism against its sensitivity (:mod:`.harness` says how).

- :mod:`.cases` what a case is and the cases ``audit.py check`` runs for one method;
- :mod:`.records` the data of the cases and D' built from D;
- :mod:`.coupling` the tap on the mechanism and the coupled Poisson sampling;
- :mod:`.outputs` every output of a run, flattened, and the comparison against the ledger;
- :mod:`.patches` temporary replacements, undone after each run;
- :mod:`.harness` one case: D, D' with the same secret, D' with coupled releases; its verdict.
"""

from dpdc_lightning.audit.neighbours.cases import Case, check_cases
from dpdc_lightning.audit.neighbours.harness import (
    ROUNDING,
    SECRET,
    Verdict,
    reference,
    run_case,
    train_tokens,
)

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
