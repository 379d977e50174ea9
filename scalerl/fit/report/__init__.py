"""Layer 4 of scalerl.fit, report and plots: the scaling report (scaling.md / .parquet), its
sections, the text table of forecasts, and every figure.

Imports the layers below it (`curves`, `readers`, `forecast`); no argument parsing here
(`commands` above). Import the modules themselves; this package face re-exports nothing.
"""
