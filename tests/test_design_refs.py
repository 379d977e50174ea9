"""Every reference to the design doc points into the repository and at a section that exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
REF = re.compile(r'docs/design\.md,\s*"([^"]+)"')


def _sources():
    for pattern in ("scalerl/**/*.py", "workflow/**/*.smk", "tests/**/*.py", "benchmarks/*.py"):
        yield from ROOT.glob(pattern)


def test_design_references_name_existing_sections():
    headings = {m.group(1).strip() for m in re.finditer(r"^## (.+)$", DESIGN.read_text(), re.M)}
    bad = []
    for path in _sources():
        text = path.read_text()
        bad += [f"{path.relative_to(ROOT)}: {name!r}" for name in REF.findall(text)
                if name not in headings]
        if re.search(r"(?<![/\w])DESIGN\.md|\.\./shared/", text) and path.name != Path(
                __file__).name:
            bad.append(f"{path.relative_to(ROOT)}: cites a design file outside the repository")
    assert not bad, "\n".join(bad) + f"\nsections: {sorted(headings)}"
