"""Every citation in the code (product, tests, bench, examples) and the docs points at something
in the repository: a `docs/...` path names a file, `spec <page> §n` a numbered section of the
docs/internals page ARCHITECTURE.md maps that citation to, `TVn` / `TV-n` a test vector written
there, and a relative Markdown link (or a repository path in backticks) a file (and heading) of the
checkout. A clone has no ../shared and no design document, so citations of those dangle too."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ["proto/rmq", "store", "broker_server", "connector", "cli"]
CODE = [*PRODUCT, "tests", "integration_tests", "bench", "examples", "scripts"]
INTERNALS = ROOT / "docs" / "internals"

# the citation table at the top of ARCHITECTURE.md, as data
PAGES = {
    "store": "store.md", "store-commitlog-consumequeue": "store.md",
    "pull": "pull.md", "consumer-pull-rebalance": "pull.md",
    "longpolling": "longpolling.md", "consumption-longpolling-offsets": "longpolling.md",
    "consumer-startup": "allocation.md", "allocation": "allocation.md",
    "consumer-startup-allocation-ordering": "allocation.md",
    "rocketmq-v2-protocol": "rocketmq-v2.md",
}
_PAGE = "|".join(sorted(map(re.escape, PAGES), key=len, reverse=True))
_NUMBER = r"\d+(?:\.\d+)*"
SECTIONS = re.compile(rf"\b({_PAGE})(?:\.md)?\s+(§{_NUMBER}(?:(?:\s*,\s*|\s*/\s*|\s+and\s+)§{_NUMBER})*)")
PAGE_NAME = re.compile(rf"\b({_PAGE})(?:\.md)?\s+§")
BARE_SECTION = re.compile(rf"\bspec\s+§{_NUMBER}")
VECTOR = re.compile(r"\bTV(-?)(\d+)\b")
DOCS_PATH = re.compile(r"(?<![\w/.])docs/[\w./-]*[\w-]")
OUTSIDE = re.compile(r"\.\./shared|\bDESIGN\.md\b|\bspec/[\w-]+\.md")
MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FOLDERS = "store|broker_server|connector|cli|proto|tests|integration_tests|bench|examples|scripts|docs"
MD_PATH = re.compile(rf"`((?:{FOLDERS})/[\w/.-]*(?:\.(?:py|pyi|md|json|ya?ml|sh|proto|Dockerfile)|/))`")


def code_files() -> Iterator[Path]:
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not re.search(r"_pb2(_grpc)?\.py$", path.name) and path != Path(__file__).resolve():
                yield path


def markdown_files() -> Iterator[Path]:
    yield from sorted(ROOT.glob("*.md"))
    yield from sorted((ROOT / "docs").rglob("*.md"))


def flat(path: Path) -> str:
    """The file's text with line breaks (and the comment marks that continue a comment) folded
    into spaces, so a citation broken over two lines reads as one."""
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text())


@cache
def numbered(page: str) -> tuple[frozenset[str], frozenset[str]]:
    """Section numbers (headings and bold list items, ranges like 10.4–10.5 expanded) and test
    vector names of one docs/internals page."""
    text = (INTERNALS / page).read_text()
    sections: set[str] = set()
    heading = ""
    for line in text.splitlines():
        if item := re.match(r"(\d+)\. ", line):   # "7. ..." under "## 3." is §3.7
            sections.add(f"{heading}.{item.group(1)}")
        elif found := re.match(rf"(#+ |- \*\*)({_NUMBER})(?:[–-]({_NUMBER}))?\b", line):
            kind, first, last = found.groups()
            heading = first if kind.startswith("#") else heading
            sections.add(first)
            if last:
                head, start, end = first.rsplit(".", 1)[0], first.rsplit(".", 1)[-1], last.rsplit(".", 1)[-1]
                sections.update(f"{head}.{n}" for n in range(int(start), int(end) + 1))
    for number in list(sections):   # §5 is there when §5.1 is
        parts = number.split(".")
        sections.update(".".join(parts[:i]) for i in range(1, len(parts)))
    vectors = frozenset(re.findall(r"\*\*(TV-?\d+)\*\*", text))
    return frozenset(sections), vectors


def dangling_sections(text: str) -> Iterator[str]:
    for page, cited in SECTIONS.findall(text):
        sections, _ = numbered(PAGES[page])
        for number in re.findall(rf"§({_NUMBER})", cited):
            if number not in sections:
                yield f"{page} §{number} (not in docs/internals/{PAGES[page]})"
    yield from (f"{m.group()} (which page?)" for m in BARE_SECTION.finditer(text))


def dangling_vectors(text: str) -> Iterator[str]:
    for match in VECTOR.finditer(text):
        hyphen, number = match.groups()
        if hyphen:   # TV-n: the page named just before it (same sentence), else pull.md
            before = re.split(r"[.;]\s", text[max(0, match.start() - 160):match.start()])[-1]
            named = PAGE_NAME.findall(before)
            page = PAGES[named[-1]] if named and PAGES[named[-1]] != "store.md" else "pull.md"
        else:        # TVn: the store's
            page = "store.md"
        if match.group() not in numbered(page)[1]:
            yield f"{match.group()} (not in docs/internals/{page})"


def dangling_paths(text: str) -> Iterator[str]:
    for match in DOCS_PATH.finditer(text):
        if not (ROOT / match.group().rstrip(".")).exists():
            yield f"{match.group()} (no such file)"
    yield from (f"{m.group()} (not in the repository)" for m in OUTSIDE.finditer(text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.*)$", page.read_text(), re.M)}


def dangling_links(page: Path) -> Iterator[str]:
    for path in MD_PATH.findall(page.read_text()):   # `store/flush.py`: repository paths
        if not (ROOT / path).exists():
            yield f"{path} (no such file)"
    for target in MD_LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        if not linked.exists():
            yield f"link {target} (no such file)"
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            yield f"link {target} (no such heading)"


def test_code_cites_only_what_the_repository_holds() -> None:
    dangling = [
        f"{path.relative_to(ROOT)}: {citation}"
        for path in code_files()
        for text in [flat(path)]
        for check in (dangling_sections, dangling_vectors, dangling_paths)
        for citation in check(text)
    ]
    assert dangling == []


def test_docs_cite_and_link_only_what_the_repository_holds() -> None:
    dangling = [
        f"{page.relative_to(ROOT)}: {citation}"
        for page in markdown_files()
        for citation in [*dangling_sections(flat(page)), *dangling_paths(flat(page)), *dangling_links(page)]
    ]
    assert dangling == []


def test_the_checks_see_citations() -> None:
    """The patterns match the forms the code uses (a scan that finds nothing proves nothing)."""
    text = flat(ROOT / "store" / "mapped_file.py") + flat(ROOT / "connector" / "producer.py")
    assert SECTIONS.search(text) and VECTOR.search(text)
    assert list(dangling_sections("spec store §99.1")) and list(dangling_vectors("spec store §2, TV99"))
    assert list(dangling_vectors("spec pull §10, TV-99")) and list(dangling_paths("see docs/nowhere.md"))
    assert "5.2" in numbered("store.md")[0] and "TV-24" in numbered("pull.md")[1]
    assert "3.7" in numbered("rocketmq-v2.md")[0] and "10.5" in numbered("pull.md")[0]
