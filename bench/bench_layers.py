"""The layering's measures: packages, the imports between them, and the modules a pass and a prolog cross.

    .venv/bin/python bench/bench_layers.py [--repo DIR]

From the source (``tests/healthd_testkit/layers.py`` reads it, as ``tests/test_layering.py``
does): the number of packages and of the imports between them, counting each
importing module once per package it imports (every import that runs, those inside
functions too), and the imports that point up a layer (``LAYERS``), those that run and
those under ``if TYPE_CHECKING:``, and the imports inside functions (``lazy_imports``:
each module and what it imports there counted once). ``--repo DIR`` reads another tree (an export of older
code) with the same layers.

From a run (the ``healthd`` that this Python imports: put an older export first on
``PYTHONPATH`` to walk it): the modules of healthd whose functions run in a cold
``check --once --dry-run`` (every check on, Slurm off) and in a ``healthd-prolog``
(beside a fresh daemon pass, and without one), and the calls from a module into one of
a higher layer (the module pairs): a check's ``gather`` that the runner calls, a
callback handed down. The prolog's work runs in this process, not in its child.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from healthd_testkit.layers import REPO, import_graph, layer_of, lazy_imports, package_of, packages


def static(repo: Path) -> None:
    """The package graph's size and the imports that point up a layer, from the source of ``repo``."""
    graph = import_graph(repo)
    package_graph = packages(graph)
    crossing = [(m, t) for m, targets in graph.items() for t in targets if package_of(m) != package_of(t)]
    edges = sum(len(targets) for targets in package_graph.values())
    print(f"packages: {len(package_graph)}; package -> package imports: {edges}")
    print(f"module imports between packages: {len(crossing)}")
    for kind, modules in (("running", graph), ("type-only", import_graph(repo, type_only=True))):
        up = sorted(
            f"{m} -> {t}"
            for m, targets in modules.items()
            for t in targets
            if _layer(package_of(t)) > _layer(package_of(m))
        )
        print(f"{kind} imports up a layer: {len(up)}")
        for line in up:
            print(f"  {line}")
    lazy = lazy_imports(repo)
    modules = {m for m, _ in lazy}
    print(f"imports inside functions: {len(lazy)} (module, imported) pairs in {len(modules)} modules")


def _layer(package: str) -> int:
    """The package's layer; one that ``LAYERS`` does not name (older code's) ranks above them all."""
    try:
        return layer_of(package)
    except StopIteration:
        return 99


class Walk:
    """The healthd modules whose functions ran, and the calls from one module into a higher layer's."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.climbs: set[tuple[str, str]] = set()

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not _ours(callee):
            return
        self.modules.add(callee)
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""
        if _ours(caller) and caller != callee and _layer(package_of(callee)) > _layer(package_of(caller)):
            self.climbs.add((caller, callee))

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def report(self, what: str) -> None:
        print(f"{what}: {len(self.modules)} modules, {len(self.climbs)} calls into a higher layer")
        for caller, callee in sorted(self.climbs):
            print(f"  {caller} -> {callee}")


def _ours(module: str) -> bool:
    return module == "healthd" or module.startswith(("healthd.", "healthd_checks"))


class _Exited(Exception):
    """The prolog's child called ``os._exit``: here, the end of its work."""


def _entry(*names: str) -> Callable[..., int]:
    """The first of ``module:function`` that this healthd has (the prolog's entry moved between versions)."""
    for name in names:
        module, _, function = name.partition(":")
        with contextlib.suppress(ImportError, AttributeError):
            found: Callable[..., int] = getattr(importlib.import_module(module), function)
            return found
    raise SystemExit(f"none of {names} found")


def walk_prolog(config: Path, what: str) -> None:
    """``healthd-prolog --config CONFIG`` walked in this process: no fork, the child's side run here."""
    prolog_main = _entry("healthd.cli.main:prolog_main", "healthd.commands.jobs:prolog_main")
    walk = Walk()
    pipes: list[int] = []
    saved = os.fork, os.dup2, os.close, os.pipe, os._exit

    def pipe() -> tuple[int, int]:
        pipes.extend(saved[3]())
        return pipes[-2], pipes[-1]

    def exit_here(code: int) -> None:
        raise _Exited(code)

    # The child's side in this process: its streams and the pipe's ends left open, its exit an exception.
    os.fork, os.dup2, os.close, os.pipe, os._exit = (  # type: ignore[assignment]
        lambda: 0,
        lambda fd, fd2, inheritable=True: fd2,
        lambda fd: None,
        pipe,
        exit_here,
    )
    os.environ.update(SLURM_JOB_ID="4242", SLURM_JOB_USER="bench")
    try:
        with walk.tracing(), contextlib.suppress(_Exited):
            prolog_main(["--config", str(config)])
    finally:
        os.fork, os.dup2, os.close, os.pipe, os._exit = saved
    said = os.read(pipes[0], 1 << 20).decode().splitlines()[-1]
    for fd in pipes:
        os.close(fd)
    walk.report(f"{what}: {json.loads(said)['out'].strip()}")


def walk_check(config: Path) -> None:
    """A cold ``check --once --dry-run`` walked in this process."""
    main = _entry("healthd.cli.main:main")
    walk = Walk()
    with walk.tracing(), open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        main(["check", "--once", "--dry-run", "--config", str(config)])
    walk.report("check --once --dry-run")


def _claim(state: Path, config: Path) -> Optional[Any]:
    """A daemon's fresh pass recorded in ``state``, as the running daemon would leave it; the claim held."""
    done = subprocess.run(
        [sys.executable, "-m", "healthd", "check", "--once", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    module = _entry("healthd.cycle.daemonpass:DaemonClaim", "healthd.store.daemonpass:DaemonClaim")
    from healthd.config.load import sha256_hex

    claim = module(state)
    if not claim.acquire(5):
        return None
    claim.record(
        json.loads(done.stdout),
        fresh_for=300,
        config_sha256=sha256_hex(config.read_bytes()),
        dry_run=False,
        now=time.time(),
    )
    return claim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the tree whose source is read (default: this one)")
    args = parser.parse_args()
    static(args.repo)
    print(f"walked: {Path(importlib.import_module('healthd').__file__ or '').parent}")
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        configs = {}
        for name in ("check", "daemon", "alone"):
            configs[name] = root / f"{name}.toml"
            configs[name].write_text(f'[paths]\nstate_dir = "{root / name}"\n[slurm]\nenabled = false\n')
            configs[name].chmod(0o600)
        walk_check(configs["check"])
        claim = _claim(root / "daemon", configs["daemon"])
        walk_prolog(configs["daemon"], "prolog beside the daemon's fresh pass")
        if claim is not None:
            claim.release()
        walk_prolog(configs["alone"], "prolog without a daemon")


if __name__ == "__main__":
    main()
