"""Layer 5 of scalerl.fit, commands: `scalerl fit`, `predict`, `across`, `race`, `watch` and
`report`, one module each (`add_arguments(parser)`, `run(args)`), and `options`, the flags they
share.

The top layer: nothing in scalerl.fit imports it (`scalerl.cli` dispatches to it). Import the
modules themselves; this package face re-exports nothing.
"""
