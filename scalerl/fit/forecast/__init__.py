"""Layer 3 of scalerl.fit, forecasting: a run's final value and ceiling from its points so far,
their calibrated intervals, the backtest of forecasts, the racing rule, the forecasts of the
runs of any log, and the curve prior learned from public RL runs (`prior`, its fits `joint`,
its estimate `corpus`).

Imports `curves` and `readers` below it; no argument parsing, printing or plotting here (the
`report` and `commands` layers above). Import the modules themselves; this package face
re-exports nothing.
"""
