"""The docs stay true to the tree: the parameter page is what `hetero params --markdown` prints, the architecture page's
file map names every module and nothing that is gone, and every relative link in README.md and docs/ reaches its file
(and heading)."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.cli import main
from pipeline.commands.params import REGENERATE

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MAPPED = ("steps", "pipeline", "infra")  # every module of these appears in the file map
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def test_the_parameter_page_is_what_hetero_params_markdown_prints(capsys):
    assert main(["params", "--markdown"]) == 0
    generated = capsys.readouterr().out
    assert "| DataInstanceCount | int | `1` | 1 to 64 | `--data-hosts` |" in generated
    page = (DOCS / "parameters.md").read_text(encoding="utf-8")
    assert page == generated, f"docs/parameters.md differs from the parameter declaration: regenerate it with `{REGENERATE}`"


def file_map() -> list[str]:
    """The paths of the file map: the first fenced block after the heading `## File map`, one path per line."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## File map\n", 1)[1]
    block = FENCE.search(section).group(0).splitlines()[1:-1]
    return [line.split()[0] for line in block if line.strip()]


def test_the_file_map_names_every_module_and_only_paths_that_exist():
    mapped = file_map()
    assert len(mapped) == len(set(mapped)), [p for p in mapped if mapped.count(p) > 1]
    modules = sorted(
        str(p.relative_to(ROOT))
        for folder in MAPPED
        for p in (ROOT / folder).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )
    missing = [m for m in modules if m not in mapped]
    assert not missing, f"modules the file map in docs/architecture.md does not name (add a line each): {missing}"
    gone = [p for p in mapped if not (ROOT / p).exists()]
    assert not gone, f"paths in the file map of docs/architecture.md that do not exist: {gone}"


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub gives a page: lowercase, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_every_relative_link_in_readme_and_docs_reaches_its_file_and_heading():
    broken = []
    for page in _pages():
        for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_stays_a_page_you_can_read_in_one_go():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150
