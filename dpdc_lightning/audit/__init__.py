"""Privacy audit of a released synthetic set: membership inference (loss threshold, LiRA),
empirical ε lower bounds, a one-run canary audit, visual privacy, and the analyses of Dong et al. /
DPDC §3.1.

    python audit.py RUN_DIR [audit.key=value ...]
    python -m dpdc_lightning.audit metrics --scores S.npy --members M.npy
        [--delta D] [--confidence C]

- :mod:`.whitebox` the transcript audit of a method's own mechanism, and its self-test;
- :mod:`.blackbox` attacks on the release and on classifiers trained on it (``mia``, ``release``);
- :mod:`.neighbours` neighbouring runs D, D' compared against the release ledger (``check``);
- :mod:`.metrics` attack metrics, ε lower bounds and one-run canaries, shared by all three;
- :mod:`.check`, :mod:`.settings`, :mod:`.files` the ``check`` mode, ``audit.*`` settings, and the
  files an audit reads and writes.
"""
