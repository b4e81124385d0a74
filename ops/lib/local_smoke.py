#!/usr/bin/env python3
"""The README's first command, checked as a reader would use it.

    TOLLGATE_LOCAL_DIR=DIR python3 ops/lib/local_smoke.py

`bash ops/local up` with its state in DIR (which must not exist yet), on ops/local's default ports when
all of them are free (the command as the README gives it), else on free ports of its own, so a system
already up on the default ports is left alone; then the "Try it yourself" steps it prints, run
as printed (steps 1-6: a coins receipt, its job, the access status, the wallet, the queue counts, a
worker's metrics) and checked: the demo receipt granted premium access, the coins arrive in the wallet,
the same receipt sent again answers the same job. Then `bash ops/local status` and `down --purge`, after
which nothing of it may be left: no process, no listening port, no folder. `down --purge` runs on every
way out (a failed check, SIGINT, SIGTERM). ops/test runs it after the whole suite; it needs root, as
ops/local does. Exit 0 when every check held, 1 otherwise (128 + the signal when stopped by one), with
ops/local's own output above the reason. `up` gets 420 s: enough after a build (ops/test has built), not
always for a first build by hand (`swift build` first).
DIR comes from the environment, not the command line: `down` counts a process naming it as a piece left running.
"""

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
UP_TIMEOUT_S = 420
POLL_S = 60
DEMO_EMAIL = "viewer@example.com"
COINS = 100
# ops/local's defaults (its PG_PORT=… lines): PostgreSQL, Redis, the emulator, the API, the first worker's metrics.
DEFAULT_PORTS = [5432, 6379, 9090, 8080, 9464]


class Failed(Exception):
    pass


class Stopped(Failed):
    """SIGINT or SIGTERM (Ctrl-C, ops/test's cleanup, `timeout`): the same way out as a failed check."""

    def __init__(self, signum):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.code = 128 + signum


def log(message):
    print(f"==> local: {message}", flush=True)


def busy(ports):
    """The PORTS something listens on (ops/lib/common.sh's `tg_port_listening`, as `up` and `down` ask)."""
    script = 'source ops/lib/common.sh; for port in "$@"; do tg_port_listening "$port" && echo "$port"; done; true'
    out = subprocess.run(["bash", "-c", script, "busy", *map(str, ports)], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def free_ports():
    """Four free ports and a fifth with the next one free too (the workers' metrics), all distinct."""
    script = "source ops/lib/common.sh; for i in 1 2 3 4; do tg_free_port; done; tg_free_port 2"
    for _ in range(20):
        out = subprocess.run(["bash", "-c", script], cwd=ROOT, check=True, capture_output=True, text=True).stdout
        ports = [int(p) for p in out.split()]
        if len(ports) == 5 and len(set(ports[:4]) | {ports[4], ports[4] + 1}) == 6:
            return ports
    raise Failed("could not find six distinct free ports")


def ops_local(env, *args, timeout=120):
    """Runs `bash ops/local ARGS`, its output shown as it comes and returned."""
    lines = []

    def copy(stream):
        for line in stream:
            sys.stdout.write("    " + line)
            sys.stdout.flush()
            lines.append(line)

    process = subprocess.Popen(["bash", "ops/local", *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    reader = threading.Thread(target=copy, args=(process.stdout,), daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=timeout)
    except BaseException as error:
        # Its own traps say what it left running; `down --purge` follows in main. Bash runs its TERM trap
        # only once the command in front ends (a build, apt waiting for its lock): then it is killed.
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if isinstance(error, subprocess.TimeoutExpired):
            raise Failed(f"ops/local {' '.join(args)} still ran after {timeout}s")
        raise
    # Every piece `up` starts writes to its own log: the pipe ends with `up`.
    reader.join(timeout=10)
    if reader.is_alive():
        raise Failed(f"ops/local {' '.join(args)} ended, but something it started still holds its output open")
    return status, "".join(lines)


def steps_printed(output):
    """The "Try it yourself" block: {step number: its shell lines}, steps 1 to 7."""
    steps, current = {}, None
    for line in output.splitlines():
        match = re.match(r"^# (\d+)\. ", line)
        if match:
            current = int(match.group(1))
            steps[current] = []
        elif current is not None and line.strip():
            if line.startswith("==> "):
                current = None
            else:
                steps[current].append(line)
    if sorted(steps) != list(range(1, 8)) or not all(steps.values()):
        raise Failed(f"up did not print the seven 'Try it yourself' steps (found {sorted(steps)})")
    return steps


def run_steps(steps, numbers, env):
    """Runs the given steps in one bash, as pasted: {step: (stdout, stderr)}."""
    script = ""
    for n in numbers:
        # On a line of its own: step 1's answer goes to stderr without a newline.
        script += f"printf '\\n@@step {n}@@\\n' | tee /dev/stderr\n" + "\n".join(steps[n]) + "\n"
    try:
        done = subprocess.run(["bash"], input=script, cwd=ROOT, env=env, capture_output=True, text=True,
                              errors="replace", timeout=120)
    except subprocess.TimeoutExpired:
        raise Failed(f"steps {list(numbers)} still ran after 120s (the API or a worker stopped answering?)")
    out = re.split(r"\n@@step (\d+)@@\n", done.stdout)
    err = re.split(r"\n@@step (\d+)@@\n", done.stderr)
    if out[1::2] != err[1::2] or len(out[1::2]) != len(numbers):
        raise Failed(f"the steps did not all run (exit {done.returncode}): {done.stderr.strip()[-300:]!r}")
    return {int(out[i]): (out[i + 1], err[i + 1]) for i in range(1, len(out), 2)}


def json_of(text, what):
    """The JSON object on the last line of TEXT (curl's answer; `echo` ends it)."""
    try:
        value = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        value = None
    if not isinstance(value, dict):
        raise Failed(f"{what} did not answer a JSON object: {text.strip()[:300]!r}")
    return value


def job_of(step1):
    out, err = step1
    match = re.search(r"^JOB=(\S+)$", out, flags=re.M)
    if not match:
        raise Failed(f"step 1 set no JOB (stdout {out.strip()[:200]!r}, stderr {err.strip()[:300]!r})")
    answer = json_of(err, "step 1 (POST /apple/payment)")
    if answer.get("jobId") != match.group(1) or answer.get("message") != "OK":
        raise Failed(f"step 1 answered {answer}")
    return match.group(1)


def check(env, output):
    steps = steps_printed(output)
    results = run_steps(steps, range(1, 7), env)
    job = job_of(results[1])
    log(f"step 1: receipt accepted, job {job}")
    record = json_of(results[2][0], "step 2 (the job)")
    if record.get("jobId") != job or record.get("customerEmail") != DEMO_EMAIL:
        raise Failed(f"step 2 answered {record}")
    log(f"step 2: the job reads {record.get('status')!r}")
    access = json_of(results[3][0], "step 3 (the access status)")
    if access.get("accessGranted") is not True:
        raise Failed(f"step 3: the demo receipt's premium access is not granted: {access}")
    log("step 3: premium access granted")
    wallet = json_of(results[4][0], "step 4 (the wallet)")
    if wallet.get("customerEmail") != DEMO_EMAIL or not isinstance(wallet.get("balances"), dict):
        raise Failed(f"step 4 answered {wallet}")
    queue = json_of(results[5][0], "step 5 (the queue counts)")
    if not all(type(queue.get(k)) is int for k in ("queued", "processing", "retrying", "dead")):
        raise Failed(f"step 5 answered {queue}")
    if "tollgate_" not in results[6][0]:
        raise Failed(f"step 6 printed no Tollgate metric: {results[6][0][:300]!r}")
    log("steps 4-6: wallet, queue counts and worker metrics answered")

    deadline = time.monotonic() + POLL_S
    while True:
        polled = run_steps(steps, [2, 4], env | {"JOB": job})
        status = json_of(polled[2][0], "step 2 (the job)").get("status")
        wallet = json_of(polled[4][0], "step 4 (the wallet)")
        coins = (wallet.get("balances") or {}).get("coins")
        if status in ("rejected", "failed"):
            raise Failed(f"the coins job ended {status!r}: {polled[2][0].strip()}")
        if status == "granted" and coins == COINS:
            break
        if time.monotonic() > deadline:
            raise Failed(f"after {POLL_S}s the coins job reads {status!r} and the wallet {wallet}")
        time.sleep(0.5)
    log(f"the coins job granted; the wallet holds {coins} coins")
    again = job_of(run_steps(steps, [1], env)[1])
    if again != job:
        raise Failed(f"the same receipt sent again answered job {again}, not {job}")
    log("the same receipt sent again answered the same job")


def wait_for_lock(state, seconds=60):
    """Waits until no `up` or `down` holds ops/local's lock on STATE: a stopped `up`'s children (a build,
    say) hold it until they have exited, and `down` would refuse to run meanwhile."""
    try:
        lock = open(os.path.join(state, ".lock"), "rb")
    except OSError:
        return
    with lock:
        deadline = time.monotonic() + seconds
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(lock, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return  # `down` says who holds it
                time.sleep(0.2)


def leftovers(state, ports):
    """What is left of the system: processes naming the folder, listening ports (ops/lib/common.sh's
    helpers, as `down` uses them, but asked afresh), the folder itself."""
    script = ('source ops/lib/common.sh; for pid in $(tg_pids_matching "$1"); do printf "process %s (%s)\\n" "$pid" '
              '"$(tr "\\0" " " </proc/$pid/cmdline 2>/dev/null | cut -c1-80)"; done')
    found = subprocess.run(["bash", "-c", script, "leftovers", state], cwd=ROOT,
                           capture_output=True, text=True, errors="replace").stdout.splitlines()
    found += [f"port {port} still listening" for port in busy(ports)]
    if os.path.exists(state):
        found.append(f"{state} still exists")
    return found


def main():
    if len(sys.argv) != 1 or not os.environ.get("TOLLGATE_LOCAL_DIR"):
        sys.exit(__doc__)
    state = os.path.realpath(os.environ["TOLLGATE_LOCAL_DIR"])
    if os.path.exists(state):
        sys.exit(f"{state} exists already: give a folder that does not")

    def stop(signum, _frame):
        # The first signal stops the checks; later ones (`timeout` passes a TERM on to its whole group, this
        # process included) must not cut the clean-up short. `down` inherits SIG_IGN: it starts nothing that
        # stays, is bounded by its timeout here, and a KILL still ends it.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise Stopped(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOLLGATE_", "APPSTORE_EMULATOR_"))}
    env |= {"TOLLGATE_LOCAL_DIR": state, "TOLLGATE_LOCAL_WORKERS": "2"}
    try:
        taken = busy(DEFAULT_PORTS + [DEFAULT_PORTS[-1] + 1])
        chosen = free_ports() if taken else DEFAULT_PORTS
    except Stopped as stopped:  # nothing started yet
        sys.exit(stopped.code)
    except (Failed, subprocess.CalledProcessError, ValueError) as failure:
        sys.exit(f"==> local: FAILED: no free ports ({failure})")
    pg, redis, emulator, api, metrics = chosen
    if taken:
        log(f"default port(s) {', '.join(map(str, taken))} in use: free ports instead")
        env |= {"TOLLGATE_LOCAL_PG_PORT": str(pg), "TOLLGATE_LOCAL_REDIS_PORT": str(redis),
                "TOLLGATE_LOCAL_EMULATOR_PORT": str(emulator), "TOLLGATE_LOCAL_API_PORT": str(api),
                "TOLLGATE_LOCAL_METRICS_BASE_PORT": str(metrics)}

    started, ok, code = time.monotonic(), False, 1
    try:
        how = "free ports" if taken else "its default ports"
        log(f"bash ops/local up in {state} on {how} (PostgreSQL {pg}, Redis {redis}, emulator {emulator}, API {api}, "
            f"metrics {metrics}-{metrics + 1})")
        status, output = ops_local(env, "up", timeout=UP_TIMEOUT_S)
        if status != 0:
            raise Failed(f"ops/local up exited {status}")
        log(f"up in {time.monotonic() - started:.0f}s; running the 'Try it yourself' steps")
        check(env, output)
        status, output = ops_local(env, "status")
        if status != 0 or not all(f"{piece} " in output for piece in ("api", "worker-0", "worker-1", "emulator")):
            raise Failed(f"ops/local status exited {status}")
        log("status: every piece up")
        ok = True
    except Exception as failure:  # every way out ends with down --purge, a check's own defect too
        log(f"FAILED: {failure}" if isinstance(failure, Failed) else f"FAILED: {type(failure).__name__}: {failure}")
        code = getattr(failure, "code", 1)
    # No signal cuts the clean-up short (see `stop`).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    wait_for_lock(state)
    try:
        status, _ = ops_local(env, "down", "--purge")
    except Failed as failure:
        log(f"FAILED: {failure}")
        status = None
    down = status == 0
    left = leftovers(state, chosen + [chosen[-1] + 1])
    if not down or left:
        log(f"FAILED: down --purge exited {status}; left behind: {', '.join(left) or 'nothing'}")
        ok = False
    else:
        log("down --purge left no process, port or folder behind")
    log(f"{'passed' if ok else 'FAILED'} in {time.monotonic() - started:.0f}s")
    sys.exit(0 if ok else code)


if __name__ == "__main__":
    main()
