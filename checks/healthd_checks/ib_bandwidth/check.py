"""The ``ib_bandwidth`` check (active): perftest's ``ib_write_bw`` from each HCA to itself, its bandwidth judged.

An active check: it drives each HCA at line rate for ``duration`` seconds (with
``use_cuda``, from and to a GPU's memory), so it runs only in an active pass, on a node
Slurm reports idle and drained (docs/active.md). For each HCA, one after another, ``gather``
starts ``ib_write_bw -d HCA -p PORT -s SIZE -D DURATION -q QPS -x 0 -F --report_gbits --perform_warm_up``
as the server, then the same with ``localhost`` as its client (``program.run_pair``:
trusted, bounded, the client tried again while the server is not listening yet): the
loopback of Azure's ``check_ib_bw_non_gdr`` and ``check_ib_bw_gdr``
(customTests/azure_ib_write_bw_*.nhc), which write from an HCA to itself, through its port
and back, with the same options. With ``use_cuda`` the i-th HCA uses the i-th GPU
(``--use_cuda=i``, as Azure's script pairs them). ``judge`` grades each HCA
(``healthd_checks.ib_bandwidth.parse``):

- a ``BW average[Gb/sec]`` below ``min_gbps``: WARNING ``IB_BANDWIDTH_LOW`` for that HCA. WARNING,
  as the nccl and dcgm checks' bandwidth findings: a slow HCA moves data right, only slower,
  and an active check runs with no job on the node, so WARNING drains it now all the same;
- the bandwidth measured: an OK note ``IB_BANDWIDTH`` (its value in the details);
- no result table, or a garbled one: UNKNOWN ``IB_BANDWIDTH_MALFORMED``; a run that fails
  without one (no such device, the port taken), hangs or cannot start: UNKNOWN
  ``IB_BANDWIDTH_FAILED``/``IB_BANDWIDTH_TIMEOUT``; more HCAs than ``timeout`` has room for
  at ``run_timeout`` each: UNKNOWN ``IB_BANDWIDTH_BUDGET``, nothing run.

Not applicable where ib_write_bw is absent or no device's port 1 is InfiniBand. See docs/active.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Union

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import Finding, Status
from healthd.text import one_line

from ..common import program
from ..common.sysfs import SysfsError, read_value
from .parse import parse_write_bw

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import IbBandwidthSettings

# Azure's scripts give the server 5 seconds (SLEEP_TIME) before they start the client.
CONNECT_WINDOW = 5.0


class HcaResult(NamedTuple):
    """One HCA's measurement: Gb/s, or why there is none."""

    hca: str
    gbps: Union[float, Unobserved]


def infiniband_hcas(sysfs: Path) -> Union[list[str], Unobserved]:
    """The devices under ``class/infiniband`` whose port 1 has link layer InfiniBand (Azure's determine_IB_devices)."""
    root = sysfs / "class" / "infiniband"
    try:
        devices = sorted(entry.name for entry in root.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        return Unobserved("IB_BANDWIDTH_SYSFS_UNREADABLE", str(root), f"cannot list {root}: {exc.strerror or exc}")
    hcas = []
    for device in devices:
        try:
            layer = read_value(root / device / "ports" / "1" / "link_layer")
        except SysfsError as exc:
            return Unobserved("IB_BANDWIDTH_SYSFS_UNREADABLE", device, str(exc))
        if layer == "InfiniBand":
            hcas.append(device)
    return hcas


def measure(ctx: CheckContext[IbBandwidthSettings], hca: str, index: int) -> Union[float, Unobserved]:
    """One HCA's loopback: the average Gb/s at ``message_size``, or why there is none."""
    settings = ctx.settings
    server = [str(settings.ib_write_bw), "-d", hca, "-p", str(settings.port), "-s", str(settings.message_size)]
    server += ["-D", str(settings.duration), "-q", str(settings.queue_pairs)]
    server += ["-x", "0", "-F", "--report_gbits", "--perform_warm_up"]
    server += [f"--use_cuda={index}"] if settings.use_cuda else []
    done = program.run_pair(
        ctx.memory, server, [*server, "localhost"], settings.run_timeout, hca, "IB_BANDWIDTH", CONNECT_WINDOW
    )
    if isinstance(done, Unobserved):
        return done
    if done.returncode != 0:  # a client that failed, even after printing a table, measured nothing to grade
        return program.failed(done, server, hca, "IB_BANDWIDTH")
    try:
        rows = parse_write_bw(done.out)
    except ValueError as exc:
        return Unobserved("IB_BANDWIDTH_MALFORMED", hca, one_line(f"{settings.ib_write_bw}: {exc}", 300))
    measured = [row.gbps for row in rows if row.size == settings.message_size]
    if len(measured) != 1:
        message = f"{settings.ib_write_bw}: {len(measured)} rows for {settings.message_size} bytes, not one"
        return Unobserved("IB_BANDWIDTH_MALFORMED", hca, message)
    return measured[0]


def gather(ctx: CheckContext[IbBandwidthSettings]) -> tuple[HcaResult, ...]:
    settings = ctx.settings
    if not program.present(settings.ib_write_bw):
        raise NotApplicable(f"no ib_write_bw at {settings.ib_write_bw}")
    hcas = settings.hcas if settings.hcas is not None else infiniband_hcas(ctx.paths.sysfs)
    if isinstance(hcas, Unobserved):
        return (HcaResult("ib_write_bw", hcas),)
    if not hcas:
        raise NotApplicable(f"no device with an InfiniBand port 1 under {ctx.paths.sysfs}/class/infiniband")
    if len(hcas) * settings.run_timeout > settings.timeout:
        message = (
            f"{len(hcas)} HCAs at run_timeout = {settings.run_timeout:g}s each do not fit in"
            f" timeout = {settings.timeout:g}s: nothing measured"
        )
        return (HcaResult("ib_write_bw", Unobserved("IB_BANDWIDTH_BUDGET", "ib_write_bw", message)),)
    return tuple(HcaResult(hca, measure(ctx, hca, index)) for index, hca in enumerate(hcas))


def _grade(result: HcaResult, jc: JudgeContext[IbBandwidthSettings]) -> Finding:
    if isinstance(result.gbps, Unobserved):
        return result.gbps.finding(jc)
    gbps, floor = result.gbps, jc.settings.min_gbps
    if floor is not None and gbps < floor:
        message = f"ib_write_bw to itself averaged {gbps:g} Gb/s, below the floor of {floor:g} Gb/s"
        return jc.finding(Status.WARNING, "IB_BANDWIDTH_LOW", result.hca, message, gbps=gbps, floor=floor)
    message = f"ib_write_bw to itself averaged {gbps:g} Gb/s" + (f" (floor {floor:g} Gb/s)" if floor else "")
    return jc.finding(Status.OK, "IB_BANDWIDTH", result.hca, message, gbps=gbps)


def judge(observed: tuple[HcaResult, ...], jc: JudgeContext[IbBandwidthSettings]) -> Verdict:
    return Verdict(tuple(_grade(result, jc) for result in observed))


def hardware_code(code: str) -> bool:
    """Whether ``code`` says an HCA measured slow: it may escalate (docs/escalation.md)."""
    return code == "IB_BANDWIDTH_LOW"


CHECK = CheckSpec(
    name="ib_bandwidth",
    description="perftest ib_write_bw from each HCA to itself, active: only on an idle, drained node",
    settings="healthd_checks.ib_bandwidth.settings:IbBandwidthSettings",
    run=Staged(gather, judge),
    active=True,
    hardware=hardware_code,
)
