"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing anchor
or a page left out of the nav fails it), and the README's links into docs/ work on GitHub too."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    assert importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material"), (
        "mkdocs and mkdocs-material are missing: run `bash scripts/ensure-venv` (the docs extra)"
    )
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site)],
        capture_output=True, text=True, timeout=300, cwd=config.parent, env=env,
    )


def test_mkdocs_build_strict_passes(tmp_path):
    done = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"
    assert (tmp_path / "site" / "configuration" / "index.html").exists()


def _copy_site_sources(dest: Path) -> Path:
    (dest / "docs").mkdir()
    for path in (ROOT / "docs").rglob("*"):
        if path.is_file():
            target = dest / "docs" / path.relative_to(ROOT / "docs")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (dest / "mkdocs.yml").write_text((ROOT / "mkdocs.yml").read_text())
    return dest / "mkdocs.yml"


@pytest.mark.parametrize("broken, named", [
    ("[a page that is not there](no-such-page.md)", "no-such-page.md"),
    ("[an anchor that is not there](operations.md#no-such-section)", "no-such-section"),
])
def test_mkdocs_build_strict_fails_on_a_broken_link(tmp_path, broken, named):
    config = _copy_site_sources(tmp_path)
    assert mkdocs_build(config, tmp_path / "site").returncode == 0, "the copied site does not build"
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text() + f"\n{broken}\n")
    done = mkdocs_build(config, tmp_path / "site")
    assert done.returncode != 0, f"mkdocs build --strict passed with {broken}"
    assert named in done.stdout + done.stderr


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading (where README.md's links are read): lower case, punctuation
    dropped, spaces to hyphens. MkDocs' own anchors are checked by the strict build."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    return {_slug(h) for h in re.findall(r"(?m)^#{1,6} (.+?)\s*$", text)}


def broken_links(page: Path) -> list[str]:
    """Relative links of a Markdown file outside docs/ whose file or heading is missing."""
    out = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            out.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            out.append(target)
    return out


@pytest.mark.parametrize("name", ["README.md", "SECURITY.md", "helm/stomp-bridge/README.md"])
def test_links_outside_the_site_resolve(name):
    assert broken_links(ROOT / name) == []


def test_readme_links_into_every_docs_page_by_relative_path():
    linked = {target.partition("#")[0] for target in LINK.findall((ROOT / "README.md").read_text())}
    assert all(not t.startswith(("http", "/")) for t in linked if t.startswith("docs/"))
    assert "docs/index.md" in linked


def test_the_link_checker_sees_a_broken_readme_link(tmp_path):
    page = tmp_path / "README.md"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its section\n")
    page.write_text("[ok](docs/a.md#its-section) [gone](docs/b.md) [bad anchor](docs/a.md#nope)\n")
    assert broken_links(page) == ["docs/b.md", "docs/a.md#nope"]
