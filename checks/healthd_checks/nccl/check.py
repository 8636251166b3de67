"""The ``nccl`` check (active): nccl-tests' ``all_reduce_perf`` on the node's GPUs: bus bandwidth and sums.

An active check: it loads every GPU and NVLink (and, for the loopback run, the HCAs) for
seconds, so it runs only in an active pass, on a node Slurm reports idle and drained
(docs/active.md). ``gather`` runs ``all_reduce_perf -b MIN -e MAX -f 2 -g GPUS -n ITERS -c 1``
by absolute path under ``run_timeout`` (``program``: trusted, bounded, a hung one never
doubled), once over NVLink and shared memory as NCCL chooses, and, when
``ib_loopback_min_busbw_gbps`` is set, once more with NCCL_SHM_DISABLE, NCCL_P2P_DISABLE and
NCCL_NET_GDR_LEVEL=5, so that the GPUs talk through the node's own HCAs (Azure's
``check_nccl_allreduce_ib_loopback``). A run below its floor is run again up to ``retries``
times, and the best one counts, as Azure's REPEATS pass on any run that reaches the floor.
``judge`` grades (``healthd_checks.nccl.parse``):

- elements summed wrong (``#wrong`` above 0, or ``Out of bounds values : N FAILED``):
  CRITICAL ``NCCL_WRONG_RESULTS``: GPUs or links that corrupt a collective's data corrupt
  every job's results silently, which is worse than any slowness (Azure fails the node on
  ``FAILED`` at once, without repeating);
- an average bus bandwidth below ``min_busbw_gbps``: WARNING ``NCCL_BANDWIDTH_LOW`` (through
  the HCAs: ``NCCL_IB_LOOPBACK_BANDWIDTH_LOW``). WARNING, as the dcgm check's low PCIe
  bandwidth: a slow node computes right, only slower, and an active check runs with no job
  on the node, so WARNING drains it now all the same (Azure's NHC marks it offline, which
  lets running jobs end), while CRITICAL would also kill a job that is not there;
- the bus bandwidth measured: an OK note ``NCCL_BUSBW`` (its value in the details);
- output that is not all_reduce_perf's: UNKNOWN ``NCCL_MALFORMED``; a run that fails
  without it, hangs or cannot start: UNKNOWN ``NCCL_FAILED``/``NCCL_TIMEOUT``.

Not applicable where all_reduce_perf is absent or sysfs shows no NVIDIA GPU. See docs/active.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional, Union

from healthd.checks.bounded import BARE_ENV
from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import Finding, Status
from healthd.text import one_line

from ..common import program
from ..common.sysfs import VENDOR_NVIDIA, scan_pci
from .parse import AllReduce, parse_all_reduce

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import NcclSettings

SUBJECT = "all_reduce_perf"
# Azure's check_nccl_allreduce_ib_loopback (customTests/azure_nccl_allreduce_ib_loopback.nhc): no
# shared memory, no peer-to-peer, GPUDirect RDMA at any distance, so every byte crosses an HCA.
IB_LOOPBACK_ENV = {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_NET_GDR_LEVEL": "5"}


class Measurement(NamedTuple):
    """The runs of one kind (``all_reduce`` over whatever NCCL picks, ``ib_loopback`` through the HCAs)."""

    name: str
    floor: Optional[float]
    runs: tuple[AllReduce, ...]

    @property
    def best(self) -> float:
        return max(run.avg_busbw for run in self.runs)

    @property
    def wrong(self) -> int:
        return max(run.wrong for run in self.runs)


class NcclObservation(NamedTuple):
    """Every measurement made in this pass; or why one gave no results."""

    measurements: tuple[Measurement, ...] = ()
    problem: Optional[Unobserved] = None


def _gpus(ctx: CheckContext[NcclSettings]) -> Union[int, Unobserved]:
    """``gpus`` when set, else the NVIDIA GPUs sysfs lists (the count nvidia-smi --list-gpus gives Azure)."""
    if ctx.settings.gpus is not None:
        return ctx.settings.gpus
    scan = scan_pci(ctx.paths.sysfs, frozenset({VENDOR_NVIDIA}))
    if scan.errors and not scan.nvidia_gpus:
        return Unobserved("NCCL_GPUS_UNREADABLE", SUBJECT, one_line(f"cannot count the GPUs: {scan.errors[0]}"))
    if not scan.nvidia_gpus:
        raise NotApplicable(f"no NVIDIA GPU under {ctx.paths.sysfs}/bus/pci/devices")
    return len(scan.nvidia_gpus)


def run_once(ctx: CheckContext[NcclSettings], gpus: int, loopback: bool) -> Union[AllReduce, Unobserved]:
    """One ``all_reduce_perf`` run: what it printed, or why there is nothing to judge."""
    settings = ctx.settings
    argv = [str(settings.all_reduce_perf), "-b", settings.size_min, "-e", settings.size_max, "-f", "2"]
    argv += ["-g", str(gpus), "-n", str(settings.iterations), "-c", "1"]
    env = dict(BARE_ENV, **(IB_LOOPBACK_ENV if loopback else {}))
    if settings.topo_file is not None:
        env["NCCL_TOPO_FILE"] = str(settings.topo_file)
    done = program.run(ctx.memory, argv, settings.run_timeout, SUBJECT, "NCCL", env)
    if isinstance(done, Unobserved):
        return done
    # nccl-tests exits non-zero after wrong results and still prints its table: wrong results decide.
    # Any other non-zero exit is a run that failed, whatever its table says: nothing to grade OK.
    try:
        run = parse_all_reduce(done.out)
    except ValueError as exc:
        if done.returncode != 0:
            return program.failed(done, argv, SUBJECT, "NCCL")
        return Unobserved("NCCL_MALFORMED", SUBJECT, one_line(f"{settings.all_reduce_perf}: {exc}", 300))
    return program.failed(done, argv, SUBJECT, "NCCL") if done.returncode != 0 and not run.wrong else run


def _measure(
    ctx: CheckContext[NcclSettings], gpus: int, name: str, floor: Optional[float]
) -> Union[Measurement, Unobserved]:
    runs: list[AllReduce] = []
    for _ in range(1 + ctx.settings.retries):
        run = run_once(ctx, gpus, loopback=name == "ib_loopback")
        if isinstance(run, Unobserved):
            return run
        runs.append(run)
        if run.wrong or floor is None or run.avg_busbw >= floor:
            break
    return Measurement(name, floor, tuple(runs))


def gather(ctx: CheckContext[NcclSettings]) -> NcclObservation:
    settings = ctx.settings
    if not program.present(settings.all_reduce_perf):
        raise NotApplicable(f"no all_reduce_perf at {settings.all_reduce_perf}")
    gpus = _gpus(ctx)
    if isinstance(gpus, Unobserved):
        return NcclObservation(problem=gpus)
    kinds = [("all_reduce", settings.min_busbw_gbps)]
    if settings.ib_loopback_min_busbw_gbps is not None:
        kinds.append(("ib_loopback", settings.ib_loopback_min_busbw_gbps))
    measurements: list[Measurement] = []
    for name, floor in kinds:
        measured = _measure(ctx, gpus, name, floor)
        if isinstance(measured, Unobserved):
            return NcclObservation(tuple(measurements), measured)
        measurements.append(measured)
    return NcclObservation(tuple(measurements))


def _prefix(measurement: Measurement) -> str:
    return "NCCL_IB_LOOPBACK" if measurement.name == "ib_loopback" else "NCCL"


def _judge_one(measurement: Measurement, jc: JudgeContext[NcclSettings]) -> list[Finding]:
    subject, runs = measurement.name, len(measurement.runs)
    if measurement.wrong:
        sizes = sorted({row.size for run in measurement.runs for row in run.rows if row.wrong_total})
        message = f"all_reduce_perf summed {measurement.wrong} elements wrong (sizes {sizes or 'not named'})"
        return [jc.finding(Status.CRITICAL, "NCCL_WRONG_RESULTS", subject, message, wrong=measurement.wrong)]
    best, floor = measurement.best, measurement.floor
    if floor is not None and best < floor:
        message = f"average bus bandwidth {best:g} GB/s in the best of {runs} runs, below the floor of {floor:g} GB/s"
        code = f"{_prefix(measurement)}_BANDWIDTH_LOW"
        return [jc.finding(Status.WARNING, code, subject, message, gbps=best, floor=floor, runs=runs)]
    message = f"average bus bandwidth {best:g} GB/s" + (f" (floor {floor:g} GB/s)" if floor is not None else "")
    return [jc.finding(Status.OK, f"{_prefix(measurement)}_BUSBW", subject, message, gbps=best, runs=runs)]


def judge(observed: NcclObservation, jc: JudgeContext[NcclSettings]) -> Verdict:
    findings = [finding for measurement in observed.measurements for finding in _judge_one(measurement, jc)]
    if observed.problem is not None:
        findings.append(observed.problem.finding(jc))
    return Verdict(tuple(findings))


def hardware_code(code: str) -> bool:
    """Whether ``code`` says the GPUs or their links measured wrong or slow: it may escalate (docs/escalation.md)."""
    return code == "NCCL_WRONG_RESULTS" or code.endswith("_BANDWIDTH_LOW")


CHECK = CheckSpec(
    name="nccl",
    description="NCCL all_reduce_perf bandwidth and sums on the GPUs, active: only on an idle, drained node",
    settings="healthd_checks.nccl.settings:NcclSettings",
    run=Staged(gather, judge),
    active=True,
    hardware=hardware_code,
)
