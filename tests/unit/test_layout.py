"""The package's layers (docs/architecture.md, "Code layout"): what each part may import.

Every ``import`` and ``from ... import`` in ``jobs/``, ``dags/`` and ``plugins/``, also those
inside functions, is read with ``ast`` and checked against the rules; the checker is shown to
catch a module that breaks each rule. The import graph of ``jobs`` has no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGE_MODULES = {f"jobs.stages.{s}" for s in ("ingest", "rates", "plan", "materialize")} | {
    f"jobs.stages.{s}" for s in ("validate", "publish")
}

ALLOWED: dict[str, tuple[str, ...]] = {
    # part of the package -> the parts it may import (its own part always)
    "common": (),
    "selection": ("common",),
    "estimators": ("common",),
    "stage": ("common", "selection", "estimators", "stage-helper"),
    "stage-helper": ("common",),
    "runner": ("common", "stage", "stage-helper", "serving", "selection", "estimators"),
    "serving": ("common",),
    "evaluation": (
        *("common", "selection", "estimators", "stage", "stage-helper", "runner"),
        *("serving", "workloads"),
    ),
    "workloads": ("common",),
    "dev": ("common", "workloads", "serving"),
    "cli": ("*",),
    "dags": ("common",),
    "plugins": ("common", "serving"),
}


def part_of(module: str) -> str | None:
    """The layer of a module name (None: not ours)."""
    if module.startswith("dags.") or module == "dags":
        return "dags"
    if module.startswith("plugins."):
        return "plugins"
    if module in ("jobs", "jobs.__main__", "jobs.cli"):
        return "cli"
    if module in STAGE_MODULES:
        return "stage"
    if module == "jobs.stages.runner":
        return "runner"
    if module.startswith("jobs.stages"):
        return "stage-helper"
    if module == "jobs.estimators":
        return "estimators"
    for part in ("common", "selection", "serving", "evaluation", "workloads", "dev"):
        if module == f"jobs.{part}" or module.startswith(f"jobs.{part}."):
            return part
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported(tree: ast.AST) -> set[str]:
    """Every ``jobs`` module a file imports (``from jobs.x import y`` counts ``jobs.x.y`` when
    that is a module of ours, else ``jobs.x``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "jobs"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "jobs":
                continue
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in MODULES else node.module)
    return out


def sources() -> dict[str, ast.AST]:
    files = [*ROOT.joinpath("jobs").rglob("*.py"), *ROOT.joinpath("dags").glob("*.py")]
    files += ROOT.joinpath("plugins").glob("*.py")
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in files}


SOURCES = sources()
MODULES = set(SOURCES)


def violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, deps in sorted(graph.items()):
        mine = part_of(module)
        assert mine is not None, f"{module} belongs to no layer: add it to docs/architecture.md"
        allowed = ALLOWED[mine]
        for dep in sorted(deps):
            theirs = part_of(dep)
            if theirs is None or "*" in allowed:
                continue
            if theirs == "stage" and mine == "stage" and dep != module:
                out.append(f"{module} imports {dep}: a stage never imports another stage")
            elif theirs != mine and theirs not in allowed:
                out.append(f"{module} ({mine}) imports {dep} ({theirs})")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles among our modules (a depth-first search for back edges)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if d not in graph:
                continue
            if state.get(d) == 1:
                found.append([*stack[stack.index(d) :], d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def graph_of(src: dict[str, ast.AST]) -> dict[str, set[str]]:
    return {m: {d for d in imported(t) if d != m} for m, t in src.items()}


def test_every_module_keeps_to_its_layer():
    assert violations(graph_of(SOURCES)) == []


def test_the_import_graph_has_no_cycle():
    # a package imports its own modules only lazily, if at all: count the modules
    graph = {
        m: {d for d in deps if d != m.rsplit(".", 1)[0]} for m, deps in graph_of(SOURCES).items()
    }
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("module", "code", "broken"),
    [
        ("jobs.stages.rates", "from jobs.stages.ingest import run", "a stage never imports"),
        ("jobs.stages.materialize", "from jobs.serving import reader", "(stage) imports"),
        ("jobs.serving.report", "from jobs.stages import publish", "(serving) imports"),
        ("jobs.common.config", "def f():\n    from jobs.estimators import estimate", "(common)"),
        ("jobs.common.spark", "import jobs.selection.cost", "(common) imports"),
        ("jobs.selection.cost", "from jobs.stages.plan import PlanParams", "(selection)"),
        ("jobs.estimators", "from jobs.stages.rates import window_days", "(estimators)"),
        ("jobs.workloads.generate", "from jobs.dev.demo import main", "(workloads)"),
        ("dags.feeds_daily", "from jobs.stages.plan import run", "(dags)"),
    ],
)
def test_the_check_catches_a_module_that_breaks_a_rule(module, code, broken):
    changed = dict(SOURCES)
    changed[module] = ast.parse(code)
    found = violations(graph_of(changed))
    assert any(module in v and broken in v for v in found), found


def test_the_check_catches_a_cycle():
    graph = {"jobs.common.a": {"jobs.common.b"}, "jobs.common.b": {"jobs.common.a"}}
    assert cycles(graph) == [["jobs.common.a", "jobs.common.b", "jobs.common.a"]]
