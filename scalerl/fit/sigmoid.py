"""`scalerl.fit.sigmoid`, an import path kept for users: the sigmoid, `FitConfig` and the fit
live in `scalerl.fit.curves.sigmoid` (the curve-math layer); this module re-exports its public
names (its `__all__`), the same objects.

Nothing in scalerl imports it (tests/fit/test_layout.py checks both). Deliberately left out:
any code of its own.
"""

from scalerl.fit.curves.sigmoid import *  # noqa: F403 (its __all__, below)
from scalerl.fit.curves.sigmoid import __all__  # noqa: F401
