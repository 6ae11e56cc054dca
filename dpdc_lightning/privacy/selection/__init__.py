"""The privacy of a private hyperparameter selection (Papernot & Steinke, ICLR 2022,
arXiv:2110.03620): run K ~ law trials, release only the best.

- :mod:`.trial_law` the law of the number K of trials;
- :mod:`.rdp` the RDP of repeat-and-select (Theorems 2 and 6);
- :mod:`.budget` the per-trial budget that meets a total target, and privacy.json's section;
- :mod:`.score_share` the selection score's noise as a public share of the target;
- :mod:`.verify` ``dpdc-privacy verify`` of a release a selection chose.
"""
