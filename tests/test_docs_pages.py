"""The front door and the manual: README.md stays a few screens with its two commands on top, its links resolve,
every heading of the old README is on the manual page docs/README-MAP.md names, every manual page is in the nav,
and the table blocks of docs/tables.md match the committed quickstart run. (The links and anchors inside the
manual are checked by ``mkdocs build --strict`` in ``make test``.)"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_is_a_front_door_with_the_two_commands_on_top():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make sweep", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert "\nsweep: " in makefile and "\ntest: " in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_relative_link_of_the_readme_resolves():
    readme = (ROOT / "README.md").read_text()
    targets = [m.group(1) for m in LINK.finditer(readme) if "://" not in m.group(1)]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing


def _map_rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in (DOCS / "README-MAP.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("["):
            page = LINK.search(cells[1])
            assert page, line
            rows.append((cells[0], page.group(1), cells[2]))
    return rows


def test_every_old_readme_heading_is_on_the_page_the_map_names():
    rows = _map_rows()
    assert len(rows) >= 30
    for old, page, heading in rows:
        text = (DOCS / page).read_text()
        as_heading = re.search(rf"^#+ {re.escape(heading)}\s*$", text, re.MULTILINE)
        as_lead_in = f"**{heading}**" in text
        assert as_heading or as_lead_in, f"{old!r}: no heading {heading!r} in docs/{page}"


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    return []


def test_every_manual_page_is_in_the_nav_and_every_nav_page_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav))
    missing = [page for page in nav if not (DOCS / page).is_file()]
    assert not missing, missing
    # Every page the build sees, the committed reports' included (docs/reports links to reports/), less
    # exclude_docs' folders: a page left out of the nav aborts `mkdocs build --strict` (omitted_files: warn).
    excluded = [line.strip().strip("/") + "/" for line in config.get("exclude_docs", "").splitlines() if line.strip()]
    pages = {
        str((Path(folder) / name).relative_to(DOCS))
        for folder, _, names in os.walk(DOCS, followlinks=True)  # Path.rglob does not enter docs/reports
        for name in names
        if name.endswith(".md")
    }
    built = {page for page in pages if not any(page.startswith(folder) for folder in excluded)}
    assert any(page.startswith("reports/") for page in built)
    assert built <= set(nav), sorted(built - set(nav))


def test_the_committed_reports_are_in_the_site():
    assert (DOCS / "reports").is_symlink() and (DOCS / "reports").resolve() == (ROOT / "reports").resolve()
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    for page in (
        "quickstart/report.md",
        "quickstart-second-run/README.md",
        "engines-flux/report.md",
        "gpu-h200/report.md",
    ):
        assert f"reports/{page}" in nav


def test_the_table_blocks_of_the_manual_match_the_committed_quickstart_run():
    from accel import docs_gen

    stale = docs_gen.injected_tables(write=False)
    assert not stale, f"stale table block(s): {stale}; regenerate them with '{docs_gen.REGENERATE}'"
