"""Black-box audits: what an attacker who sees only the release, or a classifier trained on it,
learns about the private records.

- :mod:`.runner` one classifier audit (``audit.py mia``): shadows, attacks, canaries, visual
  privacy and the analyses, in one report;
- :mod:`.shadows` condensations on random halves of the private records and fresh classifiers;
- :mod:`.attacks` loss threshold and LiRA from the shadows' statistics;
- :mod:`.membership` each target shadow and the release attacked with them;
- :mod:`.release` attacks that read the released images themselves (``audit.py release``);
- :mod:`.visual` how close each synthetic image is to a private one;
- :mod:`.analysis` the analyses of Dong et al. 2022 and its refutation (DPDC §3.1).
"""
