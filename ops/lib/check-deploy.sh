#!/usr/bin/env bash
# Check Tollgate's deployment files offline; exit non-zero on any problem.
#
#   bash ops/lib/check-deploy.sh
#
# - ops/systemd/*.service: `systemd-analyze verify` (syntax, directives, dependencies, executables)
#   and `systemd-analyze security --offline` (the hardening stays at exposure 3.0 or below).
# - ops/k8s/*.yaml: every object against the Kubernetes JSON schemas, strictly (an unknown field is
#   an error), for the oldest supported (1.27) and the newest Kubernetes versions the kubernetes-validate package bundles,
#   plus cross-references the schemas cannot see (ops/lib/check_deploy.py). The schemas ship inside the
#   package: nothing is fetched while checking. The package is installed with pip when missing.
# - ops/Dockerfile and .dockerignore: parsed, not built (no Docker engine runs on the dev machines).
# - ops/systemd/tollgate.env.example: documents every TOLLGATE_* variable the sources read.
#
# Prints one line per file checked ("ok   PATH (...)" or "FAIL PATH: ..."), then a summary line.
set -euo pipefail

cd "$(dirname "$0")/../.."
# shellcheck source=ops/lib/common.sh
source ops/lib/common.sh

SYSTEMD_ANALYZE="${SYSTEMD_ANALYZE:-/usr/bin/systemd-analyze}"
# Exposure of a unit as `systemd-analyze security` rates it, times ten (0-100): 30 means 3.0, "OK".
SECURITY_THRESHOLD=30
KUBERNETES_VALIDATE_SPEC='kubernetes-validate>=1.30,<2'

PASSED=0
FAILED=0
WORK=""
PIP_PYTHON=""

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  if [[ -n "$WORK" && -d "$WORK" ]]; then
    rm -rf -- "$WORK"
  fi
}
trap cleanup EXIT

# count OUTPUT...: tallies "ok"/"FAIL" lines (continuation lines of a failure start with spaces).
count() {
  local line
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case "$line" in
      "ok   "*) PASSED=$((PASSED + 1)) ;;
      "FAIL "*) FAILED=$((FAILED + 1)) ;;
    esac
  done <<<"$1"
}

fail_line() {
  printf 'FAIL %s\n' "$*"
  FAILED=$((FAILED + 1))
}

# ---------------------------------------------------------------------------------------- systemd

# `systemd-analyze verify` checks that every ExecStart= executable exists and is executable, and the
# units name /usr/local/bin/tollgate-*, which a development machine or CI does not have. So the units
# are copied into a temporary directory with /usr/local/bin/ rewritten to a directory of stub
# executables of the same names; nothing else in them changes. (`--root=DIR` would need a whole
# systemd tree under DIR: it fails on the missing sysinit.target.) verify also loads the units'
# dependencies (tollgate-migrate.service, network-online.target, ...) from that directory and the
# system's unit path. It reports unknown directives and bad values only as warnings and still exits 0,
# so any output at all counts as a failure. The template is checked as a real instance (@9464), so
# its %i and %H specifiers are expanded as systemd would.
check_systemd() {
  local unit name target output status exposure problem
  if [[ ! -x "$SYSTEMD_ANALYZE" ]]; then
    fail_line "ops/systemd: $SYSTEMD_ANALYZE not found (apt-get install systemd)"
    return 0
  fi
  WORK="$(mktemp -d /tmp/tollgate-check-deploy.XXXXXX)"
  mkdir -p "$WORK/bin" "$WORK/units"
  for name in tollgate-api tollgate-worker; do
    printf '#!/bin/sh\nexit 0\n' >"$WORK/bin/$name"
    chmod 755 "$WORK/bin/$name"
  done
  for unit in ops/systemd/*.service; do
    sed "s#/usr/local/bin/#$WORK/bin/#g" "$unit" >"$WORK/units/$(basename "$unit")"
  done
  for unit in ops/systemd/*.service; do
    name="$(basename "$unit")"
    target="$WORK/units/$name"
    if [[ "$name" == *@.service ]]; then
      target="$WORK/units/${name%@.service}@9464.service"
    fi
    status=0
    output="$("$SYSTEMD_ANALYZE" verify --man=no --generators=no "$target" 2>&1)" || status=$?
    if [[ "$status" -ne 0 || -n "$output" ]]; then
      fail_line "$unit: systemd-analyze verify (exit $status):"
      sed "s#$WORK/units/#ops/systemd/#g; s#$WORK/bin/#/usr/local/bin/#g; s#^#     #" <<<"$output"
      continue
    fi
    status=0
    output="$("$SYSTEMD_ANALYZE" security --offline=yes --threshold="$SECURITY_THRESHOLD" "$target" 2>&1)" || status=$?
    exposure="$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' <<<"$output")"
    if [[ "$status" -ne 0 ]]; then
      fail_line "$unit: systemd-analyze security: exposure ${exposure:-?} is above $((SECURITY_THRESHOLD / 10)).$((SECURITY_THRESHOLD % 10))"
      grep '✗' <<<"$output" | sed 's/^/     /' | head -n 20 || true
      continue
    fi
    problem="$(stop_timeout_problem "$unit")"
    if [[ -n "$problem" ]]; then
      fail_line "$unit: $problem"
      continue
    fi
    printf 'ok   %s (systemd-analyze verify; security exposure %s)\n' "$unit" "$exposure"
    PASSED=$((PASSED + 1))
  done
}

# The API and the workers drain for TOLLGATE_SHUTDOWN_GRACE_S (default 25 s; requests in progress, jobs
# in flight) and then cancel for up to 5 s: systemd must not SIGKILL them before that. Prints the problem, if any.
stop_timeout_problem() {
  local unit="$1" timeout
  [[ "$(basename "$unit")" == tollgate-worker@.service || "$(basename "$unit")" == tollgate-api.service ]] || return 0
  timeout="$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s\{0,1\}$/\1/p' "$unit")"
  if [[ -z "$timeout" ]] || (( timeout <= 30 )); then
    printf 'TimeoutStopSec=%s must be above TOLLGATE_SHUTDOWN_GRACE_S (25) + 5 seconds' "${timeout:-unset}"
  fi
}

# ---------------------------------------------------------------------------------------- python

ensure_kubernetes_validate() {
  PIP_PYTHON="$(tg_pip_python)" || return 1
  if "$PIP_PYTHON" -c 'import kubernetes_validate.utils, yaml' 2>/dev/null; then
    return 0
  fi
  tg_log "installing $KUBERNETES_VALIDATE_SPEC (it bundles the Kubernetes JSON schemas)" >&2
  local attempt
  for attempt in 1 2; do
    if PIP_ROOT_USER_ACTION=ignore tg_pip_lock "$PIP_PYTHON" -m pip install --quiet --disable-pip-version-check \
      "$KUBERNETES_VALIDATE_SPEC" </dev/null >&2; then
      "$PIP_PYTHON" -c 'import kubernetes_validate.utils, yaml' && return 0
    fi
    tg_warn "pip install $KUBERNETES_VALIDATE_SPEC failed (attempt $attempt)"
  done
  return 1
}

check_python_side() {
  local output status=0
  if ! ensure_kubernetes_validate; then
    fail_line "ops/k8s: kubernetes-validate is not installed and pip could not install it"
  else
    output="$("$PIP_PYTHON" ops/lib/check_deploy.py k8s ops/k8s/*.yaml ops/k8s/examples/*.yaml 2>&1)" || status=$?
    count "$output"
    if [[ "$status" -ne 0 ]] && ! grep -q '^FAIL ' <<<"$output"; then
      fail_line "ops/k8s: the checker stopped (exit $status)"
    fi
  fi
  for kind_file in "dockerfile ops/Dockerfile" "env ops/systemd/tollgate.env.example"; do
    status=0
    # shellcheck disable=SC2086 # two words on purpose
    output="$(python3 ops/lib/check_deploy.py $kind_file 2>&1)" || status=$?
    count "$output"
    if [[ "$status" -ne 0 ]] && ! grep -q '^FAIL ' <<<"$output"; then
      fail_line "${kind_file#* }: the checker stopped (exit $status)"
    fi
  done
}

main() {
  check_systemd
  check_python_side
  printf 'check-deploy: %d passed, %d failed\n' "$PASSED" "$FAILED"
  (( FAILED == 0 ))
}

main "$@"
