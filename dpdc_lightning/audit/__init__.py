"""Privacy audit of a released synthetic set: membership inference (loss threshold, LiRA),
empirical ε lower bounds, a one-run canary audit, visual privacy, and the analyses of Dong et al. /
DPDC §3.1.

    python audit.py RUN_DIR [audit.key=value ...]
    python -m dpdc_lightning.audit metrics --scores S.npy --members M.npy
        [--delta D] [--confidence C]
"""
