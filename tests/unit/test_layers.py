"""The shape of the code, checked: layers, no cycles, no module using another's private names.

The layers and cycles are import-linter's contracts in pyproject.toml
(``[tool.importlinter]``): transport → session → swaptacular → amqp → protocol, the
protocol package pure, aiormq and pamqp known to amqp alone, no import cycle inside
any package. Running them here puts them in CI with the rest of the unit tests.

Private names are checked from the source: an underscore name belongs to the module
that defines it. Dependencies' internals that the hot path needs sit in one module,
``stomp_bridge/amqp/internals.py``, pinned by its own tests.
"""

from __future__ import annotations

import ast
import logging
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stomp_bridge"
# The one module allowed to reach into aiormq's and pamqp's internals.
INTERNALS = PACKAGE / "amqp" / "internals.py"
# Underscore names that are public API: namedtuple's methods.
PUBLIC_UNDERSCORE = frozenset({"_replace", "_asdict", "_fields", "_make"})


def test_import_contracts_hold() -> None:
    """import-linter's contracts: a broken one prints the import chain that breaks it."""
    lint = pytest.importorskip("importlinter.cli", reason="pip install -e '.[test]' installs import-linter")
    # import-linter configures logging with disable_existing_loggers: every logger made so far
    # (the bridge's among them) would stay disabled for the tests after this one, whose log
    # assertions then fail when they run in the same process. Put them back as they were.
    loggers = [logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)]
    disabled = [logger.disabled for logger in loggers]
    try:
        code = lint.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    finally:
        for logger, was in zip(loggers, disabled):
            logger.disabled = was
    assert code == 0, "lint-imports found a broken contract (its report is above)"
    assert not logging.getLogger("stomp_bridge").disabled


def _contract(name: str) -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return next(c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == name)


def test_only_amqp_knows_aiormq_and_pamqp_everywhere_else() -> None:
    """The contract lists its source modules by name: a package added later must be added to it,
    or it could import aiormq unseen. (The root ``__init__`` cannot be listed without listing
    amqp with it: its imports are checked here.)"""
    children = {
        f"stomp_bridge.{path.stem}" for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").exists()
    }
    listed = set(_contract("only amqp knows aiormq and pamqp")["source_modules"])
    assert listed == children - {"stomp_bridge.amqp"}, (
        f"missing from the contract: {sorted(children - listed - {'stomp_bridge.amqp'})}; "
        f"not packages of stomp_bridge: {sorted(listed - children)}"
    )
    root = ast.parse((PACKAGE / "__init__.py").read_text())
    imported = [alias.name for node in ast.walk(root) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(root) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name.split(".")[0] in ("aiormq", "pamqp")]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORE


def _defined_privates(tree: ast.Module) -> set[str]:
    """Every underscore name this module defines: functions, classes, attributes, slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)  # dataclass(...) fields, namedtuple fields passed by keyword
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries, getattr names
    return {name for name in names if _private(name)}


def foreign_private_uses(path: Path) -> list[str]:
    """Where ``path`` uses an underscore name some other module defines."""
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    own = _defined_privates(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [
                f"{where}:{node.lineno}: from {node.module} import {alias.name}"
                for alias in node.names if _private(alias.name)
            ]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    found = [
        use
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != INTERNALS
        for use in foreign_private_uses(path)
    ]
    assert not found, "private names used outside their module:\n" + "\n".join(found)


def test_the_private_name_check_sees_a_foreign_name(tmp_path: Path) -> None:
    """The check above would pass on nothing: show it catches each way of reaching in."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from stomp_bridge.amqp.codec import _HIDDEN\n"
        "import aiormq\n"
        "class A:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    def go(self, channel, other):\n"
        "        other._mine = self._mine\n"  # the module's own attribute: fine
        "        return channel._get_frame(), aiormq._private\n"
    )
    uses = sorted(use.split(": ", 1)[1] for use in foreign_private_uses(sample))
    assert uses == ["aiormq._private", "channel._get_frame", "from stomp_bridge.amqp.codec import _HIDDEN"]
