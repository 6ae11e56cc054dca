"""The command line: ``train``, ``evaluate``, ``audit``, ``privacy`` and ``export`` entry points
(``commands.py``), sweeps (``sweep.py``), and :func:`run` (errors.py), the wrapper every entry goes
through: a UserError becomes one line on stderr and exit code 2, never a traceback; Ctrl-C becomes
one line and exit code 130.

Nothing here imports torch or Lightning: ``--help`` and a bad argument answer before they load.
"""

from __future__ import annotations

from dpdc_lightning.errors import run

__all__ = ["run"]
