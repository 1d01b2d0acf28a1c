"""The repository's top-level packages import each other in one direction only:
stomp_bridge <- testkit <- tests, reliability, bench; tests, reliability and bench never import each
other (reliability's own tests live in reliability/tests), and nothing edits sys.path."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {"stomp_bridge", "testkit", "tests", "reliability", "bench"}
ALLOWED = {
    "stomp_bridge": {"stomp_bridge"},
    "testkit": {"stomp_bridge", "testkit"},
    "tests": {"stomp_bridge", "testkit", "tests"},
    "reliability": {"stomp_bridge", "testkit", "reliability"},
    "bench": {"stomp_bridge", "testkit", "bench"},
}


def sources(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "node_modules" not in p.parts)


def imported(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out & OURS


def edits_sys_path(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
               and node.value.id == "sys" for node in ast.walk(tree))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_it_may(package):
    wrong = {}
    for path in sources(package):
        extra = imported(ast.parse(path.read_text(), str(path))) - ALLOWED[package]
        if extra:
            wrong[str(path.relative_to(ROOT))] = sorted(extra)
    assert not wrong


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_nothing_edits_sys_path(package):
    assert [str(p.relative_to(ROOT)) for p in sources(package) if edits_sys_path(ast.parse(p.read_text()))] == []
