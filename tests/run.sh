#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine, as root, with no standard input:
# installs the Debian packages the tests use for real (Slurm with slurmdbd and MariaDB for
# accounting, munge, FUSE, systemd-analyze, promtool, Ansible, Chromium, rpm, lintian, rpmlint, and
# mmdebstrap for the Debian roots of newer Slurm releases, see tests/healthd_testkit/releases.py),
# builds a virtual environment with healthd, lints, type-checks, tests.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
# Wait up to 10 minutes for another apt (unattended-upgrades, an operator's) to let go of
# the dpkg lock instead of failing at once with exit 100 (apt.conf(5), apt >= 1.9.11).
apt_get=(apt-get -o DPkg::Lock::Timeout=600)
"${apt_get[@]}" update -q
"${apt_get[@]}" install -y -q --no-install-recommends \
    python3 python3-venv python3-dev gcc pkg-config libsystemd-dev \
    slurm-wlm slurmdbd mariadb-server munge fuse3 libfuse2 prometheus ansible systemd procps coreutils util-linux chromium rpm lintian rpmlint mmdebstrap dmidecode </dev/null

/usr/bin/python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip setuptools wheel </dev/null
.venv/bin/pip install -q -e '.[test,journal,fleet]' </dev/null

# The Debian roots of the newer Slurm releases, built side by side while the linters run
# (cached under /var/cache/healthd-tests: a warm machine skips this; see docs/slurm.md).
(cd tests && ../.venv/bin/python -m healthd_testkit.releases) </dev/null &
roots=$!

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# The package builder is a script beside packaging/systemd/, which mypy would take for the systemd module.
.venv/bin/mypy --strict packaging/build.py
wait "$roots"
# HEALTHD_TESTS (test files or node ids, separated by spaces) narrows the run, as
# tests/test_installed_node.py does; unset, the whole suite runs. Not PYTEST_ADDOPTS: the tests
# that start pytest sessions of their own would inherit it.
read -r -a selection <<< "${HEALTHD_TESTS:-}"
# --durations: the slowest tests, named in every log, are where the suite's time goes.
HEALTHD_NO_SKIPS=1 .venv/bin/pytest -q --durations=30 "${selection[@]}" </dev/null
