"""`scalerl.fit.predict`, an import path kept for users: `predict_final` and the
predictions.parquet schema and files live in `scalerl.fit.forecast.predict` (the forecasting
layer); this module re-exports their public names, the same objects.

Nothing in scalerl imports it (tests/fit/test_layout.py checks both). Deliberately left out:
any code of its own.
"""

from scalerl.fit.forecast.predict import (
    FORMS,
    INTERVAL_COLUMNS,
    OPTIONAL_COLUMNS,
    PREDICTIONS_SCHEMA,
    RECENT_COLUMNS,
    Prediction,
    merge_predictions,
    predict_final,
    prediction_rows,
    read_predictions,
    recent_level,
    write_predictions,
)

__all__ = ["Prediction", "predict_final", "PREDICTIONS_SCHEMA", "FORMS", "prediction_rows",
           "OPTIONAL_COLUMNS", "merge_predictions", "write_predictions", "read_predictions",
           "INTERVAL_COLUMNS", "RECENT_COLUMNS", "recent_level"]
