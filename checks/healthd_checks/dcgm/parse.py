"""Reads the JSON that ``dcgmi diag -r LEVEL -j`` prints into frozen values (pure; raises only ``ValueError``).

The structure is the one the DCGM User Guide documents for ``dcgmi diag ... -j``: a
top-level ``"DCGM GPU Diagnostic"`` object (``"DCGM Diagnostic"`` in later
releases) holding ``test_categories``, each with its ``tests``; a test has a
``name`` and ``results``, one per GPU (``gpu_ids``/``gpu_id``) or a single one for
the whole node (software tests), each with a ``status`` (Pass, Fail, Warn, Skip)
and optionally ``info`` and ``warnings`` (a string, a list of strings, or a list
of objects with a ``warning`` text). ``"GPU Device IDs"`` gives each GPU's PCI
device ID, which is how ``[checks.dcgm] expected`` names a GPU model.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple, Optional

from healthd.text import one_line

TOP_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
# The statuses dcgmi prints, lower-cased; anything else is kept as "unknown".
STATUSES = frozenset({"pass", "fail", "warn", "skip"})
# "GPU 0 Host to GPU bandwidth:  12.34 GB/s", as the PCIe test's info lines give its measurements.
_BANDWIDTH = re.compile(r"(host to gpu|gpu to host) bandwidth:\s*([0-9]+(?:\.[0-9]+)?)\s*gb/s", re.IGNORECASE)


class TestResult(NamedTuple):
    """One test's result on one GPU (``gpu`` None: a node-wide test)."""

    category: str
    test: str
    gpu: Optional[str]
    status: str
    info: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, Optional[str]]:
        return (self.test, self.gpu)

    def bandwidths(self) -> tuple[float, ...]:
        """The GB/s figures the info lines report (the PCIe test: each direction)."""
        return tuple(float(m.group(2)) for line in self.info for m in _BANDWIDTH.finditer(line))


class Diagnostic(NamedTuple):
    """One run of ``dcgmi diag``: every result, and each GPU's PCI device ID by index."""

    results: tuple[TestResult, ...]
    device_ids: tuple[tuple[str, str], ...] = ()

    def failed(self) -> frozenset[tuple[str, Optional[str]]]:
        return frozenset(r.key for r in self.results if r.status == "fail")

    def device_id(self, gpu: Optional[str]) -> Optional[str]:
        return dict(self.device_ids).get(gpu) if gpu is not None else None


def _texts(value: Any, where: str) -> tuple[str, ...]:
    """``info`` or ``warnings``: a string, or a list of strings or of ``{"warning": ...}`` objects."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    texts = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("warning", item.get("info"))
        if not isinstance(item, str):
            raise ValueError(f"{where}: expected text, got {type(item).__name__}")
        texts.append(one_line(item, 300))
    return tuple(texts)


def _gpu(result: dict[str, Any], where: str) -> Optional[str]:
    value = result.get("gpu_ids", result.get("gpu_id"))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{where}: gpu id is {type(value).__name__}, not a number")
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{where}: gpu id {one_line(text, 20)!r} is not a number")
    return str(int(text))


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where} is not a list")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} is not an object")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} has no name")
    return one_line(value.strip(), 80)


def _device_ids(document: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    ids = document.get("GPU Device IDs")
    if not isinstance(ids, list):
        return ()
    return tuple((str(index), str(value).lower()) for index, value in enumerate(ids) if isinstance(value, str))


def parse_diag(text: str, origin: str) -> Diagnostic:
    """The results in ``text``; ``ValueError`` (naming ``origin`` and the place) when it is not dcgmi's JSON."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
        raise ValueError(f"{origin}: not JSON: {exc}") from None
    document = _object(document, origin)
    top = next((document[key] for key in TOP_KEYS if key in document), None)
    if top is None:
        raise ValueError(f"{origin}: no {TOP_KEYS[0]!r} object")
    top = _object(top, f"{origin}: {TOP_KEYS[0]!r}")
    results = []
    for c, category in enumerate(_list(top.get("test_categories"), f"{origin}: test_categories")):
        where = f"{origin}: test_categories[{c}]"
        category = _object(category, where)
        category_name = _name(category.get("category"), where)
        for t, test in enumerate(_list(category.get("tests"), f"{where}.tests")):
            test_where = f"{where}.tests[{t}]"
            test = _object(test, test_where)
            test_name = _name(test.get("name"), test_where)
            for r, result in enumerate(_list(test.get("results"), f"{test_where}.results")):
                result_where = f"{test_where}.results[{r}]"
                result = _object(result, result_where)
                status = result.get("status")
                if not isinstance(status, str):
                    raise ValueError(f"{result_where} has no status")
                status = status.strip().lower()
                results.append(
                    TestResult(
                        category_name,
                        test_name,
                        _gpu(result, result_where),
                        status if status in STATUSES else "unknown",
                        _texts(result.get("info"), f"{result_where}.info"),
                        _texts(result.get("warnings"), f"{result_where}.warnings"),
                    )
                )
    if not results:
        raise ValueError(f"{origin}: the diagnostic reports no test results")
    return Diagnostic(tuple(results), _device_ids(document))
