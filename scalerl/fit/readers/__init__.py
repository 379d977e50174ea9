"""Layer 2 of scalerl.fit, readers: any run's logs (tables, TensorBoard, MLflow) -> curves.

Imports only `curves` below it; no fitting, forecasting or output here. Import the modules
themselves; this package face re-exports nothing.
"""
