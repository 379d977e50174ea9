"""Read the logs RL trainers already write: TensorBoard event files and MLflow tracking stores.

Both give the point tables of `scalerl.fit.readers.inputs` (one row per run and step; columns `run`,
`step`, `wall_time` = seconds since the run's first logged value, and one column per metric),
so fitting, predicting, racing and watching treat them like a CSV.

- `TensorBoardLog(root, name)`: every directory under `root` that holds `events.out.tfevents.*`
  files is one run, named by its path relative to `root` (TensorBoard's own convention for a
  log directory of several runs; `name/<relative path>` when a name is given), and `root`
  itself, when it holds event files, by `name` or its directory name. Scalars are read with
  the `tensorboard` package's `EventFileLoader`, which turns both the legacy `simple_value`
  (torch's SummaryWriter, TF1) and TF2's tensor scalars into tensors. `read()` is
  incremental: each call reads only the events appended since the last one (new files are
  picked up), which `scalerl watch` relies on. A step logged twice (a run resumed from an
  earlier checkpoint) keeps the value written last.
- `MlflowStore(uri, name, experiments=..., run_ids=...)`: the runs of a tracking store (a
  `sqlite:///...mlflow.db` or `.db` file, a `file:` / `http(s)://` URI), through
  `mlflow.tracking.MlflowClient`: `search_runs` then `get_metric_history` per metric. Runs are
  named by their MLflow run name (the run id when it has none or when two share a name);
  `experiment` and `run_id` columns let `--group-by` use them. Deleted runs are skipped.

A missing package raises `InputError` naming the extra: `pip install 'scalerl[tracking]'`.

Deliberately left out: reading W&B's binary `.wandb` files (export a CSV: W&B's run history
or a chart's "Export CSV", both read by `scalerl.fit.readers.inputs`), TensorBoard's histogram,
image and text plugins, and MLflow artifacts.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from scalerl.fit.readers.tables import InputError
from scalerl.tracking.base import INSTALL_HINT

__all__ = ["TensorBoardLog", "MlflowStore", "tensorboard_runs", "mlflow_uri", "require"]

EVENT_FILE_MARK = "tfevents"


def require(package: str, what: str):
    """Import `package` or raise InputError naming the `tracking` extra."""
    try:
        return importlib.import_module(package)
    except ImportError as err:
        raise InputError(f"reading {what} needs the {package.split('.')[0]!r} package, which is "
                         f"not installed ({err}); install the tracking extra: {INSTALL_HINT}"
                         ) from None


def _is_event_file(path: Path) -> bool:
    return path.is_file() and EVENT_FILE_MARK in path.name and path.name.startswith("events.")


def tensorboard_runs(root: Path) -> list[Path]:
    """Directories under `root` (itself included) that directly hold event files, sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    dirs = {p.parent for p in root.rglob(f"events.out.{EVENT_FILE_MARK}*") if _is_event_file(p)}
    return sorted(dirs)


def _frame(rows: dict[str, dict[int, tuple[float, float]]], run: str,
           wanted: Iterable[str] | None) -> pd.DataFrame:
    """{tag: {step: (value, wall_time)}} -> one row per step: run, step, wall_time, tags."""
    tags = [t for t in rows if wanted is None or t in wanted]
    steps = sorted({s for t in tags for s in rows[t]})
    index = {s: i for i, s in enumerate(steps)}
    wall = np.full(len(steps), np.inf)
    data = {"run": [run] * len(steps), "step": np.asarray(steps, dtype=np.int64)}
    for tag in tags:
        col = np.full(len(steps), np.nan)  # [S]
        for step, (value, t) in rows[tag].items():
            col[index[step]] = value
            wall[index[step]] = min(wall[index[step]], t)
        data[tag] = col
    data["wall_time"] = wall
    frame = pd.DataFrame(data)
    if len(frame):
        frame["wall_time"] -= frame["wall_time"].min()
    return frame


class TensorBoardLog:
    """The scalar events of one TensorBoard log directory (one or several runs)."""

    def __init__(self, root: str | Path, name: str | None = None):
        self.root, self.name = Path(root), name
        self._loaders: dict[Path, object] = {}  # event file -> its EventFileLoader
        self._scalars: dict[str, dict[str, dict[int, tuple[float, float]]]] = {}  # run->tag->

    def run_name(self, run_dir: Path) -> str:
        rel = run_dir.relative_to(self.root)
        if rel == Path("."):
            return self.name or self.root.resolve().name
        return f"{self.name}/{rel.as_posix()}" if self.name else rel.as_posix()

    def tags(self) -> list[str]:
        return sorted({t for tags in self._scalars.values() for t in tags})

    def read(self, wanted: Iterable[str] | None = None) -> pd.DataFrame:
        """All scalars read so far plus the events appended since the last call."""
        loader_mod = require("tensorboard.backend.event_processing.event_file_loader",
                             "TensorBoard event files")
        tensor_util = require("tensorboard.util.tensor_util", "TensorBoard event files")
        runs = tensorboard_runs(self.root)
        if not runs:
            raise InputError(f"{self.root}: no TensorBoard event files (events.out.tfevents.*) "
                             "under it")
        for run_dir in runs:
            run = self.run_name(run_dir)
            scalars = self._scalars.setdefault(run, {})
            for path in sorted(p for p in run_dir.iterdir() if _is_event_file(p)):
                loader = self._loaders.get(path)
                if loader is None:
                    loader = self._loaders[path] = loader_mod.EventFileLoader(str(path))
                for event in loader.Load():
                    for value in event.summary.value:
                        if value.metadata.plugin_data.plugin_name != "scalars":
                            continue
                        array = tensor_util.make_ndarray(value.tensor)
                        if array.size != 1:
                            continue
                        scalars.setdefault(value.tag, {})[int(event.step)] = (
                            float(array.reshape(())), float(event.wall_time))
        if wanted is not None:  # only the wanted tags it has; all when it has none (the
            wanted = {t for t in wanted if t in self.tags()} or None  # error lists them)
        frames = [_frame(tags, run, wanted) for run, tags in sorted(self._scalars.items())]
        frames = [f for f in frames if len(f)]
        if not frames:
            found = ", ".join(self.tags()) or "none"
            raise InputError(f"{self.root}: no scalar values in its event files (scalar tags: "
                             f"{found})")
        return pd.concat(frames, ignore_index=True)


def mlflow_uri(spec: str) -> str | None:
    """The tracking URI an input names, or None when it is not an MLflow store: a URI
    (sqlite:, file:, http(s):, databricks), a `.db` file (SQLite store) or an `mlruns` dir."""
    if spec.startswith(("sqlite:", "file:", "http://", "https://", "databricks")):
        return spec
    path = Path(spec)
    if path.suffix == ".db" and path.is_file():
        return f"sqlite:///{path.resolve()}"
    if path.is_dir() and path.name == "mlruns":
        return f"file:{path.resolve()}"
    return None


class MlflowStore:
    """The metric histories of an MLflow tracking store's runs."""

    def __init__(self, uri: str, name: str, *, experiments: Sequence[str] = (),
                 run_ids: Sequence[str] = ()):
        self.uri, self.name = uri, name
        self.experiments, self.run_ids = list(experiments), list(run_ids)
        self._client = None

    def _connect(self):
        if self._client is None:
            tracking = require("mlflow.tracking", "an MLflow tracking store")
            self._client = tracking.MlflowClient(tracking_uri=self.uri)
        return self._client

    def _runs(self) -> list:
        client = self._connect()
        mlflow = require("mlflow", "an MLflow tracking store")
        try:
            if self.run_ids:
                return [client.get_run(r) for r in self.run_ids]
            experiments = client.search_experiments()
            if self.experiments:
                by_name = {e.name: e for e in experiments}
                by_id = {e.experiment_id: e for e in experiments}
                missing = [x for x in self.experiments if x not in by_name and x not in by_id]
                if missing:
                    raise InputError(f"{self.uri}: no experiment {', '.join(missing)}; "
                                     "experiments: " + ", ".join(sorted(by_name)))
                experiments = [by_name.get(x) or by_id[x] for x in self.experiments]
            ids = [e.experiment_id for e in experiments]
            return client.search_runs(ids, max_results=50_000) if ids else []
        except mlflow.exceptions.MlflowException as err:
            raise InputError(f"cannot read the MLflow store {self.uri}: {err}") from None

    def read(self, wanted: Iterable[str] | None = None) -> pd.DataFrame:
        """One row per run and step with the wanted metrics (all logged metrics if None)."""
        client = self._connect()
        runs = [r for r in self._runs() if r.info.lifecycle_stage != "deleted"]
        if not runs:
            raise InputError(f"{self.uri}: no runs"
                             + (f" in experiment(s) {', '.join(self.experiments)}"
                                if self.experiments else ""))
        names = [r.info.run_name or r.info.run_id for r in runs]
        experiments = {e.experiment_id: e.name for e in client.search_experiments()}
        frames, seen = [], set()
        for run, name in zip(runs, names):
            if names.count(name) > 1:
                name = f"{name}-{run.info.run_id[:8]}"
            keys = sorted(run.data.metrics) if wanted is None else \
                [k for k in wanted if k in run.data.metrics]
            seen.update(run.data.metrics)
            rows: dict[str, dict[int, tuple[float, float]]] = {}
            for key in keys:
                history = sorted(client.get_metric_history(run.info.run_id, key),
                                 key=lambda m: m.timestamp)
                rows[key] = {int(m.step): (float(m.value), m.timestamp / 1000.0)
                             for m in history}
            frame = _frame(rows, f"{self.name}/{name}" if self.name else name, None)
            frame["experiment"] = experiments.get(run.info.experiment_id,
                                                  run.info.experiment_id)
            frame["run_id"] = run.info.run_id
            frames.append(frame)
        frames = [f for f in frames if len(f)]
        if not frames:
            raise InputError(f"{self.uri}: none of its {len(runs)} run(s) logged "
                             + (", ".join(sorted(wanted)) if wanted else "a metric")
                             + f"; metrics logged: {', '.join(sorted(seen)) or 'none'}")
        return pd.concat(frames, ignore_index=True)
