#!/usr/bin/env bash
# README.md's two commands, in its order and as it writes them: the install one-liner, then the
# tests. CI runs this on a fresh machine (.ci/run); tests/test_installed_node.py runs it in a
# throwaway root. The install leaves /opt/healthd and /var/lib/healthd on the machine it runs
# on, which is the point: the tests must pass on a node where healthd is installed and has run.
set -euo pipefail
cd "$(dirname "$0")/.."

# The ```sh block of a README section, as an operator would paste it.
command_of() {
    awk -v section="## $1" '$0 == section { inside = 1; next } inside && /^## / { exit }
        inside && $0 == "```sh" { block = 1; next } block && $0 == "```" { exit } block { print }' README.md
}

install=$(command_of "Install and run once")
tests=$(command_of "Run the tests")
if [ -z "$install" ] || [ -z "$tests" ]; then
    echo "README.md has no install or no test command" >&2
    exit 2
fi

marker=$(mktemp)
echo "+ $install"
status=0
bash -c "$install" </dev/null || status=$?
# `healthd check` ends the one-liner and exits 0 to 3 by the Nagios convention
# (docs/commands.md#exit-codes); its fresh last pass tells that exit from a failed apt-get or pip.
if [ "$status" -gt 3 ] || [ -z "$(find /var/lib/healthd/last-pass.json -newer "$marker" 2>/dev/null)" ]; then
    echo "the README's install command failed (exit $status)" >&2
    exit 1
fi
rm -f "$marker"
echo "+ $tests"
exec bash -c "$tests" </dev/null
