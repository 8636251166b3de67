"""The import graph keeps the architecture: no cycles, and the "never" rules of CONTRIBUTING.md.

Every import counts, those inside functions included: an import hidden in a function is
still a dependency, and a cycle hidden that way is still a cycle. Imports under
``if TYPE_CHECKING:`` are left out: they never run, and name types only.
"""

from __future__ import annotations

import pytest
from healthd_testkit.layers import import_graph, layer_of, lazy_imports, packages

# (importer prefix, imported prefixes it may never import, why). CONTRIBUTING.md lists the same rules.
NEVER = (
    (
        "healthd_checks",
        ("healthd.cycle", "healthd.cli", "healthd.commands", "healthd.service", "healthd.slurm", "healthd.plan",
         "healthd.fleet", "healthd.cycle.engine", "healthd.checks.runner"),
        "a check gathers and judges; it never runs a pass, calls Slurm or reaches the CLI",
    ),
    (
        "healthd.plan",
        ("healthd.slurm.adapter", "healthd.slurm.command", "healthd.store", "healthd.cycle", "healthd.service",
         "healthd.cli", "healthd.commands", "healthd.cycle.engine", "healthd.checks.runner", "healthd_checks"),
        "the plan is pure: results and remembered state in, one decision out",
    ),
    (
        "healthd.config",
        ("healthd.cycle", "healthd.service", "healthd.cli", "healthd.commands", "healthd.slurm", "healthd.plan",
         "healthd_checks"),
        "configuration is read first and depends on nothing that runs",
    ),
    (
        "healthd.store",
        ("healthd.cycle", "healthd.service", "healthd.cli", "healthd.commands", "healthd.slurm", "healthd_checks"),
        "the store keeps what a pass decided (the plan's values); it runs nothing and calls nothing",
    ),
    (
        "healthd.model",
        ("healthd.",),
        "the values every stage shares depend on no stage",
    ),
)  # fmt: skip
# Only these modules may import the Slurm adapter (healthd.slurm.adapter): Slurm's own package
# and the stages that act on nodes: the node agent's cycle (the pass, the plan's execution, and the
# active checks' read of whether the node is idle) and the fleet's drain (`fleet lemons --drain`).
SLURM_CALLERS = (
    "healthd.slurm.",
    "healthd.cycle.pipeline",
    "healthd.cycle.execute",
    "healthd.cycle.activerun",
    "healthd.fleet.drain",
)


# Imports inside functions (module, what it imports), each place with why the import waits for the call
# (docs/architecture.md, "Imports inside functions"). Anything else is imported at the top of its module.
LAZY: dict[str, frozenset[tuple[str, str]]] = {
    "command dispatch: the parser and the command's own module only for the command line that needs them": frozenset({
        ("healthd.cli.main", "healthd.cli.parser"),
        ("healthd.cli.main", "healthd.commands.jobs"),
        ("healthd.cli.hook", "healthd.cli.parser"),
        ("healthd.checks.plugin", "argparse"),  # a plugin command's own arguments
        ("healthd.cycle.jobhook", "healthd.cycle.prolog"),  # the prolog's flow or the epilog's, not both
        ("healthd.cycle.jobhook", "healthd.cycle.epilog"),
    }),
    "loading a check's module: entry points and plugin files, read only when checks are loaded": frozenset({
        ("healthd.checks.plugin", "importlib"),
        ("healthd.checks.plugin", "importlib.metadata"),
        ("healthd.checks.plugin", "importlib.util"),
    }),
    "NVML: the library and its recorded readings, only when a GPU is read": frozenset({
        ("healthd_checks.nvml.source", "pynvml"),
        ("healthd_checks.gpu.check", "healthd_checks.nvml.snapshot"),
        ("healthd_checks.nvlink.check", "healthd_checks.nvml.snapshot"),
    }),
    "the config's full validation (pydantic, about 135 ms): only when the validation cache cannot serve": frozenset({
        ("healthd.config.cache", "healthd.config.models"),
        ("healthd.commands.config_cmd", "healthd.config.models"),
        ("healthd.config.sections", "pydantic"),
        ("healthd.config.sections", "pydantic_core"),
        ("healthd.config.sections", "healthd.checks.settings"),
        ("healthd.checks.plugin", "healthd.checks.settings"),
        ("healthd.cycle.jobrecord", "healthd_checks.jobs.settings"),
    }),
    "what a healthy pass never runs: a GPU reset, the repair hook, active checks, --expect, a bug report": frozenset({
        ("healthd.cycle.pipeline", "healthd.cycle.gpureset"),
        ("healthd.cycle.pipeline", "healthd.cycle.onrepair"),
        ("healthd.cycle.execute", "healthd.cycle.gpureset"),
        ("healthd.cycle.oneshot", "healthd.cycle.activerun"),
        ("healthd.cycle.oneshot", "healthd.plan.active"),
        ("healthd.cycle.oneshot", "healthd.config.expectations"),
        ("healthd.cycle.oneshot", "healthd.cycle.checkmodes"),
        ("healthd.cli.main", "traceback"),
        ("healthd.text", "difflib"),  # a usage error's guess
        ("healthd.checks.bounded", "psutil"),  # an earlier probe's or a reset's process looked after
        # python-hostlist: only a bracketed list is expanded (the breaker's groups out, the fleet's node lists).
        ("healthd.slurm.hostlist", "hostlist"),
    }),
    "a fleet report never drains: `fleet lemons --drain` alone loads the breaker, Slurm and pydantic": frozenset({
        ("healthd.commands.fleet", "healthd.fleet.drain"),
    }),
    "status, the hook and the prolog from the daemon's pass import nothing of a pass (tests hold each)": frozenset({
        ("healthd.cycle.prolog", "healthd.cycle.engine"),
        ("healthd.cycle.prolog", "healthd.cycle.pipeline"),
        ("healthd.cycle.jobhook", "healthd.cycle.engine"),
        ("healthd.cycle.jobhook", "healthd.boot"),  # the deadline's record, when the child ran past it
        ("healthd.cycle.jobhook", "healthd.cycle.jobrecord"),
        ("healthd.cycle.jobhook", "healthd.store.historyschema"),
        # The prolog loads every enabled check's module and runs two: the history reader (sqlite3) when it gathers.
        ("healthd_checks.jobs.check", "healthd.store.historyreader"),
        ("healthd_checks.jobs.check", "healthd.store.historyschema"),
        ("healthd_checks.host.check", "ctypes"),  # the clock's adjtimex, read when the host check gathers
        ("healthd_checks.nvml.source", "ctypes"),  # the fabric's v2 structure, NVML's own
        ("healthd.config.cache", "logging"),
        ("healthd.commands.status", "healthd.plan.ackview"),
        ("healthd.cycle.render", "healthd.model"),
        ("healthd.store.state", "threading"),
        ("healthd.store.trust", "pwd"),
        ("healthd.store.trust", "grp"),
        ("healthd.config.load", "hashlib"),
        ("healthd.plan.shard", "hashlib"),  # OpenSSL's libcrypto, for a partition counted by shards only
    }),
    "optional dependencies: the journal (systemd-python, the journal extra), DuckDB (the fleet extra)": frozenset({
        ("healthd.service.logs", "systemd"),
        ("healthd.service.sdnotify", "systemd"),
        ("healthd_checks.kernlog.source", "systemd"),
        ("healthd.fleet.columnar", "duckdb"),  # the fleet extra: `healthd fleet` counts with Python without it
    }),
}  # fmt: skip


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_is_read_from_the_whole_tree(graph: dict[str, set[str]]) -> None:
    assert "healthd.cycle.pipeline" in graph and "healthd_checks.xid.check" in graph
    assert "healthd.plan.state" in graph["healthd.cycle.pipeline"]


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    assert _cycles(graph) == []


def test_no_package_imports_another_that_imports_it_back(graph: dict[str, set[str]]) -> None:
    """Packages are layers: no cycle among them, counting every import that runs (those inside functions too).

    Imports under ``if TYPE_CHECKING:`` name types only and never run; they are left out here,
    and docs/architecture.md counts those that point up a layer.
    """
    assert _cycles(packages(graph)) == []


def test_packages_import_only_their_own_layer_or_below(graph: dict[str, set[str]]) -> None:
    package_graph = packages(graph)
    assert {"healthd.cycle", "healthd_checks.xid", "healthd.model"} <= set(package_graph)
    upward = sorted(
        f"{package} imports {target}"
        for package, targets in package_graph.items()
        for target in targets
        if layer_of(target) > layer_of(package)
    )
    assert upward == [], "a layer imports only the layers below it (docs/architecture.md)"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize(("importer", "forbidden", "why"), NEVER, ids=[rule[0] for rule in NEVER])
def test_never_rules(graph: dict[str, set[str]], importer: str, forbidden: tuple[str, ...], why: str) -> None:
    broken = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module == importer or module.startswith(importer + ".")
        for target in targets
        if any(target == f or target.startswith(f if f.endswith(".") else f + ".") for f in forbidden)
    )
    assert broken == [], f"{why}: {broken}"


def test_only_the_acting_stage_calls_slurm(graph: dict[str, set[str]]) -> None:
    callers = {m for m, targets in graph.items() if "healthd.slurm.adapter" in targets}
    strays = sorted(m for m in callers if not m.startswith(SLURM_CALLERS))
    assert strays == [], "Slurm is called through the acting stages only (CONTRIBUTING.md)"
    assert callers & {"healthd.cycle.pipeline", "healthd.fleet.drain"}, "the graph sees the adapter's callers"


def test_imports_inside_functions_are_the_listed_places_only() -> None:
    """Laziness where it pays (``LAZY``, each with its reason); every other import at the top of its module."""
    found = set(lazy_imports())
    allowed = frozenset().union(*LAZY.values())
    assert sorted(found - allowed) == [], "import it at the top, or add the place to LAZY with why it pays"
    assert sorted(allowed - found) == [], "LAZY names a place that imports at the top now"
