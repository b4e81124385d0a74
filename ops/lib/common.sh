#!/usr/bin/env bash
# Shared helpers for ops/local and ops/test. Source it; do not run it.
# shellcheck shell=bash

if [[ -n "${TG_COMMON_LOADED:-}" ]]; then
  return 0
fi
TG_COMMON_LOADED=1

TG_PG_BIN="${TG_PG_BIN:-/usr/lib/postgresql/15/bin}"
TG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# ---------------------------------------------------------------- messages

tg_log() {
  printf '==> %s\n' "$*"
}

tg_warn() {
  printf '==> warning: %s\n' "$*" >&2
}

tg_die() {
  printf '==> error: %s\n' "$*" >&2
  exit 1
}

# Print the last lines of a log file to stderr (for failure reports).
tg_log_tail() {
  local file="$1" lines="${2:-40}"
  if [[ -f "$file" ]]; then
    printf -- '--- last %s lines of %s ---\n' "$lines" "$file" >&2
    tail -n "$lines" "$file" >&2 || true
    printf -- '--- end of %s ---\n' "$file" >&2
  else
    printf -- '--- %s does not exist ---\n' "$file" >&2
  fi
}

# Seconds since the epoch (integer).
tg_now() {
  date +%s
}

# ------------------------------------------------------------ dependencies

# These scripts install packages and run PostgreSQL as user postgres (chown, runuser): they need root.
# Said at once, before minutes of building end in "Operation not permitted".
tg_require_root() {
  [[ "$(id -u)" -eq 0 ]] || tg_die "run this as root (sudo bash $0 …): it installs packages and runs PostgreSQL as user postgres"
}

# apt-get, unattended, waiting up to 5 minutes for another apt or dpkg to let go of its lock.
tg_apt_get() {
  env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 "$@" </dev/null
}

# Whether python3 is one whose packages Debian manages (PEP 668: `pip install` refuses, or there is no pip).
tg_python_managed() {
  python3 - <<'PY' 2>/dev/null
import importlib.util, os, sys, sysconfig
marked = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
own = sys.prefix != sys.base_prefix
sys.exit(0 if (marked and not own) or importlib.util.find_spec("pip") is None else 1)
PY
}

# The Python that the tests' Python tools (Schemathesis, kubernetes-validate) are installed into with
# pip, printed: python3 itself, or where Debian manages python3 a virtual environment kept across runs
# in TOLLGATE_PYTHON_VENV (default ~/.cache/tollgate/python), made on first use.
# Runs made at once share it: it is made, and packages are installed into it, under tg_pip_lock.
tg_pip_python() {
  local venv="${TOLLGATE_PYTHON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/python}"
  # `.made` is written last: bin/python exists long before pip does in a venv being made.
  if [[ -f "$venv/.made" && -x "$venv/bin/python" ]]; then
    printf '%s\n' "$venv/bin/python"
  elif tg_python_managed; then
    tg_pip_lock bash -c '
      venv="$1"
      [[ -f "$venv/.made" && -x "$venv/bin/python" ]] && exit 0
      # One made before `.made` was written: whole once its pip runs.
      if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then touch "$venv/.made"; exit 0; fi
      printf "==> making a Python virtual environment in %s (Debian manages python3 packages)\n" "$venv"
      rm -rf -- "$venv"
      python3 -m venv "$venv" && touch "$venv/.made" && exit 0
      rm -rf -- "$venv"
      exit 1' _ "$venv" >&2 || { tg_warn "python3 -m venv $venv failed"; return 1; }
    printf '%s\n' "$venv/bin/python"
  else
    command -v python3
  fi
}

# Runs COMMAND holding the user's lock for Tollgate's Python environment, so two runs do not make it or
# pip install into it at the same time.
tg_pip_lock() {
  local lock="${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/pip.lock"
  mkdir -p -- "${lock%/*}"
  flock "$lock" "$@"
}

# Install the Debian packages the project needs, only those missing.
tg_install_deps() {
  local -a missing=()
  tg_require_root
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  # Where Debian manages python3's packages, the tests' Python tools go into a virtual environment.
  if ! command -v python3 >/dev/null 2>&1 || { tg_python_managed && ! python3 -c 'import ensurepip, venv' 2>/dev/null; }; then
    missing+=(python3-venv)
  fi
  command -v curl >/dev/null 2>&1 || missing+=(curl ca-certificates)
  command -v ss >/dev/null 2>&1 || missing+=(iproute2)
  command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
  if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists hiredis; then
    missing+=(libhiredis-dev)
  fi
  [[ -x "$TG_PG_BIN/initdb" && -x "$TG_PG_BIN/pg_ctl" && -x "$TG_PG_BIN/postgres" ]] \
    || missing+=(postgresql-15)
  [[ -x "$TG_PG_BIN/psql" ]] || missing+=(postgresql-client-15)
  if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libpq; then
    missing+=(libpq-dev)
  fi
  # The libpq wrapper asks OpenSSL what it holds for a TLS connection; the tests make certificates.
  [[ -f /usr/include/openssl/ssl.h ]] || missing+=(libssl-dev)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)

  if [[ ${#missing[@]} -eq 0 ]]; then
    tg_log "system packages: all present"
    return 0
  fi
  tg_log "installing missing system packages: ${missing[*]}"
  tg_apt_get update || tg_die "apt-get update failed"
  tg_apt_get install -y --no-install-recommends --no-upgrade "${missing[@]}" \
    || tg_die "apt-get install failed for: ${missing[*]}"
  # Where services may start (a VM; not these containers, whose policy-rc.d forbids it), Debian starts
  # the packages' own Redis on 6379 and PostgreSQL cluster on 5432: the ports `ops/local` uses. Just
  # installed, they hold nothing; they are stopped and kept from starting at boot. We run our own.
  [[ " ${missing[*]} " != *" redis-server "* ]] || tg_quiet_system_redis
  [[ " ${missing[*]} " != *" postgresql-15 "* ]] || tg_quiet_system_postgres
  tg_log "system packages installed"
}

# Stop the redis-server service the package just started, and disable it.
tg_quiet_system_redis() {
  if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now redis-server >/dev/null 2>&1 || tg_warn "could not stop the system's redis-server service"
  elif [[ -x /etc/init.d/redis-server ]]; then
    /etc/init.d/redis-server stop >/dev/null 2>&1 || true
    ! command -v update-rc.d >/dev/null 2>&1 || update-rc.d redis-server disable >/dev/null 2>&1 || true
  fi
}

# Stop the cluster `15 main` the package just created (only that one: another version's clusters are
# someone's data), and start it only by hand from now on.
tg_quiet_system_postgres() {
  [[ -f /etc/postgresql/15/main/start.conf ]] || return 0
  sh -c 'echo manual >/etc/postgresql/15/main/start.conf' || tg_warn "could not set the system's PostgreSQL cluster to start by hand"
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
  fi
}

# ------------------------------------------------------------------- ports

# tg_write_headers FILE HEADER...: HTTP headers, one per line, readable by the owner only, for
# `curl -H @FILE`: credentials stay off command lines (`ps` shows those to every user).
tg_write_headers() {
  local file="$1"
  shift
  (umask 077 && printf '%s\n' "$@" >"$file")
}

# tg_drop_libpq_env: unsets libpq's variables (PGHOST, PGHOSTADDR, PGSSLMODE, PGSERVICE, …). A shell set
# up for a cloud database would otherwise send psql and the pieces to that server, or demand TLS of the
# one a script started.
tg_drop_libpq_env() {
  local name
  for name in $(compgen -e); do
    case "$name" in
      PG[A-Z]*) unset "$name" ;;
    esac
  done
}

# tg_drop_product_env [PATTERN...]: unsets libpq's variables and the product's (TOLLGATE_*,
# APPSTORE_EMULATOR_*) but those matching a glob PATTERN (the script's own settings). The caller's shell
# (a sourced tollgate.env, a cloud database's settings, a test rig's leftovers) must not change what a
# script starts, what it connects to, or where it listens.
tg_drop_product_env() {
  local name pattern keep
  tg_drop_libpq_env
  for name in $(compgen -e); do
    case "$name" in
      TOLLGATE_* | APPSTORE_EMULATOR_*) ;;
      *) continue ;;
    esac
    keep=0
    for pattern in "$@"; do
      # shellcheck disable=SC2053 # the pattern is a glob on purpose
      if [[ "$name" == $pattern ]]; then keep=1; fi
    done
    if [[ $keep == 0 ]]; then unset "$name"; fi
  done
}

# A free TCP port on 127.0.0.1 for a server started later, taken below the kernel's range for outgoing
# connections (ip_local_port_range): a client socket opened meanwhile (libpq, hiredis, wrk, the API's
# pools) could take a port from that range and make the server's bind fail, minutes after the choice.
# Falls back to a port the kernel picks when that range starts too low to leave room.
# With COUNT (default 1): the first of COUNT consecutive free ports (no fallback then).
tg_free_port() {
  [[ "${1:-1}" =~ ^[1-9][0-9]?$ ]] || tg_die "tg_free_port: COUNT must be 1-99, not '$1'"
  python3 - "${1:-1}" <<'PY'
import contextlib, random, socket, sys
count = int(sys.argv[1])
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as source:
        ephemeral = int(source.read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral = 32768
top = ephemeral - count + 1
candidates = random.sample(range(10000, top), min(200, top - 10000)) if top > 11000 else []
for port in candidates + ([0] if count == 1 else []):
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        try:
            for offset, s in enumerate(sockets):
                s.bind(("127.0.0.1", port + offset if port else 0))
        except OSError:
            continue
        print(sockets[0].getsockname()[1])
        break
PY
}

# True when something listens on TCP PORT (any address).
tg_port_listening() {
  local port="$1"
  [[ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]]
}

# A short description of who listens on PORT (best effort).
tg_port_owner() {
  local port="$1" line
  line="$(ss -Hltnp "sport = :$port" 2>/dev/null | head -n 1)"
  if [[ "$line" =~ users:\(\(\"([^\"]*)\",pid=([0-9]+) ]]; then
    printf '%s (pid %s)' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  else
    printf 'an unknown process'
  fi
}

# The pid of the process listening on PORT, or nothing when ss cannot tell.
tg_port_pid() {
  local line
  line="$(ss -Hltnp "sport = :$1" 2>/dev/null | head -n 1)"
  [[ "$line" =~ users:\(\(\"[^\"]*\",pid=([0-9]+) ]] && printf '%s' "${BASH_REMATCH[1]}"
  return 0
}

# Run CHECK... every INTERVAL seconds until it succeeds, for at most SECONDS; WHAT names the wait in the
# error. Optional PID (or ""): fail early when that process has exited.
tg_wait_until() {
  local seconds="$1" interval="$2" what="$3" pid="$4" deadline
  shift 4
  deadline=$(( $(tg_now) + seconds ))
  until "$@"; do
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      printf '==> error: process %s exited while waiting for %s\n' "$pid" "$what" >&2
      return 1
    fi
    if (( $(tg_now) >= deadline )); then
      printf '==> error: no %s within %ss\n' "$what" "$seconds" >&2
      return 1
    fi
    sleep "$interval"
  done
}

# True when HOST:PORT accepts a TCP connection.
tg_tcp_accepts() {
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# True when URL answers HTTP 200.
tg_http_ok() {
  [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" 2>/dev/null || true)" == "200" ]]
}

# Wait until HOST:PORT accepts TCP connections, for at most SECONDS.
tg_wait_tcp() {
  tg_wait_until "$3" 0.2 "connections on $1:$2" "" tg_tcp_accepts "$1" "$2"
}

# Wait until URL answers HTTP 200, for at most SECONDS. Optional PID: fail early when that process has exited.
tg_wait_http_ok() {
  tg_wait_until "$2" 0.5 "HTTP 200 from $1" "${3:-}" tg_http_ok "$1"
}

# ----------------------------------------------------------------- processes

# True when PID is a live process (a zombie, exited but not yet reaped, is not).
tg_pid_alive() {
  local pid="$1" stat
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  stat="$( { cat "/proc/$pid/stat"; } 2>/dev/null || true)"
  [[ -n "$stat" ]] || return 1
  stat="${stat##*) }"
  [[ "${stat:0:1}" != "Z" ]]
}

# When PID started (clock ticks since boot, /proc/PID/stat field 22); empty when it is gone. A pid and
# its start time name one process: a pid reused by another process has another start time.
tg_pid_starttime() {
  local stat fields
  stat="$( { cat "/proc/$1/stat"; } 2>/dev/null || true)"
  [[ -n "$stat" ]] || return 0
  read -r -a fields <<<"${stat##*) }"
  printf '%s' "${fields[19]:-}"
}

# Record PID (and its start time) in FILE, for tg_pidfile_pid.
tg_write_pidfile() {
  local file="$1" pid="$2"
  printf '%s %s\n' "$pid" "$(tg_pid_starttime "$pid")" >"$file"
}

# The pid stored in FILE, when that process is alive and, if FILE is one of tg_write_pidfile's ("PID
# STARTTIME"), still the process that started then; empty otherwise. After a restart of the machine or the
# container the pid may belong to an unrelated process now; tg_write_pidfile's file with an empty start
# time was written for a process already gone. A server's own pid file (Redis') holds the pid alone.
tg_pidfile_pid() {
  local file="$1" line pid started
  [[ -f "$file" ]] || return 0
  line="$(head -n 1 "$file" 2>/dev/null || true)"
  pid="$(tr -dc '0-9' <<<"${line%% *}")"
  tg_pid_alive "$pid" || return 0
  if [[ "$line" == *" "* ]]; then
    started="$(tr -dc '0-9' <<<"${line#* }")"
    [[ -n "$started" && "$(tg_pid_starttime "$pid")" == "$started" ]] || return 0
  fi
  printf '%s' "$pid"
}

# Wait until PID has exited, for at most SECONDS (fractional polling).
tg_wait_pid_gone() {
  local pid="$1" seconds="$2" deadline
  deadline=$(( $(tg_now) + seconds ))
  while tg_pid_alive "$pid"; do
    if (( $(tg_now) >= deadline )); then
      return 1
    fi
    sleep 0.1
  done
  return 0
}

# Stop the process named in FILE: SIGTERM, wait up to SECONDS (default 30),
# then SIGKILL. Removes FILE.
tg_stop_pidfile() {
  local file="$1" seconds="${2:-30}" pid name
  name="$(basename "$file" .pid)"
  pid="$(tg_pidfile_pid "$file")"
  if [[ -z "$pid" ]]; then
    rm -f "$file"
    return 0
  fi
  tg_log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  if ! tg_wait_pid_gone "$pid" "$seconds"; then
    tg_warn "$name (pid $pid) ignored SIGTERM for ${seconds}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    tg_wait_pid_gone "$pid" 5 || tg_warn "$name (pid $pid) is still alive after SIGKILL"
  fi
  rm -f "$file"
}

# Pids of processes whose command line contains the path TEXT (never our own shell).
tg_pids_matching() {
  local text="$1" dir pid cmd
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
    cmd="$( { tr '\0' ' ' <"$dir/cmdline"; } 2>/dev/null || true)"
    # TEXT as a whole path: /tmp/tollgate-local must not match /tmp/tollgate-local2.
    [[ -n "$cmd" && ( "$cmd" == *"$text/"* || "$cmd" == *"$text "* ) ]] && printf '%s\n' "$pid"
  done
  return 0
}

# Pids of the live (non-zombie) members of a process group (KIND "group") or a session (KIND
# "session") ID. A tree started with `setsid` is one session whatever process groups its members make
# (Foundation's Process puts each child in a group of its own, so the API, worker, emulator and Redis
# servers the tests start are not in the tests' process group); `timeout` makes a group of its own.
tg_member_pids() {
  local kind="$1" id="$2" stat_file stat rest state ppid pgrp session
  for stat_file in /proc/[0-9]*/stat; do
    stat="$( { cat "$stat_file"; } 2>/dev/null || true)"
    [[ -n "$stat" ]] || continue
    rest="${stat##*) }"
    read -r state ppid pgrp session _ <<<"$rest"
    : "$ppid"
    [[ "$state" != "Z" ]] || continue
    if [[ ( "$kind" == group && "$pgrp" == "$id" ) || ( "$kind" == session && "$session" == "$id" ) ]]; then
      stat_file="${stat_file#/proc/}"
      printf '%s\n' "${stat_file%/stat}"
    fi
  done
  return 0
}

# Wait up to SECONDS for the group or session (KIND ID) to empty.
tg_wait_members_gone() {
  local kind="$1" id="$2" seconds="$3" deadline
  deadline=$(( $(tg_now) + seconds ))
  while [[ -n "$(tg_member_pids "$kind" "$id")" ]]; do
    (( $(tg_now) >= deadline )) && return 1
    sleep 0.2
  done
  return 0
}

# Send SIGNAL to every member of the group or session (KIND ID).
tg_signal_members() {
  local kind="$1" id="$2" signal="$3" pids
  pids="$(tg_member_pids "$kind" "$id")"
  # shellcheck disable=SC2086 # one pid per word
  [[ -z "$pids" ]] || kill "-$signal" $pids 2>/dev/null || true
}

# Send SIGNAL to every member of the group or session (KIND ID) and wait up to SECONDS; then SIGTERM
# (10 s more) when SIGNAL was something else, then SIGKILL.
tg_stop_members() {
  local kind="$1" id="$2" signal="${3:-TERM}" seconds="${4:-30}"
  [[ -n "$(tg_member_pids "$kind" "$id")" ]] || return 0
  tg_signal_members "$kind" "$id" "$signal"
  tg_wait_members_gone "$kind" "$id" "$seconds" && return 0
  if [[ "$signal" != "TERM" ]]; then
    tg_warn "$kind $id still alive ${seconds}s after SIG$signal; sending SIGTERM"
    tg_signal_members "$kind" "$id" TERM
    tg_wait_members_gone "$kind" "$id" 10 && return 0
  fi
  tg_warn "$kind $id still alive; sending SIGKILL"
  tg_signal_members "$kind" "$id" KILL
  tg_wait_members_gone "$kind" "$id" 5 || tg_warn "$kind $id survived SIGKILL"
}

# SIGTERM, then SIGKILL, every process whose command line contains TEXT.
tg_kill_matching() {
  local text="$1" pid
  local -a pids=()
  mapfile -t pids < <(tg_pids_matching "$text")
  [[ ${#pids[@]} -eq 0 ]] && return 0
  tg_log "stopping ${#pids[@]} leftover process(es) from $text: ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for pid in "${pids[@]}"; do
    if ! tg_wait_pid_gone "$pid" 5; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

# ---------------------------------------------------------------- postgres

# Run a PostgreSQL server binary as the postgres user, from a directory it can read.
tg_pg_run() {
  (cd / && runuser -u postgres -- "$@")
}

# psql as the superuser, over the server's socket directory.
tg_psql() {
  local dir="$1" port="$2"
  shift 2
  PGCONNECT_TIMEOUT=5 "$TG_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
    -h "$dir/sock" -p "$port" -U postgres -d postgres "$@"
}

# Port of the running postmaster of DIR/data (from postmaster.pid), or empty.
tg_postgres_running_port() {
  local dir="$1"
  if tg_pg_run "$TG_PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    sed -n 4p "$dir/data/postmaster.pid" 2>/dev/null || true
  fi
}

# Start PostgreSQL with its data under DIR/data, listening on 127.0.0.1:PORT.
# MODE: "durable" (default; fsync on) or "fast" (fsync and synchronous_commit
# off; only for throwaway test data). Creates role and database "tollgate".
tg_start_postgres() {
  local dir="$1" port="$2" mode="${3:-durable}" running durability
  case "$mode" in
    durable) durability="-c fsync=on -c synchronous_commit=on" ;;
    fast) durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off" ;;
    *) tg_die "tg_start_postgres: unknown mode '$mode' (durable|fast)" ;;
  esac

  mkdir -p "$dir"
  chown postgres:postgres "$dir"
  chmod 755 "$dir"
  if ! tg_pg_run test -w "$dir"; then
    tg_die "user postgres cannot reach $dir: every parent directory must be traversable by it (use a directory under /tmp)"
  fi

  if [[ ! -f "$dir/data/PG_VERSION" ]]; then
    tg_log "initialising PostgreSQL data directory $dir/data"
    tg_pg_run "$TG_PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C \
      >"$dir/initdb.log" 2>&1 || { tg_log_tail "$dir/initdb.log"; tg_die "initdb failed for $dir/data"; }
  fi

  running="$(tg_postgres_running_port "$dir")"
  if [[ -n "$running" ]]; then
    if [[ "$running" != "$port" ]]; then
      tg_die "PostgreSQL in $dir/data is already running on port $running, not $port; stop it first"
    fi
    tg_log "PostgreSQL already running on 127.0.0.1:$port"
  else
    if tg_port_listening "$port"; then
      tg_die "port $port is already in use by $(tg_port_owner "$port"); cannot start PostgreSQL"
    fi
    # pg_ctl hands -o to a shell: the socket path goes in quotes (a folder may have spaces), so it cannot hold one.
    [[ "$dir" != *"'"* ]] || tg_die "PostgreSQL's folder cannot contain a single quote: $dir"
    mkdir -p "$dir/sock"
    chown postgres:postgres "$dir/sock"
    tg_log "starting PostgreSQL on 127.0.0.1:$port ($mode)"
    if ! tg_pg_run "$TG_PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k '$dir/sock' -c max_connections=300 $durability" \
      start >/dev/null; then
      tg_log_tail "$dir/postgres.log"
      tg_die "PostgreSQL did not start (log: $dir/postgres.log)"
    fi
  fi
  tg_wait_tcp 127.0.0.1 "$port" 30 || { tg_log_tail "$dir/postgres.log"; tg_die "PostgreSQL is not reachable on 127.0.0.1:$port"; }

  tg_psql "$dir" "$port" <<'SQL' >/dev/null || tg_die "could not create role tollgate"
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tollgate') THEN
    CREATE ROLE tollgate LOGIN CREATEDB;
  END IF;
END
$$;
SQL
  if [[ "$(tg_psql "$dir" "$port" -tAc "SELECT 1 FROM pg_database WHERE datname = 'tollgate'")" != "1" ]]; then
    tg_psql "$dir" "$port" -c "CREATE DATABASE tollgate OWNER tollgate" >/dev/null \
      || tg_die "could not create database tollgate"
    tg_log "created role and database tollgate"
  fi
}

# Stop the PostgreSQL server of DIR/data, if it runs.
tg_stop_postgres() {
  local dir="$1"
  [[ -f "$dir/data/PG_VERSION" ]] || return 0
  if tg_pg_run "$TG_PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    tg_log "stopping PostgreSQL ($dir/data)"
    tg_pg_run "$TG_PG_BIN/pg_ctl" -D "$dir/data" stop -m fast -w -t 60 >/dev/null \
      || { tg_log_tail "$dir/postgres.log" 20; tg_warn "pg_ctl stop failed for $dir/data"; return 1; }
  fi
}

# ------------------------------------------------------------------- redis

tg_redis_ping() {
  local port="$1"
  # redis-cli has no read timeout: a Redis that takes the connection and never answers (stopped) would hold it.
  [[ "$(timeout 3 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == "PONG" ]]
}

# Start Redis with its files under DIR, on 127.0.0.1:PORT, AOF fsync every second.
# Pid of the Redis started in DIR on PORT, or empty. Redis writes its pid file itself, with no start
# time, so the pid is believed only while it is a redis-server on that port: after a crash or a reboot the
# pid may belong to anything. (A stale file is overwritten by the next start and removed by a stop.)
tg_redis_pid() {
  local dir="$1" port="$2" pid
  pid="$(tg_pidfile_pid "$dir/redis.pid")"
  if [[ -n "$pid" ]] && ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "redis-server .*:$port\b"; then
    pid=""
  fi
  # Its pid file gone or empty (deleted, a full disk): a Redis on the port that works in DIR is still ours.
  if [[ -z "$pid" && "$(timeout 5 redis-cli -h 127.0.0.1 -p "$port" CONFIG GET dir 2>/dev/null | tail -n 1)" == "$(realpath -m -- "$dir")" ]]; then
    pid="$(timeout 5 redis-cli -h 127.0.0.1 -p "$port" INFO server 2>/dev/null | sed -n 's/^process_id:\([0-9]*\).*/\1/p')"
  fi
  printf '%s' "$pid"
}

tg_start_redis() {
  local dir="$1" port="$2" pid deadline
  mkdir -p "$dir"
  pid="$(tg_redis_pid "$dir" "$port")"
  if [[ -n "$pid" ]]; then
    if tg_redis_ping "$port"; then
      tg_log "Redis already running on 127.0.0.1:$port (pid $pid)"
      return 0
    fi
    tg_die "Redis from $dir runs (pid $pid) but does not answer on port $port; run down first"
  fi
  if tg_port_listening "$port"; then
    tg_die "port $port is already in use by $(tg_port_owner "$port"); cannot start Redis"
  fi
  tg_log "starting Redis on 127.0.0.1:$port"
  redis-server --bind 127.0.0.1 --port "$port" --daemonize yes --dir "$dir" \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
    --appendonly yes --appendfsync everysec --save "" --maxmemory-policy noeviction \
    </dev/null >/dev/null || { tg_log_tail "$dir/redis.log"; tg_die "redis-server failed to start"; }
  deadline=$(( $(tg_now) + 30 ))
  until tg_redis_ping "$port"; do
    if (( $(tg_now) >= deadline )); then
      tg_log_tail "$dir/redis.log"
      tg_die "Redis did not answer PING on 127.0.0.1:$port within 30s"
    fi
    sleep 0.1
  done
}

# Stop the Redis started by tg_start_redis DIR PORT, and only that one: a Redis on PORT that is not the
# redis-server of DIR's pid file (someone else's, on the default port) is left alone.
tg_stop_redis() {
  local dir="$1" port="$2" pid
  pid="$(tg_redis_pid "$dir" "$port")"
  if [[ -z "$pid" ]]; then
    rm -f "$dir/redis.pid"
    if tg_redis_ping "$port"; then
      tg_warn "a Redis on 127.0.0.1:$port is not the one started in $dir; left running"
    fi
    return 0
  fi
  tg_log "stopping Redis (127.0.0.1:$port)"
  # AOF is flushed on shutdown; "nosave" only skips the (disabled) RDB snapshot.
  timeout 20 redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
  if [[ -n "$pid" ]] && ! tg_wait_pid_gone "$pid" 15; then
    tg_warn "Redis (pid $pid) still alive after SHUTDOWN; killing it"
    kill -TERM "$pid" 2>/dev/null || true
    tg_wait_pid_gone "$pid" 10 || kill -KILL "$pid" 2>/dev/null || true
    tg_wait_pid_gone "$pid" 5 || true
  fi
  rm -f "$dir/redis.pid"
}

# ------------------------------------------------------------------- swift

# Build configuration: TOLLGATE_BUILD_CONFIG = debug (default) | release.
tg_build_config() {
  local config="${TOLLGATE_BUILD_CONFIG:-debug}"
  case "$config" in
    debug | release) printf '%s' "$config" ;;
    *) tg_die "TOLLGATE_BUILD_CONFIG must be debug or release, not '$config'" ;;
  esac
}

# Directory holding the built executables.
tg_bin_dir() {
  local config
  config="$(tg_build_config)"
  (cd "$TG_ROOT" && swift build -c "$config" --show-bin-path)
}
