#!/usr/bin/env bash
# Property-based conformance test of a running tollgate-api against openapi.yaml, with Schemathesis.
#
#   bash ops/lib/schemathesis.sh [--url URL] [--admin-token T] [--publisher-token T]
#        [--basic-user U] [--basic-password P] [--customer-token T] [--max-examples N] [--seed N]
#
# Every option may come from the environment instead:
#   TOLLGATE_ST_URL              API base URL (default http://127.0.0.1:8080)
#   TOLLGATE_ST_ADMIN_TOKEN      the API's TOLLGATE_ADMIN_TOKEN (default: $TOLLGATE_ADMIN_TOKEN)
#   TOLLGATE_ST_PUBLISHER_TOKEN  a publisher's X-Publisher-Token      } all three, or none: then a
#   TOLLGATE_ST_BASIC_USER       that publisher's Basic username      } publisher (with an app and the
#   TOLLGATE_ST_BASIC_PASSWORD   that publisher's Basic password      } product of the spec's examples)
#                                                                       is created through the admin API
#   TOLLGATE_ST_CUSTOMER_TOKEN   a customer token (optional; fetched from POST /v1/customer-tokens when unset)
#   TOLLGATE_ST_MAX_EXAMPLES     test cases per operation and phase (default 50: about a minute)
#   TOLLGATE_ST_SEED             Hypothesis seed (default: random; printed, so a run can be repeated)
#   TOLLGATE_ST_REPORT_DIR       where the JUnit report and the failing cases' cassette go (default: a temp dir)
#   TOLLGATE_ST_SPEC             the OpenAPI document (default: openapi.yaml at the repository root)
#   TOLLGATE_ST_PYTHON           the Python that has (or gets) Schemathesis (default python3)
#   TOLLGATE_ST_CHECKS           Schemathesis checks, comma-separated (default: the six below)
#
# Run the API with TOLLGATE_RATE_LIMIT_PER_S=0: a rate limit would turn the fuzzing into 429s.
# The run mutates the API's data (it creates publishers, apps and products, submits receipts): point it
# at a throwaway deployment only.
#
# Checks: no 5xx, every status code, Content-Type, documented header and response body as the document
# says, and an undocumented method on a documented path answered 405 with `Allow`. Exit 0 when all pass, 1 when a check failed, 2 on a usage or setup error. The last line printed
# is a one-line summary.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SCHEMATHESIS_REQUIREMENT="schemathesis>=4.3,<5"
CHECKS="${TOLLGATE_ST_CHECKS:-not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,unsupported_method}"
# Operations that could lock the run's own publisher out (disable it, rotate its credentials) run last,
# in a pass of their own, where they only ever see publishers that pass created.
PUBLISHER_MUTATIONS_REGEX='^(updatePublisher|rotatePublisherCredentials)$'

URL="${TOLLGATE_ST_URL:-http://127.0.0.1:8080}"
ADMIN_TOKEN="${TOLLGATE_ST_ADMIN_TOKEN:-${TOLLGATE_ADMIN_TOKEN:-}}"
PUBLISHER_TOKEN="${TOLLGATE_ST_PUBLISHER_TOKEN:-}"
BASIC_USER="${TOLLGATE_ST_BASIC_USER:-}"
BASIC_PASSWORD="${TOLLGATE_ST_BASIC_PASSWORD:-}"
CUSTOMER_TOKEN="${TOLLGATE_ST_CUSTOMER_TOKEN:-}"
MAX_EXAMPLES="${TOLLGATE_ST_MAX_EXAMPLES:-50}"
SEED="${TOLLGATE_ST_SEED:-}"
REPORT_DIR="${TOLLGATE_ST_REPORT_DIR:-}"
SPEC="${TOLLGATE_ST_SPEC:-$ROOT/openapi.yaml}"
PYTHON="${TOLLGATE_ST_PYTHON:-python3}"

log() { printf '==> schemathesis: %s\n' "$*" >&2; }
die() { printf '==> schemathesis: error: %s\n' "$*" >&2; printf 'schemathesis: ERROR (%s)\n' "$*"; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --url) URL="$2"; shift 2 ;;
    --admin-token) ADMIN_TOKEN="$2"; shift 2 ;;
    --publisher-token) PUBLISHER_TOKEN="$2"; shift 2 ;;
    --basic-user) BASIC_USER="$2"; shift 2 ;;
    --basic-password) BASIC_PASSWORD="$2"; shift 2 ;;
    --customer-token) CUSTOMER_TOKEN="$2"; shift 2 ;;
    --max-examples) MAX_EXAMPLES="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --report-dir) REPORT_DIR="$2"; shift 2 ;;
    -h | --help) sed -n '2,28p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

URL="${URL%/}"
[[ -f "$SPEC" ]] || die "no OpenAPI document at $SPEC"
SPEC="$(cd "$(dirname "$SPEC")" && pwd)/$(basename "$SPEC")"
if [[ -n "$REPORT_DIR" ]]; then
  mkdir -p "$REPORT_DIR" || die "cannot create $REPORT_DIR"
  REPORT_DIR="$(cd "$REPORT_DIR" && pwd)"
fi
[[ "$MAX_EXAMPLES" =~ ^[1-9][0-9]*$ ]] || die "max examples must be a positive whole number, not '$MAX_EXAMPLES'"
[[ -n "$ADMIN_TOKEN" ]] || die "the admin token is required (--admin-token or TOLLGATE_ST_ADMIN_TOKEN)"
if [[ -z "$SEED" ]]; then SEED="$(( (RANDOM << 15) | RANDOM ))"; fi
[[ "$SEED" =~ ^[0-9]+$ ]] || die "seed must be a whole number, not '$SEED'"
command -v curl >/dev/null 2>&1 || die "curl is required"
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON is required"

# ------------------------------------------------------------------ install

st_version() {
  "$PYTHON" - <<'PY' 2>/dev/null
from importlib.metadata import version
print(version("schemathesis"))
PY
}

version="$(st_version || true)"
if [[ ! "$version" =~ ^4\. ]]; then
  if [[ -n "$version" ]]; then
    log "Schemathesis $version is installed; this script uses the 4.x command line, installing $SCHEMATHESIS_REQUIREMENT"
  else
    log "installing $SCHEMATHESIS_REQUIREMENT from PyPI"
  fi
  # Twice: one dropped connection to PyPI must not fail a CI run. Under the lock ops/lib/common.sh's
  # tg_pip_lock takes, so two runs do not install into one environment at once.
  lock="${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/pip.lock"
  mkdir -p -- "${lock%/*}"
  flock "$lock" "$PYTHON" -m pip install --quiet --disable-pip-version-check "$SCHEMATHESIS_REQUIREMENT" </dev/null >&2 \
    || { log "pip install failed; trying once more"; flock "$lock" "$PYTHON" -m pip install --quiet --disable-pip-version-check "$SCHEMATHESIS_REQUIREMENT" </dev/null >&2; } \
    || die "pip install $SCHEMATHESIS_REQUIREMENT failed"
  version="$(st_version || true)"
  [[ "$version" =~ ^4\. ]] || die "Schemathesis 4.x is not importable by $PYTHON after pip install (found '${version:-none}')"
fi
log "Schemathesis $version"

# Schemathesis's command line (`st`), run by the same Python that pip installed into; from the
# temporary directory, so nothing it writes lands in the working tree.
st() {
  (cd "$WORK" && "$PYTHON" -m schemathesis.cli "$@")
}

# ------------------------------------------------------------------ the API

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tollgate-schemathesis.XXXXXX")"
OWN_REPORT_DIR=""
KEEP_REPORT=0
# The temporary directory always goes; a report directory this script made goes unless a check failed.
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  rm -rf -- "$WORK"
  if [[ -n "$OWN_REPORT_DIR" && "$KEEP_REPORT" -eq 0 ]]; then rm -rf -- "$OWN_REPORT_DIR"; fi
}
trap cleanup EXIT

code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health/ready" || true)"
[[ "$code" == "200" ]] || die "$URL/health/ready answers ${code:-nothing}, not 200: start the API (and Redis and PostgreSQL) first"

# POSTs JSON with the admin token; prints the body; fails unless the status is EXPECTED.
admin_post() {
  local path="$1" body="$2" expected="$3" out status
  out="$WORK/admin.out"
  # Credentials go to curl in a config on a pipe, not in its argv (which `ps` shows).
  status="$(curl -s -o "$out" -w '%{http_code}' --max-time 10 -X POST "$URL$path" \
    -K <(printf 'header = "Authorization: Bearer %s"\n' "$ADMIN_TOKEN") \
    -H 'Content-Type: application/json' --data-binary "$body" || true)"
  [[ "$status" == "$expected" ]] || die "POST $path answered ${status:-nothing} (expected $expected): $(head -c 300 "$out" 2>/dev/null)"
  cat "$out"
}

json_field() {
  "$PYTHON" -c 'import json, sys
value = json.load(sys.stdin)
for key in sys.argv[1].split("."):
    value = value[key]
print(value)' "$1"
}

publisher_id=""
patchable_products=()
if [[ -z "$PUBLISHER_TOKEN$BASIC_USER$BASIC_PASSWORD" ]]; then
  # A publisher of its own, with the app and the offer the document's examples name, so the examples
  # phase reaches 200 on the publisher routes (a receipt is queued; no worker is needed), and one
  # product of each other kind for PATCH /admin/v1/products/{productId} to change.
  created="$(admin_post /admin/v1/publishers '{"name":"schemathesis"}' 201)"
  publisher_id="$(json_field id <<<"$created")"
  PUBLISHER_TOKEN="$(json_field publisherToken <<<"$created")"
  BASIC_USER="$(json_field basicAuth.username <<<"$created")"
  BASIC_PASSWORD="$(json_field basicAuth.password <<<"$created")"
  admin_post "/admin/v1/publishers/$publisher_id/apps" '{"bundleId":"com.example.tv"}' 201 >/dev/null
  product() { # PRODUCT_ID KIND EXTRA_JSON
    admin_post /admin/v1/products "{\"publisherId\":\"$publisher_id\",\"bundleId\":\"com.example.tv\",\"productId\":\"$1\",\"kind\":\"$2\",\"title\":\"Schemathesis $2\"$3}" 201
  }
  product S598742062_US consumable ',"coins":100' >/dev/null
  patchable_products+=("$(product st.coins consumable ',"coins":5' | json_field id)")
  patchable_products+=("$(product st.lifetime non_consumable '' | json_field id)")
  patchable_products+=("$(product st.monthly auto_renewable '' | json_field id)")
  patchable_products+=("$(product st.pass non_renewing ',"durationDays":30' | json_field id)")
  log "created publisher $publisher_id with app com.example.tv, offer S598742062_US and ${#patchable_products[@]} products to patch"
elif [[ -z "$PUBLISHER_TOKEN" || -z "$BASIC_USER" || -z "$BASIC_PASSWORD" ]]; then
  die "give the publisher token, Basic username and Basic password together, or none of them"
fi

if [[ -z "$CUSTOMER_TOKEN" ]]; then
  status="$(curl -s -o "$WORK/token.out" -w '%{http_code}' --max-time 10 -X POST "$URL/v1/customer-tokens" \
    -K <(printf 'header = "X-Publisher-Token: %s"\nuser = "%s:%s"\n' "$PUBLISHER_TOKEN" "$BASIC_USER" "$BASIC_PASSWORD") \
    -H 'Content-Type: application/json' --data-binary '{"customerEmail":"viewer@example.com"}' || true)"
  if [[ "$status" == "200" ]]; then
    CUSTOMER_TOKEN="$(json_field customerToken <"$WORK/token.out")"
  elif [[ "$status" == "404" ]] && grep -q '"customer_tokens_disabled"' "$WORK/token.out"; then
    # The deployment issues no customer tokens (no TOLLGATE_TOKEN_SECRET): nothing to test with one.
    log "customer tokens are off on this deployment: the customer-token security scheme goes untested"
  else
    # Any other answer to a valid publisher is a fault, not a reason to test less.
    log "POST /v1/customer-tokens answered ${status:-nothing} to a valid publisher"
    printf 'schemathesis %s: FAIL — POST /v1/customer-tokens answered %s to a valid publisher\n' "$version" "${status:-nothing}"
    exit 1
  fi
fi

# ------------------------------------------------------------------ run

if [[ -z "$REPORT_DIR" ]]; then
  REPORT_DIR="$(mktemp -d "${TMPDIR:-/tmp}/tollgate-schemathesis-report.XXXXXX")"
  OWN_REPORT_DIR="$REPORT_DIR"
fi

# Secrets reach Schemathesis through the environment (its config resolves ${NAME}), never argv.
export TG_ST_ADMIN_TOKEN="$ADMIN_TOKEN" TG_ST_PUBLISHER_TOKEN="$PUBLISHER_TOKEN"
export TG_ST_BASIC_USER="$BASIC_USER" TG_ST_BASIC_PASSWORD="$BASIC_PASSWORD" TG_ST_CUSTOMER_TOKEN="$CUSTOMER_TOKEN"

config_head() {
  cat <<'TOML'
# No .schemathesis/ state directory in the working tree.
[cache]
enabled = false

[auth.openapi.adminBearer]
bearer = "${TG_ST_ADMIN_TOKEN}"
TOML
}

# Everything but the customer token: with publisher credentials configured, Schemathesis always picks
# them for GET /v1/access-status (the first security requirement it can satisfy).
CONFIG_MAIN="$WORK/main.toml"
{
  config_head
  cat <<'TOML'

[auth.openapi.publisherToken]
api_key = "${TG_ST_PUBLISHER_TOKEN}"

[auth.openapi.basic]
username = "${TG_ST_BASIC_USER}"
password = "${TG_ST_BASIC_PASSWORD}"
TOML
  if [[ -n "$publisher_id" ]]; then
    # Half of the generated ids are ones that exist, so these operations get past their 404.
    # Only ever for operations that cannot lock this publisher out.
    printf '\n[dictionaries.tollgate-publisher]\nvalues = ["%s"]\n' "$publisher_id"
    printf '\n[dictionaries.tollgate-bundle]\nvalues = ["com.example.tv"]\n'
    printf '\n[dictionaries.tollgate-products]\nvalues = [%s]\n' "$(printf '"%s", ' "${patchable_products[@]}" | sed 's/, $//')"
    cat <<'TOML'

[[operations]]
include-operation-id = "createApp"
parameters = { "path.publisherId" = { dictionary = "tollgate-publisher", probability = 0.5 } }

[[operations]]
include-operation-id = "listProducts"
parameters = { "query.publisherId" = { dictionary = "tollgate-publisher", probability = 0.5 } }

[[operations]]
include-operation-id = "createProduct"
parameters = { "body.publisherId" = { dictionary = "tollgate-publisher", probability = 0.5 }, "body.bundleId" = { dictionary = "tollgate-bundle", probability = 0.5 } }

[[operations]]
include-operation-id = "updateProduct"
parameters = { "path.productId" = { dictionary = "tollgate-products", probability = 0.5 } }
TOML
  fi
  if [[ -n "$CUSTOMER_TOKEN" ]]; then
    # The JSON-RPC call carries the token in its body: half of the calls get the real one.
    printf '\n[dictionaries.tollgate-customer-token]\nvalues = ["%s"]\n' "$CUSTOMER_TOKEN"
    printf '\n[dictionaries.tollgate-offer]\nvalues = ["S598742062_US"]\n'
    cat <<'TOML'

[[operations]]
include-operation-id = "jsonRpc"
parameters = { "body.params.customerToken" = { dictionary = "tollgate-customer-token", probability = 0.5 }, "body.params.offerId" = { dictionary = "tollgate-offer", probability = 0.5 } }
TOML
  fi
} >"$CONFIG_MAIN"

# Only the customer token (and the admin token): GET /v1/access-status as an app calls it.
CONFIG_CUSTOMER="$WORK/customer.toml"
{
  config_head
  cat <<'TOML'

[auth.openapi.customerBearer]
bearer = "${TG_ST_CUSTOMER_TOKEN}"
TOML
} >"$CONFIG_CUSTOMER"

# One pass of `st run`: NAME CONFIG PHASES FILTER-OPTIONS...; leaves its JUnit report in REPORT_DIR and
# its output in WORK/NAME.log. One worker: with several, Hypothesis's ast.parse in parallel threads trips
# CPython 3.11.7's "AST constructor recursion depth mismatch" (gh-106905) and Schemathesis reports a
# runtime error for the operation.
run_pass() {
  local name="$1" config="$2" phases="$3"
  shift 3
  local -a cmd=(
    --config-file "$config" --no-color run "$SPEC"
    --url "$URL"
    --checks "$CHECKS"
    --phases "$phases"
    --mode all
    --max-examples "$MAX_EXAMPLES"
    --seed "$SEED"
    --workers 1
    --request-timeout 10
    --generation-database none
    --suppress-health-check all
    --report "junit,vcr"
    --report-junit-path "$REPORT_DIR/junit-$name.xml"
    --report-vcr-path "$REPORT_DIR/cassette-$name.yaml"
    "$@"
  )
  log "pass '$name': st run $SPEC --url $URL --checks $CHECKS --phases $phases --mode all --max-examples $MAX_EXAMPLES --seed $SEED $*"
  local status=0
  st "${cmd[@]}" 2>&1 | tee "$WORK/$name.log" || status=$?
  return "$status"
}

started="$(date +%s)"
passes=(main publisher-mutations)
failed_passes=()
run_pass main "$CONFIG_MAIN" examples,coverage,fuzzing,stateful --exclude-operation-id-regex "$PUBLISHER_MUTATIONS_REGEX" || failed_passes+=(main)
run_pass publisher-mutations "$CONFIG_MAIN" examples,coverage,fuzzing,stateful --include-operation-id-regex "$PUBLISHER_MUTATIONS_REGEX|^createPublisher\$" \
  || failed_passes+=(publisher-mutations)
if [[ -n "$CUSTOMER_TOKEN" ]]; then
  passes+=(customer-token)
  # One operation, no links: no stateful phase.
  run_pass customer-token "$CONFIG_CUSTOMER" examples,coverage,fuzzing --include-operation-id getAccessStatus \
    || failed_passes+=(customer-token)
fi
elapsed=$(( $(date +%s) - started ))

# One line from the passes' JUnit reports (a test case there is an operation) and outputs.
summary="$("$PYTHON" - "$REPORT_DIR" "$WORK" "${passes[@]}" <<'PY'
import re
import sys
import xml.etree.ElementTree as ET
report_dir, work, passes = sys.argv[1], sys.argv[2], sys.argv[3:]
operations = failed = errored = generated = 0
failing = set()
for name in passes:
    try:
        root = ET.parse(f"{report_dir}/junit-{name}.xml").getroot()
        for case in root.iter("testcase"):
            operations += 1
            if case.find("failure") is not None:
                failed += 1
                failing.add(case.get("name", "?"))
            elif case.find("error") is not None:
                errored += 1
                failing.add(case.get("name", "?"))
    except (OSError, ET.ParseError):
        errored += 1
        failing.add(f"pass {name}: no report")
    try:
        match = re.search(r"^\s*(\d+) generated", open(f"{work}/{name}.log", encoding="utf-8").read(), re.M)
        generated += int(match.group(1)) if match else 0
    except OSError:
        pass
line = (f"{generated} test cases, {operations} operation runs in {len(passes)} passes: "
        f"{operations - failed - errored} passed, {failed} failed, {errored} errored")
print(line + (f" [{'; '.join(sorted(failing))}]" if failing else ""))
PY
)" || summary="(no report)"

if [[ ${#failed_passes[@]} -eq 0 ]]; then
  verdict="PASS"
  exit_code=0
else
  verdict="FAIL"
  exit_code=1
  KEEP_REPORT=1
  log "reports (JUnit, VCR cassettes) are in $REPORT_DIR; each failure above shows a curl command that reproduces it"
fi
printf 'schemathesis %s: %s — %s; seed %s, max %s examples, %ss against %s\n' \
  "$version" "$verdict" "$summary" "$SEED" "$MAX_EXAMPLES" "$elapsed" "$URL"
exit "$exit_code"
