"""The report's racing section: which runs `scalerl race` stopped, after which chunk, why, and
the compute saved.

`racing_markdown(decision_files)` reads the decision files of a sweep's races (racing/chunk{k}.json,
each the result of `scalerl.fit.forecast.racing.race` as `scalerl race --out` writes it), in
chunk order, and lists every stop with its reason and saved compute, then the total saved out
of the planned compute.

Deliberately left out: deciding anything (`scalerl.fit.forecast.racing`) and listing the runs
that were kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["racing_markdown"]


def racing_markdown(decision_files: Sequence[str | Path]) -> str:
    """The report's racing section: which runs were stopped, after which chunk, why, and the
    compute saved (decision files named chunk{k}.json, written by `scalerl race`)."""
    rows, saved, planned = [], 0.0, 0.0
    for path in sorted(decision_files, key=lambda p: int(re.sub(r"\D", "", Path(p).stem) or 0)):
        data = json.loads(Path(path).read_text())
        chunk = re.sub(r"\D", "", Path(path).stem)
        for d in data.get("decisions", []):
            if d.get("decision") == "stop":
                rows.append(f"| {d['run']} | {chunk} | {d.get('reason', '')} | "
                            f"{d.get('compute_saved', 0.0):.3g} |")
        saved += float(data.get("compute_saved", 0.0))
        planned = max(planned, float(data.get("compute_planned", 0.0)))
    text = ["", "## Racing", ""]
    if not rows:
        text.append(f"No run was stopped ({len(decision_files)} race(s)).")
    else:
        text += ["| run | stopped after chunk | reason | compute saved |", "|---|---|---|---|",
                 *rows, "", f"Compute saved: {saved:.3g}"
                 + (f" of {planned:.3g} planned ({saved / planned:.1%})" if planned else "")
                 + "."]
    return "\n".join(text) + "\n"
