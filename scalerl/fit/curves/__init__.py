"""Layer 1 of scalerl.fit, curve math: the sigmoid and its fit, the power law, bootstrap
intervals, eval noise and weights, collapse detection, one curve end to end (fit.json), the
common-A comparison, and the paper's Table 1 curves.

Arrays in, fits out: nothing here reads files, forecasts a run or draws (those are the
`readers`, `forecast` and `report` layers above). Import the modules themselves; this package
face re-exports nothing.
"""
