"""The ``dcgm`` check (active): NVIDIA DCGM's diagnostics, ``dcgmi diag -r 1|2 -j``, each test graded.

An active check: it loads every GPU for seconds (level 1) or minutes (level 2), so
it runs only in an active pass, on a node Slurm reports idle and drained
(docs/active.md), never in the ordinary passes. ``gather`` runs dcgmi by the
absolute path in ``dcgmi`` under ``run_timeout`` (``program``: trusted, bounded, a
hung one never doubled) and, when a test failed, runs it again up to ``retries``
times: a diagnostic can fail once on a transient (a clock that had not settled).
A failure is forgiven only when a later run passed that test on that GPU; it
stops when every failure so far has been, or the retries are spent. ``judge``
grades the results (``healthd_checks.dcgm.parse``):

- Fail with no passing run after it (the final run's failures among them):
  WARNING ``DCGM_<TEST>_FAILED`` per GPU, so the policy drains the node after
  jobs (there are none) with the test's own code;
- Fail that a later run passed: OK note ``DCGM_<TEST>_RECOVERED``;
- Warn: OK note ``DCGM_<TEST>_WARN`` (DCGM passes the test; the text is kept);
- Skip: OK note ``DCGM_<TEST>_SKIPPED`` (the level or the GPU does not run it);
- a PCIe bandwidth below ``expected[DEVICE_ID].pcie_bandwidth_gbps_min``: WARNING
  ``DCGM_PCIE_BANDWIDTH_LOW``;
- output that is not dcgmi's JSON: UNKNOWN ``DCGM_MALFORMED``; dcgmi that fails
  without JSON, hangs or cannot start: UNKNOWN ``DCGM_FAILED``/``DCGM_TIMEOUT``.

Not applicable where dcgmi is absent. See docs/gpu.md and docs/active.md.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, NamedTuple, Optional, Sequence, Union

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.model import DetailValue, Finding, Status
from healthd.text import one_line

from ..common import program
from .parse import Diagnostic, TestResult, parse_diag

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import DcgmSettings

SUBJECT = "dcgmi diag"
# Results that count as the test passing: DCGM passes a test that only warns (DCGM User Guide).
PASSED = frozenset({"pass", "warn"})


class DcgmObservation(NamedTuple):
    """Every run of ``dcgmi diag`` in this pass, the first first; or why one gave no results."""

    runs: tuple[Diagnostic, ...] = ()
    problem: Optional[Unobserved] = None


def run_once(ctx: CheckContext[DcgmSettings]) -> Union[Diagnostic, Unobserved]:
    """One ``dcgmi diag -r LEVEL -j``: its results, or why there are none."""
    settings = ctx.settings
    argv = [str(settings.dcgmi), "diag", "-r", str(settings.level), "-j"]
    done = program.run(ctx.memory, argv, settings.run_timeout, SUBJECT, "DCGM")
    if isinstance(done, Unobserved):
        return done
    # dcgmi exits non-zero when a test fails and still prints the JSON: the JSON decides.
    try:
        return parse_diag(done.out, f"{settings.dcgmi} diag -j")
    except ValueError as exc:
        if done.returncode != 0:
            return program.failed(done, argv, SUBJECT, "DCGM")
        return Unobserved("DCGM_MALFORMED", SUBJECT, one_line(str(exc), 300))


def unrecovered(runs: Sequence[Diagnostic]) -> frozenset[tuple[str, Optional[str]]]:
    """The (test, GPU) pairs whose last failure no later run passed: the failures that count.

    A pass forgives only the failures before it. A test that fails for the first time
    in a rerun is not forgiven by the run before it, and one that fails in the final
    run stays failed: nothing ran it again.
    """
    pending: set[tuple[str, Optional[str]]] = set()
    for run in runs:
        for result in run.results:
            if result.status == "fail":
                pending.add(result.key)
            elif result.status in PASSED:
                pending.discard(result.key)
    return frozenset(pending)


def gather(ctx: CheckContext[DcgmSettings]) -> DcgmObservation:
    if not program.present(ctx.settings.dcgmi):
        raise NotApplicable(f"no dcgmi at {ctx.settings.dcgmi}")
    runs: list[Diagnostic] = []
    for _ in range(1 + ctx.settings.retries):
        run = run_once(ctx)
        if isinstance(run, Unobserved):
            return DcgmObservation(tuple(runs), run)
        runs.append(run)
        if not unrecovered(runs):
            break
    return DcgmObservation(tuple(runs))


def hardware_code(code: str) -> bool:
    """Whether ``code`` is a GPU's failed diagnostic (``DCGM_<TEST>_FAILED``, low PCIe bandwidth): it may escalate.

    Not dcgmi itself failing (``DCGM_FAILED``), nor the software test, which checks the
    driver and libraries deployed, not the GPU (docs/escalation.md).
    """
    if code == "DCGM_PCIE_BANDWIDTH_LOW":
        return True
    return code.endswith("_FAILED") and code not in ("DCGM_FAILED", "DCGM_SOFTWARE_FAILED")


def _code(test: str) -> str:
    return "DCGM_" + (re.sub(r"[^A-Z0-9]+", "_", test.upper()).strip("_")[:40] or "TEST")


def _subject(result: TestResult) -> str:
    return f"GPU {result.gpu}" if result.gpu is not None else SUBJECT


def _said(result: TestResult) -> str:
    return one_line("; ".join(result.warnings or result.info), 300)


def _failure(result: TestResult, counts: bool, failed: int, runs: int, jc: JudgeContext[DcgmSettings]) -> Finding:
    """A test that failed in ``failed`` of ``runs`` runs: WARNING if it ``counts``, else an OK note (passed later)."""
    code, subject, said = _code(result.test), _subject(result), _said(result)
    where = f"DCGM {result.test} ({result.category}) failed in {failed} of {runs} runs"
    details: dict[str, DetailValue] = {"test": result.test, "runs": runs, "failed": failed}
    if not counts:
        message = f"{where} and passed when run again"
        return jc.finding(Status.OK, f"{code}_RECOVERED", subject, message, **details)
    if failed < runs:
        where += ", and no run after its last failure passed it"
    message = f"{where}: {said}" if said else where
    return jc.finding(Status.WARNING, f"{code}_FAILED", subject, one_line(message), **details)


def _note(result: TestResult, jc: JudgeContext[DcgmSettings]) -> Optional[Finding]:
    """A result of the last run that is not a failure: a note for Warn and Skip, UNKNOWN for a status not known."""
    code, subject, said = _code(result.test), _subject(result), _said(result)
    where = f"DCGM {result.test} ({result.category})"
    if result.status == "warn":
        return jc.finding(Status.OK, f"{code}_WARN", subject, one_line(f"{where} warns: {said}"), test=result.test)
    if result.status == "skip":
        return jc.finding(Status.OK, f"{code}_SKIPPED", subject, f"{where} was skipped", test=result.test)
    if result.status == "unknown":
        message = f"{where} reported a status healthd does not know"
        return jc.finding(Status.UNKNOWN, f"{code}_STATUS", subject, message, test=result.test)
    return None


def _bandwidth(result: TestResult, device_id: Optional[str], jc: JudgeContext[DcgmSettings]) -> Iterable[Finding]:
    expected = jc.settings.expected.get(device_id or "")
    low = expected.pcie_bandwidth_gbps_min if expected is not None else None
    measured = result.bandwidths()
    if low is None or result.test.lower() != "pcie" or not measured or min(measured) >= low:
        return
    message = f"PCIe bandwidth {min(measured):g} GB/s, below the {low:g} GB/s expected of device {device_id}"
    yield jc.finding(
        Status.WARNING, "DCGM_PCIE_BANDWIDTH_LOW", _subject(result), message, gbps=min(measured), expected=low
    )


def judge(observed: DcgmObservation, jc: JudgeContext[DcgmSettings]) -> Verdict:
    if observed.problem is not None:
        return Verdict((observed.problem.finding(jc),))
    runs = observed.runs
    last = runs[-1]
    counting = unrecovered(runs)
    findings: list[Finding] = []
    # Each failure once, however many runs had it, with the text of its latest failing run.
    failures = {r.key: r for run in runs for r in run.results if r.status == "fail"}
    for key, result in sorted(failures.items(), key=lambda item: (item[0][0], item[0][1] or "")):
        failed = sum(1 for run in runs if key in run.failed())
        findings.append(_failure(result, key in counting, failed, len(runs), jc))
    for result in last.results:
        if result.status != "fail":
            noted = _note(result, jc)
            findings += [noted] if noted is not None else []
        findings += _bandwidth(result, last.device_id(result.gpu), jc)
    return Verdict(tuple(findings))


CHECK = CheckSpec(
    name="dcgm",
    description="NVIDIA DCGM diagnostics (dcgmi diag -r 1|2), active: only on an idle, drained node",
    settings="healthd_checks.dcgm.settings:DcgmSettings",
    run=Staged(gather, judge),
    active=True,
    hardware=hardware_code,
)
