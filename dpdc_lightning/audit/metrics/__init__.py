"""What every audit measures: attack metrics and the ε lower bounds they give.

- :mod:`.roc` ROC, AUC, TPR at a fixed FPR, advantage, Clopper–Pearson, ε from error rates;
- :mod:`.bounds` ε lower bounds from the canary scores of many runs (Clopper–Pearson, Gaussian DP,
  one run);
- :mod:`.canary` auditing in one run (Steinke, Nasr & Jagielski 2023) and the canaries;
- :mod:`.figures` the ROC curves and the canary-statistic histogram.
"""
