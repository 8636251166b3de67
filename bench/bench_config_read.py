"""What reading the config costs the commands that read it: CPU of each new process, this code against older code.

    python bench/bench_config_read.py [--runs 15] [--before DIR]

Measures, each run a new process, with a private state directory, Slurm off and ``--dry-run``:
a cold ``healthd check --once`` of the default config with an unchanged config (its validation
read from the cache, ``healthd.config.cache``) and with a config changed before every run (a
comment that counts: validated in full), ``healthd status``, a clean ``healthd-prolog``,
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


def one_run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, check=False)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def instructions(command: list[str], env: dict[str, str]) -> int:
    """Instructions one child process (and its children: the prolog's work runs in one) executed, by valgrind.

    A count, not a time: it does not move with the load of a shared machine, where CPU times do.
    """
    grind = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--trace-children=yes",
        "--cachegrind-out-file=/dev/null",
    ]
    done = subprocess.run([*grind, *command], env=env, capture_output=True, text=True, check=False)
    counts = [line.rpartition(" ")[2].replace(",", "") for line in done.stderr.splitlines() if "I   refs:" in line]
    return sum(int(count) for count in counts)


class Setup(NamedTuple):
    """How one code runs: its environment variables, its config, and the folder of its Python and programs."""

    env: dict[str, str]
    config: Path
    bin: Path


def setups(root: Path, before: Optional[Path]) -> dict[str, Setup]:
    """A config and an environment for this code and, with ``before``, for the older code."""
    found = {}
    for who in ("this", "before") if before else ("this",):
        directory = root / who
        directory.mkdir()
        config = directory / "healthd.toml"
        config.write_text(f'[paths]\nstate_dir = "{directory}/state"\n[slurm]\nenabled = false\nnode_name = "bench"\n')
        config.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SLURM_JOB_ID="1", SLURM_JOB_USER="bench")
        tree = before if who == "before" and before is not None else REPO
        if _is_environment(tree):
            found[who] = Setup(env, config, tree / "bin")
            continue
        # Each tree's own code first on the path: this checkout may not be the one the environment installed.
        env["PYTHONPATH"] = f"{tree}{os.pathsep}{tree / 'checks'}"
        found[who] = Setup(env, config, BIN)
    return found


def _changed(config: Path, number: int) -> Path:
    """``config`` with a comment that makes its bytes new (so it is validated in full), as a new file."""
    fresh = config.with_name(f"changed-{number}.toml")
    fresh.write_text(config.read_text() + f"# run {number}\n")
    fresh.chmod(0o600)
    return fresh


# The hook reads /etc/healthd/healthd.toml alone: its default path is pointed at the benchmark's config.
HOOK = (
    "import sys, pathlib, healthd.config.load as c; c.DEFAULT_CONFIG_PATH = pathlib.Path(sys.argv[1]);"
    "from healthd.cli.hook import hook_main; sys.exit(hook_main(['--dry-run']))"
)
CHECK = ["check", "--once", "--dry-run", "-c"]
# Each command from a setup's folder of programs (``b``), its config (``c``) and the run's number (``n``).
COMMANDS: dict[str, Callable[[Path, Path, int], list[str]]] = {
    "check --once, unchanged config (cached)": lambda b, c, n: [str(b / "healthd"), *CHECK, str(c)],
    "check --once, changed config (validated)": lambda b, c, n: [str(b / "healthd"), *CHECK, str(_changed(c, n))],
    "status": lambda b, c, n: [str(b / "healthd"), "status", "--config", str(c)],
    "prolog": lambda b, c, n: [str(b / "healthd-prolog"), "--config", str(c)],
    "healthd-hook, no daemon (its own pass)": lambda b, c, n: [str(b / "python"), "-c", HOOK, str(c)],
    "python -c pass": lambda b, c, n: [str(b / "python"), "-c", "pass"],
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
                one_run(make(setup.bin, setup.config, 0), setup.env)  # the first run validates and caches; not measured
            if args.valgrind:
                counts = {who: instructions(make(s.bin, s.config, 1), s.env) for who, s in found.items()}
                figures = [f"{who}: {count / 1e6:.1f} M instructions" for who, count in counts.items()]
                if counts.get("before"):
                    figures.append(f"this/before: {counts['this'] / counts['before']:.3f}")
                print(f"{name}: " + "; ".join(figures), flush=True)
                continue
            runs: dict[str, list[tuple[float, float]]] = {who: [] for who in found}
            for number in range(1, args.runs + 1):
                for who in list(found) if number % 2 else list(found)[::-1]:
                    setup = found[who]
                    runs[who].append(one_run(make(setup.bin, setup.config, number), setup.env))
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
