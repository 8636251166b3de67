"""healthd against LBNL NHC 1.4.3, side by side: cold ``check --once`` and ``healthd status`` as ratios to NHC.

    python bench/bench_nhc.py --nhc PATH [--runs 11] [--service NAME] [--ethernet IFACE] [--before DIR]
        [--install {editable,wheel}]

``--nhc`` is an unmodified NHC 1.4.3 checkout (the ``nhc`` script, ``scripts/``,
``helpers/`` and its ``nhc-equivalent.conf``: ten checks that work on any Linux machine).
NHC runs in-process, all checks (``-a``), never marking the node offline. Its config is
copied with the root service and the Ethernet interface set to ``--service`` (default:
the command of process 1, which root runs on every machine) and ``--ethernet``.

healthd runs three ways, each with its own state directory in a temporary directory and
``[slurm] enabled = false``, always ``--dry-run``:

- ``check --once`` on the NHC-equivalent config: ``healthd import-nhc`` of the same
  nhc.conf, with every check that it did not write turned off (NHC runs only its ten);
- ``check --once`` on the default config (every installed check on);
- ``healthd status`` after a pass of the default config.

``--install wheel`` runs this code from a wheel of the checkout installed with its dependencies in
a fresh virtual environment, as a node has it (a package installs it so too): an editable install's
path finder is imported by ``site`` in every process and costs a cold run about 8 ms that a node does
not pay. ``editable`` (the default) runs the environment running the benchmark.

Every process is a new one; each healthd run follows an NHC run (A B A B ...), and each
figure is the median of the ratios of those pairs: wall time, CPU (user + system, the
children's included) and peak RSS (the largest process of the tree, as GNU ``time``
reports it: ``/usr/bin/time`` is needed). The first run of
each is left out: it validates healthd's config and caches it, as a node's first run
does. Bytecode is compiled first, as a wheel install does. With ``--before DIR`` each healthd
command also runs older code, with state directories of its own, after an NHC run of its own.
``DIR`` is either an export of that code, run on ``PYTHONPATH`` (it must name its checks' entry
points as the installed code does), or a virtual environment where it is installed (``DIR/bin/python``
exists): code from before the checks moved to ``checks/healthd_checks/<check>/`` needs its own
environment, since the installed entry points name the new modules. The older code is compiled
first too. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check_once import compile_bytecode, installed_checks, one_run
from bench_daemon import wheel_environment

HEALTHD = os.path.join(os.path.dirname(sys.executable), "healthd")
Sample = tuple[float, float, float]  # wall seconds, peak RSS MiB, CPU seconds
TIME = shutil.which("time", path="/usr/bin:/bin") or "/usr/bin/time"  # GNU time (Debian's package "time")


def measured(command: list[str], rss_file: Path) -> Sample:
    """One run of ``command`` under GNU time, which reports the peak RSS of its own small child.

    A child forked from this Python process would count the parent's pages, which it
    holds until it execs, as its peak RSS (about 13 MiB here, more than NHC's whole
    run); wall and CPU come from ``one_run`` (``time`` itself adds about a millisecond).
    """
    wall, _, cpu = one_run([TIME, "-f", "%M", "-o", str(rss_file), *command])
    return wall, int(rss_file.read_text().split()[-1]) / 1024, cpu


def nhc_command(nhc: Path, conf: Path, run_dir: Path) -> list[str]:
    """NHC as its README runs it: every check, nothing marked offline, the log on stdout."""
    run_dir.mkdir()
    (run_dir / "scripts").symlink_to((nhc / "scripts").resolve())
    return [
        shutil.which("bash") or "/bin/bash",
        str(nhc / "nhc"),
        "-D",
        str(run_dir),
        "-c",
        str(conf),
        "-a",
        "MARK_OFFLINE=0",
        "LOGFILE=-",
        f"RESULTFILE={run_dir / 'nhc.status'}",
        f"HELPERDIR={(nhc / 'helpers').resolve()}",
    ]


def nhc_conf(nhc: Path, directory: Path, service: str, ethernet: str) -> Path:
    """NHC's nhc-equivalent.conf with this machine's root service and Ethernet interface."""
    text = (nhc / "nhc-equivalent.conf").read_text()
    text = text.replace("-d slurmd slurmd", f"-d {service} {service}").replace(
        "check_hw_eth eth0", f"check_hw_eth {ethernet}"
    )
    path = directory / "nhc.conf"
    path.write_text(text)
    return path


def healthd_configs(conf: Path, directory: Path, start: list[str]) -> tuple[Path, Path]:
    """The NHC-equivalent config (``import-nhc`` of ``conf`` by ``start``, other checks off) and the default one.

    Each code converts NHC's config itself: older code may not know the keys newer code writes.
    """
    converted = directory / "imported.toml"
    # --allow-partial: healthd has no equivalent of NHC's load average and file tests (docs/commands.md, import-nhc).
    command = [*start, "import-nhc", str(conf), "--allow-partial", "-o", str(converted)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
    text = converted.read_text()
    others = [name for name in _checks_of(start) if f"[checks.{name}]" not in text]
    equivalent = directory / "nhc-equivalent.toml"
    equivalent.write_text(
        _private(directory / "state-nhc-equivalent")
        + text
        + "".join(f"\n[checks.{name}]\nenabled = false\n" for name in others)
    )
    default = directory / "default.toml"
    default.write_text(_private(directory / "state-default"))
    return equivalent, default


def healthd_commands(conf: Path, directory: Path, launcher: Optional[list[str]] = None) -> dict[str, list[str]]:
    """The three healthd commands; ``launcher`` starts healthd (default: the installed console script)."""
    directory.mkdir(exist_ok=True)
    start = launcher or [HEALTHD]
    equivalent, default = healthd_configs(conf, directory, start)
    return {
        "check --once, NHC-equivalent": [*start, "check", "--once", "--dry-run", "--config", str(equivalent)],
        "check --once, default config": [*start, "check", "--once", "--dry-run", "--config", str(default)],
        "status": [*start, "status", "--config", str(default)],
    }


def _checks_of(start: list[str]) -> list[str]:
    """The checks installed for the code ``start`` runs (``[python, "-m", "healthd"]``), else this environment's."""
    if start[1:] != ["-m", "healthd"]:
        return installed_checks()
    listing = "import importlib.metadata as m; print(*sorted(e.name for e in m.entry_points(group='healthd.checks')))"
    return subprocess.run([start[0], "-c", listing], capture_output=True, text=True, check=True).stdout.split()


def _private(state: Path) -> str:
    return f'[paths]\nstate_dir = "{state}"\n[slurm]\nenabled = false\n'


def ratios(ours: list[Sample], theirs: list[Sample]) -> tuple[float, float, float]:
    """Medians of the pairwise ratios healthd / NHC: wall, peak RSS, CPU."""
    return tuple(  # type: ignore[return-value]
        statistics.median(a[i] / b[i] for a, b in zip(ours, theirs)) for i in range(3)
    )


def report(label: str, ours: list[Sample], theirs: list[Sample]) -> None:
    wall, rss, cpu = ratios(ours, theirs)

    def median(samples: list[Sample], i: int) -> float:
        return statistics.median(s[i] for s in samples)

    print(
        f"{label}: wall {wall:.2f}x NHC, CPU {cpu:.2f}x, peak RSS {rss:.2f}x "
        f"(healthd median {median(ours, 0) * 1000:.0f} ms, CPU {median(ours, 2) * 1000:.0f} ms, "
        f"{median(ours, 1):.1f} MiB; NHC {median(theirs, 0) * 1000:.0f} ms, CPU {median(theirs, 2) * 1000:.0f} ms, "
        f"{median(theirs, 1):.1f} MiB)"
    )


class _path:
    """``PYTHONPATH`` set to ``directory`` while in the block (nothing when None, or a virtual environment)."""

    def __init__(self, directory: Optional[Path]) -> None:
        self.directory = None if directory is None or _venv_python(directory) else directory

    def __enter__(self) -> None:
        if self.directory is not None:
            os.environ["PYTHONPATH"] = str(self.directory)

    def __exit__(self, *_: object) -> None:
        os.environ.pop("PYTHONPATH", None)


def _venv_python(directory: Path) -> Optional[Path]:
    """The interpreter of ``directory`` when it is a virtual environment, else None."""
    python = directory / "bin" / "python"
    return python if python.exists() else None


def compile_before(before: Path) -> None:
    """The older code's bytecode, as ``compile_bytecode`` makes this code's (an export, or its environment's tree)."""
    python = _venv_python(before)
    if python is None:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(before)], check=True)
        return
    tree = (
        "import compileall, healthd, os; "
        "compileall.compile_dir(os.path.dirname(os.path.dirname(healthd.__file__)), quiet=1)"
    )
    subprocess.run([str(python), "-c", tree], check=True, cwd="/")


def first_runs(commands: dict[str, list[str]], before: Optional[Path]) -> None:
    """One run of each, uncounted; says how each ended, so a failing check is not timed unnoticed."""
    for name, command in commands.items():
        with _path(before if name.endswith("(before)") else None):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        print(f"{name}: exit {done.returncode} on its first run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nhc", type=Path, required=True, help="an unmodified LBNL NHC 1.4.3 checkout")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--service", default=Path("/proc/1/comm").read_text().strip(), help="a process root runs")
    parser.add_argument("--ethernet", default="eth0", help="an Ethernet interface this machine has")
    parser.add_argument("--install", choices=("editable", "wheel"), default="editable", help="how this code runs")
    parser.add_argument(
        "--before", type=Path, help="older code to run alternately: an export (on PYTHONPATH) or a virtual environment"
    )
    args = parser.parse_args()
    nhc_dir, before = args.nhc.resolve(), args.before.resolve() if args.before else None
    compile_bytecode()
    if before is not None:
        compile_before(before)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        # `python -m` puts the working directory first on sys.path: run from the checkout, the
        # older code's runs would import this checkout's healthd instead of their own (and from a
        # directory holding a `healthd` folder, that folder as a namespace package).
        (directory / "cwd").mkdir()
        os.chdir(directory / "cwd")
        conf = nhc_conf(nhc_dir, directory, args.service, args.ethernet)
        nhc = nhc_command(nhc_dir, conf, directory / "nhc-run")
        wheel = args.install == "wheel"
        this = [str(wheel_environment(directory, dependencies=True) / "healthd")] if wheel else None
        commands = healthd_commands(conf, directory / "healthd", this)
        if before is not None:
            # `python -m healthd`: the console script names the installed code's entry point, which
            # older code may not have (it moved in the restructuring).
            python = _venv_python(before) or Path(sys.executable)
            with _path(before):  # an export converts NHC's config with its own import-nhc too
                older = healthd_commands(conf, directory / "before", [str(python), "-m", "healthd"])
            commands.update({f"{name} (before)": command for name, command in older.items()})
        first_runs({"NHC": nhc, **commands}, before)
        samples: dict[str, tuple[list[Sample], list[Sample]]] = {name: ([], []) for name in commands}
        for _ in range(args.runs):  # A B A C A D, again and again
            for name, command in commands.items():
                samples[name][1].append(measured(nhc, directory / "rss"))
                with _path(before if name.endswith("(before)") else None):
                    samples[name][0].append(measured(command, directory / "rss"))
    for name, (ours, theirs) in samples.items():
        report(name, ours, theirs)
    print(
        f"command: {' '.join(sys.argv)}; {args.runs} pairs each, this code {args.install}; "
        f"python {sys.version.split()[0]}, cpus {os.cpu_count()}"
    )


if __name__ == "__main__":
    main()
