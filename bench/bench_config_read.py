"""What reading the config costs the commands that read it: CPU of each new process, this code against older code.

    python bench/bench_config_read.py [--runs 15] [--before DIR]

Measures, each run a new process, with a private state directory, Slurm off and ``--dry-run``:
a cold ``healthd check --once`` of the default config with an unchanged config (its validation
read from the cache, ``healthd.config.cache``) and with a config changed before every run (a
comment that counts: validated in full), ``healthd status``, a clean ``healthd-prolog`` (given the
time to finish: ``PROLOG``),
``healthd-hook`` with no daemon running (the hook's own pass), and
``python -c pass`` (the interpreter floor), the bytecode compiled first. With ``--before DIR``
every run of this code is paired with one of the older code, alternating which goes first, and the
median of the pairs' CPU ratios is printed. ``DIR`` is a virtual environment where the older code
is installed (``DIR/bin/python``: its own programs and entry points), or an export of it, put first
on ``PYTHONPATH`` as this checkout is for this code. An export runs with this environment's
installed entry points and editable finder: a check the older tree lacks is then loaded from the
installed code, or fails to load, and a failed load can keep the older code from its config cache,
so the figures of an export are the older code's only where the two list the same checks.
``--valgrind`` counts the instructions of one run of each instead (valgrind's cachegrind), which a
busy machine does not move. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent


def compile_bytecode(tree: Path) -> None:
    """Compile ``tree``'s bytecode first, as a wheel install does (a checkout may be run without writing it).

    ``tree`` is a checkout or export, or a virtual environment, whose own Python names its packages' folders.
    """
    if _is_environment(tree):
        python = str(tree / "bin" / "python")
        where = "import healthd, healthd_checks as c; print(healthd.__path__[0]); print(c.__path__[0])"
        found = subprocess.run([python, "-c", where], capture_output=True, text=True, check=True)
        subprocess.run([python, "-m", "compileall", "-q", *found.stdout.split("\n")[:2]], check=True)
        return
    # The checks' folder: checks/ now, a top-level healthd_checks in a tree from before the move.
    packages = [str(tree / name) for name in ("healthd", "checks", "healthd_checks") if (tree / name).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True)


def _is_environment(tree: Path) -> bool:
    """Whether ``tree`` is a virtual environment (the older code installed there) rather than an export."""
    return (tree / "pyvenv.cfg").is_file() and (tree / "bin" / "python").exists()


def one_run(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one child process, started in ``cwd``.

    Never in the checkout: ``python -c`` puts its directory first on the path, so the older code's
    run would import this checkout's modules.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=False)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def instructions(command: list[str], env: dict[str, str], cwd: Path) -> int:
    """Instructions one child process and its children executed, by valgrind.

    A count, not a time: it does not move with the load of a shared machine, where CPU times do.
    Each process writes its own log (``%p``): the prolog's work runs in a forked child whose
    standard error is /dev/null, so its count is not on the parent's.
    """
    with tempfile.TemporaryDirectory() as logs:
        grind = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--trace-children=yes",
            "--cachegrind-out-file=/dev/null",
            f"--log-file={logs}/%p.log",
        ]
        subprocess.run([*grind, *command], env=env, cwd=cwd, capture_output=True, check=False)
        lines = [line for log in Path(logs).iterdir() for line in log.read_text().split("\n") if "I   refs:" in line]
    return sum(int(line.rpartition(" ")[2].replace(",", "")) for line in lines)


class Setup(NamedTuple):
    """How one code runs: its environment variables, its config, the folder of its Python and programs, and
    where its ``healthd-hook`` and ``healthd-prolog`` start (``module:function``, as its entry points say)."""

    env: dict[str, str]
    config: Path
    bin: Path
    entries: dict[str, str]


def setups(root: Path, before: Optional[Path]) -> dict[str, Setup]:
    """A config and an environment for this code and, with ``before``, for the older code."""
    found = {}
    for who in ("this", "before") if before else ("this",):
        directory = root / who
        directory.mkdir()
        config = directory / "healthd.toml"
        config.write_text(
            f'[paths]\nstate_dir = "{directory}/state"\n[slurm]\nenabled = false\nnode_name = "bench"\n'
            "[checks.jobs]\nprolog_timeout = 60\n"  # the prolog's whole work, however slow the machine (PROLOG)
        )
        config.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SLURM_JOB_ID="1", SLURM_JOB_USER="bench")
        tree = before if who == "before" and before is not None else REPO
        programs = tree / "bin" if _is_environment(tree) else BIN
        if not _is_environment(tree) and not _installed(programs, tree, env):
            # Each tree's own code first on the path: this checkout may not be the one the environment installed.
            # Two more places to look in cost every import (about 2.5 M instructions of `python -c pass`).
            env["PYTHONPATH"] = f"{tree}{os.pathsep}{tree / 'checks'}"
        found[who] = Setup(env, config, programs, _entries(programs, env))
    return found


def _installed(programs: Path, tree: Path, env: dict[str, str]) -> bool:
    """Whether the environment of ``programs`` imports healthd from ``tree`` itself (an editable install of it)."""
    ask = "import healthd; print(healthd.__file__)"
    said = subprocess.run([str(programs / "python"), "-c", ask], env=env, cwd="/", capture_output=True, text=True)
    return said.returncode == 0 and Path(said.stdout.strip()).parent == tree / "healthd"


def _entries(programs: Path, env: dict[str, str]) -> dict[str, str]:
    """``module:function`` of each console program (the hook's and the prolog's moved between packages)."""
    ask = (
        "from importlib.metadata import entry_points; scripts = entry_points(group='console_scripts'); "
        "print(scripts['healthd-hook'].value, scripts['healthd-prolog'].value)"
    )
    python = str(programs / "python")
    said = subprocess.run([python, "-c", ask], env=env, cwd="/", capture_output=True, text=True, check=True)
    hook, prolog = said.stdout.split()
    return {"healthd-hook": hook, "healthd-prolog": prolog}


def _changed(config: Path, number: int) -> Path:
    """``config`` with a comment that makes its bytes new (so it is validated in full), as a new file."""
    fresh = config.with_name(f"changed-{number}.toml")
    fresh.write_text(config.read_text() + f"# run {number}\n")
    fresh.chmod(0o600)
    return fresh


def _program(entry: str, before: str, argv: str) -> str:
    """A ``python -c`` program that runs ``before``, then ``entry`` (``module:function``) with ``argv``."""
    module, function = entry.split(":")
    return f"import sys\n{before}\nfrom {module} import {function} as main\nsys.exit(main({argv}))\n"


# The hook reads /etc/healthd/healthd.toml alone: its default path is pointed at the benchmark's config.
HOOK = "import pathlib, healthd.config.load as c\nc.DEFAULT_CONFIG_PATH = pathlib.Path(sys.argv[1])"
# The prolog as slurmd runs it, but with 60 s to read its config, where a node has 1 s: on a busy
# machine, or under valgrind, its child would be killed at that deadline and the figure would time
# how far it got. The deadline is the module's (healthd.cycle.jobhook now, healthd.commands.jobs before).
PROLOG = """try:
    import healthd.cycle.jobhook as hook
except ImportError:
    import healthd.commands.jobs as hook
hook.DEFAULT_PROLOG_TIMEOUT = 60.0"""
CHECK = ["check", "--once", "--dry-run", "-c"]


def _healthd(s: Setup, *argv: str) -> list[str]:
    return [str(s.bin / "healthd"), *argv]


def _console(s: Setup, name: str, before: str, argv: str) -> list[str]:
    """The console program ``name`` of the setup's code, run by ``python -c`` after ``before``."""
    return [str(s.bin / "python"), "-c", _program(s.entries[name], before, argv), str(s.config)]


# Each command from a setup and the run's number.
COMMANDS: dict[str, Callable[[Setup, int], list[str]]] = {
    "check --once, unchanged config (cached)": lambda s, n: _healthd(s, *CHECK, str(s.config)),
    "check --once, changed config (validated)": lambda s, n: _healthd(s, *CHECK, str(_changed(s.config, n))),
    "status": lambda s, n: _healthd(s, "status", "--config", str(s.config)),
    "prolog (no daemon)": lambda s, n: _console(s, "healthd-prolog", PROLOG, "['--config', sys.argv[1]]"),
    "healthd-hook, no daemon (its own pass)": lambda s, n: _console(s, "healthd-hook", HOOK, "['--dry-run']"),
    "python -c pass": lambda s, n: [str(s.bin / "python"), "-c", "pass"],
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--before", type=Path, help="older code to run alternately: a virtual environment, or an export (PYTHONPATH)"
    )
    parser.add_argument("--valgrind", action="store_true", help="count each command's instructions once instead")
    args = parser.parse_args()
    for tree in (REPO, args.before) if args.before else (REPO,):
        compile_bytecode(tree)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        found = setups(root, args.before)
        for name, make in COMMANDS.items():
            for setup in found.values():
                one_run(make(setup, 0), setup.env, setup.config.parent)  # it validates and caches; not measured
            if args.valgrind:
                counts = {who: instructions(make(s, 1), s.env, s.config.parent) for who, s in found.items()}
                figures = [f"{who}: {count / 1e6:.1f} M instructions" for who, count in counts.items()]
                if counts.get("before"):
                    figures.append(f"this/before: {counts['this'] / counts['before']:.3f}")
                print(f"{name}: " + "; ".join(figures), flush=True)
                continue
            runs: dict[str, list[tuple[float, float]]] = {who: [] for who in found}
            for number in range(1, args.runs + 1):
                for who in list(found) if number % 2 else list(found)[::-1]:
                    setup = found[who]
                    runs[who].append(one_run(make(setup, number), setup.env, setup.config.parent))
            figures = [
                f"{who}: wall {statistics.median(w for w, _ in r):.0f} ms, CPU {statistics.median(c for _, c in r):.0f}"
                " ms"
                for who, r in runs.items()
            ]
            if "before" in runs:
                pairs = [a[1] / b[1] for a, b in zip(runs["this"], runs["before"]) if b[1] > 0]
                figures.append(f"CPU this/before, median of {len(pairs)} pairs: {statistics.median(pairs):.3f}")
            print(f"{name}: " + "; ".join(figures), flush=True)


if __name__ == "__main__":
    main()
