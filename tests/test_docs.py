"""The repository's own docs, as a whole: every relative link in a Markdown file resolves to a file
of the repository (and its `#anchor` to a heading there), and no doc sends readers to the design
document's sections ("DESIGN §N"), which are not in the repository: what users need from them is
in the docs next to the code (scheduler/quota/QUEUES.md, scheduler/preemption/PREEMPTION.md,
scheduler/SHARES.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("proto", "agent", "deviceplugin", "scheduler", "daemonset", "tests", "bench", "scripts")
"""The top-level folders that may hold docs (`.ci/` holds none)."""
USER_FACING = (
    *[p for p in (ROOT / "daemonset").rglob("*") if p.is_file() and p.suffix != ".md"],
    ROOT / "scheduler" / "default-config.yaml",
)
"""Besides the Markdown files: the manifests and the shipped config, whose comments users read."""
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
DESIGN_SECTION = re.compile(r"DESIGN(\.md)? ?§")


def _docs() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder in FOLDERS:
        found += [
            p
            for p in (ROOT / folder).rglob("*.md")
            if not any(part.startswith(".") or part == "__pycache__" for part in p.parts)
        ]
    return sorted(found)


def _prose(text: str) -> str:
    """Markdown without fenced code blocks and inline code, where a link is not a link."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            slug = _slug(match.group(1))
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if root not in resolved.parents or not resolved.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(root)}")
    return broken


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_in_the_repository(doc):
    assert broken_links(doc) == []


def test_the_docs_are_found_and_the_readme_links_the_reference_docs():
    docs = {str(p.relative_to(ROOT)) for p in _docs()}
    assert {"README.md", "daemonset/README.md", "tests/README.md"} <= docs
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(LINK.findall(_prose(readme)))
    assert "scheduler/quota/QUEUES.md" in linked
    assert "scheduler/preemption/PREEMPTION.md" in linked
    assert "daemonset/optional/monitoring/RUNBOOKS.md" in linked


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Part two\n", encoding="utf-8")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[a](docs/nothing.md) [b](#no-such-heading) [c](#share-a-gpu) `[d](gone.md)`\n"
        "[e](docs/other.md#part-two) [f](docs/other.md#part-three) [g](../outside.md)\n"
        "```\n[h](in-a-code-block.md)\n```\n\n## Share a GPU\n",
        encoding="utf-8",
    )
    (tmp_path.parent / "outside.md").touch()
    assert broken_links(doc, root=tmp_path) == [
        "docs/nothing.md: no such file in the repository",
        "#no-such-heading: no heading #no-such-heading in README.md",
        "docs/other.md#part-three: no heading #part-three in docs/other.md",
        "../outside.md: no such file in the repository",
    ]


def _design_mentions(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return [line.strip() for line in text.splitlines() if DESIGN_SECTION.search(line)]


def _readme_share_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("\n## Share a GPU\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("doc", [*_docs(), *USER_FACING], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_doc_sends_readers_to_a_design_section(doc):
    assert _design_mentions(doc) == []


def test_the_readme_share_a_gpu_section_sends_readers_to_no_design_section():
    assert not DESIGN_SECTION.search(_readme_share_section())


def test_the_readme_says_how_many_tests_there_are(request):
    """Checked in a run of the whole suite (`bash scripts/test.sh`, CI): a part has fewer."""
    collected = len(request.session.items)
    if collected < 1000:
        pytest.skip(
            f"{collected} tests collected: not the whole suite, whose count the README gives"
        )
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (said,) = re.findall(r"some ([\d,]+) tests", readme)
    assert abs(int(said.replace(",", "")) - collected) <= collected // 10, collected


def test_no_documented_pytest_command_passes_a_second_q():
    """pyproject's addopts has `-q`; a second one hides the summary line."""
    addopts = re.search(r'addopts = "([^"]*)"', (ROOT / "pyproject.toml").read_text("utf-8"))
    assert addopts is not None
    assert "-q" in addopts.group(1).split()
    commands = [
        line
        for doc in [*_docs(), ROOT / "scripts" / "test.sh", ROOT / ".ci" / "run"]
        for line in doc.read_text(encoding="utf-8").splitlines()
        if re.search(r"\bpytest\b", line) and not line.lstrip().startswith(("#", "import"))
    ]
    assert len(commands) > 5
    assert [c for c in commands if re.search(r"\spytest\b.*\s-q+\b", c)] == []
