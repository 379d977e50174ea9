"""`scalerl.fit.predict`, an import path kept for users: `predict_final` and the
predictions.parquet schema and files live in `scalerl.fit.forecast.predict` (the forecasting
layer); this module re-exports their public names (its `__all__`), the same objects.

Nothing in scalerl imports it (tests/fit/test_layout.py checks both). Deliberately left out:
any code of its own.
"""

from scalerl.fit.forecast.predict import *  # noqa: F403 (its __all__, below)
from scalerl.fit.forecast.predict import __all__  # noqa: F401
