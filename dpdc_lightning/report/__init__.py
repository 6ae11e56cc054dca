"""``report.html``: a release explained on one self-contained page (a run's, or a sweep's).

- ``run.py``: the page of a run folder, written beside its bundle (engine/bundle.py) and rendered
  again by ``evaluate.py`` and ``audit.py``; ``extras.py``: its evaluation and audit sections;
- ``sweep.py``: the page of a sweep folder over its members, with the composed ε;
- ``html.py``: escaped, semantic HTML with inlined images; ``events.py``: ε and the loss per step
  from the run's TensorBoard log.

Figures come from :mod:`dpdc_lightning.plots`; nothing here imports the engine, so the engine can
call in.
"""
