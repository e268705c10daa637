"""Imports point one way (contracts in pyproject.toml, ``[tool.importlinter]``):
the core never imports Flask, the web app, the tools, the CLI or the worker; the
web app never imports the worker; the worker never imports the web app, the
tools, the CLI or a feature package (it is only the runtime); blueprints never import the app factory; the core's
infrastructure never imports a feature, and features import each other only
through the edges declared in pyproject.toml.  The benchmarks (``opsboard_bench``, beside
the product) are imported only by the CLI's bench command, and import no CLI themselves.

``lint-imports`` from this virtual environment checks the tree; a copy of the
tree with a planted new module per layer shows that each rule can fail.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opsboard.config import CHECKOUT

pytestmark = pytest.mark.skipif(CHECKOUT is None, reason="needs the source checkout")

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_tree_keeps_every_contract():
    result = lint(CHECKOUT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "9 kept, 0 broken" in result.stdout


#: A new module in each layer, importing what its layer must not: (file, imports).
PLANTED = {
    "opsboard/newcore.py": ["flask", "opsboard.web.context", "opsboard.tools.demo", "opsboard.cli",
                            "worker.cli", "opsboard.deliveries.messages", "opsboard_bench.harness"],
    # A feature reaching another one outside the declared edges.
    "opsboard/reports/newkind.py": ["opsboard.tickets.service"],
    "opsboard/web/newpage.py": ["worker", "opsboard.web.app"],
    "worker/newservice.py": ["opsboard.web", "opsboard.tools", "opsboard.cli", "opsboard_bench"],
    # The product reaching the benchmarks, and a scenario reaching the CLI.
    "opsboard/tools/newtool.py": ["opsboard_bench.scenarios"],
    "opsboard_bench/newscenario.py": ["opsboard.cli"],
    # The runtime reaching a feature: handlers and services come from the catalogue.
    "worker/newpart.py": ["opsboard.notifications.inbox"],
}


def test_a_new_module_that_breaks_the_layering_fails(tmp_path):
    for folder in ("opsboard", "worker", "opsboard_bench"):
        shutil.copytree(CHECKOUT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CHECKOUT / "pyproject.toml", tmp_path)
    for path, imports in PLANTED.items():
        (tmp_path / path).write_text("".join(f"import {m}\n" for m in imports))

    result = lint(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "0 kept, 9 broken" in result.stdout, result.stdout
    for path, imports in PLANTED.items():
        importer = path.removesuffix(".py").replace("/", ".")
        for imported in imports:
            assert f"{importer} -> {imported} (l." in result.stdout, (importer, imported, result.stdout)
