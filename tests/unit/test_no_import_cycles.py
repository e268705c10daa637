"""No import circle in opsboard/, worker/ or the benchmarks (opsboard_bench).

Modules in a circle are one unit: none can be imported, tested or moved alone, and which way the
layers lean is no longer visible.  grimp (installed with import-linter) builds the import graph,
with the imports under ``TYPE_CHECKING`` and those inside functions; every strongly connected
component of more than one module is a circle, and the test lists them all.  A copy of the tree
with planted circles shows that the check can fail.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opsboard.config import CHECKOUT

pytestmark = pytest.mark.skipif(CHECKOUT is None, reason="needs the source checkout")

#: The packages checked, those of them present in the tree.
PACKAGES = ("opsboard", "worker", "opsboard_bench")


def import_cycles(packages: list[str]) -> list[list[str]]:
    """The strongly connected components of more than one module in the import graph of ``packages``
    (as importable from ``sys.path``), each sorted, largest first."""
    import grimp

    graph = grimp.build_graph(*packages, cache_dir=None)
    # Tarjan's algorithm, iterative (the graph has a thousand modules and long chains).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, edges = work[-1]
            for imported in edges:
                if imported not in index:
                    index[imported] = low[imported] = len(index)
                    stack.append(imported)
                    on_stack.add(imported)
                    work.append((imported, iter(sorted(graph.find_modules_directly_imported_by(imported)))))
                    break
                if imported in on_stack:
                    low[module] = min(low[module], index[imported])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def cycles_in(root: Path) -> list[list[str]]:
    """:func:`import_cycles` of the packages in the tree at ``root``, in a process of its own (so
    that the graph is built from that tree, not from the modules this process imported)."""
    packages = [p for p in PACKAGES if (root / p / "__init__.py").is_file()]
    env = {**os.environ, "PYTHONPATH": str(root)}
    result = subprocess.run([sys.executable, str(Path(__file__)), *packages], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def describe(cycles: list[list[str]]) -> str:
    return "\n".join(f"import circle of {len(c)} modules: {', '.join(c)}" for c in cycles)


def test_no_import_circle_in_the_tree():
    cycles = cycles_in(CHECKOUT)
    print(describe(cycles))
    assert not cycles, "\n" + describe(cycles)


#: Circles planted in a copy of the tree: a worker part importing the runtime under TYPE_CHECKING (the
#: circle issue 41 removed), and two new web modules importing each other, one of them inside a function.
PLANTED_APPEND = {
    "worker/executor.py": "\nif TYPE_CHECKING:\n    from .runner import Worker  # noqa: F401\n",
}
PLANTED_NEW = {
    "opsboard/web/planted_a.py": "from . import planted_b  # noqa: F401\n",
    "opsboard/web/planted_b.py": "def later():\n    from . import planted_a  # noqa: F401\n",
}


def test_a_planted_circle_is_found(tmp_path):
    for folder in PACKAGES:
        if (CHECKOUT / folder).is_dir():
            shutil.copytree(CHECKOUT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for path, text in PLANTED_APPEND.items():
        with open(tmp_path / path, "a") as f:
            f.write(text)
    for path, text in PLANTED_NEW.items():
        (tmp_path / path).write_text(text)

    cycles = cycles_in(tmp_path)
    print(describe(cycles))
    assert ["opsboard.web.planted_a", "opsboard.web.planted_b"] in cycles, describe(cycles)
    worker_circle = next((c for c in cycles if "worker.runner" in c), None)
    assert worker_circle is not None and "worker.executor" in worker_circle, describe(cycles)
    assert "import circle of 2 modules: opsboard.web.planted_a, opsboard.web.planted_b" in describe(cycles)


if __name__ == "__main__":  # run by cycles_in, in the tree to check
    print(json.dumps(import_cycles(sys.argv[1:])))
