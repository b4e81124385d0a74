#!/usr/bin/env python3
"""Load, measurement and report helpers for ops/bench (python3 standard library only).

  bench_load.py latency  --redis-port P --accepted FILE ...      wait for bench_post's jobs, accepted -> granted percentiles
  bench_load.py steps    --url METRICS_URL ...                   the workers' step timers so far (sums and counts)
  bench_load.py cpu      --snapshot NAME=PID,...                 cumulative CPU ticks of processes, as one JSON line
  bench_load.py report   --results FILE --out FILE ...           BENCHMARKS.md from the collected results

Results are appended to --results as `key=value` lines (one file per run). The receipts themselves are
posted by ops/lib/bench_post.c (fill and paced), which appends its results to the same file.
"""

import argparse
import collections
import json
import os
import sys
import time
import urllib.request

from resp import Redis  # ops/lib is on sys.path: the scripts run from there

FINAL = ("granted", "rejected", "failed")


def log(message):
    sys.stdout.write("==> %s\n" % message)
    sys.stdout.flush()


def append_results(path, prefix, values):
    with open(path, "a", encoding="utf-8") as out:
        for key, value in values.items():
            if isinstance(value, float):
                value = "%.3f" % value
            out.write("%s%s=%s\n" % (prefix, key, value))


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list (p in 0..100)."""
    if not sorted_values:
        return None
    rank = max(1, int(-(-p * len(sorted_values) // 100)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def parse_api(url):
    rest = url.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.partition(":")
    return host, int(port or 80)


# ------------------------------------------------------------------ where a job's time went, from the workers

# Timers summed over the workers' /metrics: (result name, metric, labels it must carry).
STEP_TIMERS = (
    ("wait", "tollgate_job_step_seconds", 'step="wait"'),
    ("start", "tollgate_job_step_seconds", 'step="start"'),
    ("apple", "tollgate_apple_call_duration_seconds", ""),
    ("grant", "tollgate_job_step_seconds", 'step="grant"'),
    ("finish", "tollgate_job_step_seconds", 'step="finish"'),
    ("total", "tollgate_accepted_to_granted_seconds", ""),
)


def steps(args):
    """Sums and counts of the step timers so far, over every worker; a phase's figures are two marks' difference."""
    totals = collections.defaultdict(float)
    for url in args.url:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode("utf-8", "replace")
        except OSError as error:
            log("steps: cannot read %s: %s" % (url, error))
            return 1
        for line in text.splitlines():
            for name, metric, label in STEP_TIMERS:
                for part in ("sum", "count"):
                    if line.startswith("%s_%s" % (metric, part)) and label in line:
                        totals["%s_%s" % (name, part)] += float(line.rsplit(" ", 1)[1])
    with open(args.results, "a", encoding="utf-8") as out:
        for name, _metric, _label in STEP_TIMERS:
            for part in ("sum", "count"):
                out.write("%s%s_%s=%s\n" % (args.key, name, part, totals["%s_%s" % (name, part)]))
    return 0


def step_means(results, key):
    """`wait 1.3 ms, start 0.8 ms, …` for the jobs between the marks KEY.steps_before and KEY.steps_after."""
    parts = []
    for name, _metric, _label in STEP_TIMERS:
        total = delta(results, key + ".steps_after." + name + "_sum", key + ".steps_before." + name + "_sum")
        count = delta(results, key + ".steps_after." + name + "_count", key + ".steps_before." + name + "_count")
        if not count:
            return None
        parts.append("%s %.1f ms" % ("accepted → granted" if name == "total" else name, 1000 * total / count))
    return ", ".join(parts)


# ------------------------------------------------------------------ accepted -> granted, read from Redis

def latency(args):
    accepted = []
    with open(args.accepted, encoding="utf-8") as source:
        for line in source:
            job, _scheduled, _sent, answered = line.rstrip("\n").split("\t")
            accepted.append((job, float(answered)))
    redis = Redis(args.redis_port)
    prefix = "%s:{q}:job:" % args.prefix
    deadline = time.monotonic() + args.deadline_seconds
    while True:
        replies = redis.pipeline([["HMGET", prefix + job, "status", "acceptedAt", "updatedAt"] for job, _ in accepted])
        final = sum(1 for reply in replies if reply[0] in FINAL)
        if final == len(accepted) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    redis.close()
    statuses = {}
    api_ms, client_ms = [], []
    for (job, answered), (status, accepted_at, updated_at) in zip(accepted, replies):
        statuses[status or "missing"] = statuses.get(status or "missing", 0) + 1
        if status == "granted":
            api_ms.append(int(updated_at) - int(accepted_at))
            client_ms.append(int(updated_at) - answered)
    api_ms.sort()
    client_ms.sort()
    result = {"jobs": len(accepted), "granted": statuses.get("granted", 0),
              "not_granted": len(accepted) - statuses.get("granted", 0),
              "statuses": ",".join("%s:%d" % kv for kv in sorted(statuses.items())) or "-"}
    for name, values in (("api", api_ms), ("client", client_ms)):
        for p in (50, 90, 99):
            result["%s_p%d_ms" % (name, p)] = float(percentile(values, p) or 0)
        result["%s_max_ms" % name] = float(values[-1] if values else 0)
    append_results(args.results, args.key, result)
    log("latency: %d jobs (%s); accepted->granted p50 %.0f ms, p99 %.0f ms (API stamps); p50 %.0f ms, p99 %.0f ms (client 200)" % (
        len(accepted), result["statuses"], result["api_p50_ms"], result["api_p99_ms"],
        result["client_p50_ms"], result["client_p99_ms"]))
    return 0 if result["not_granted"] == 0 else 1


# ------------------------------------------------------------------ CPU accounting

def process_ticks(pid, reaped_children=False):
    """utime + stime of PID (all its threads); with reaped_children, also the time of children it has waited for."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii") as source:
            fields = source.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        if reaped_children:
            ticks += int(fields[13]) + int(fields[14])
        return ticks
    except (OSError, ValueError, IndexError):
        return 0


def children_of(parent):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, encoding="ascii") as source:
                fields = source.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def cpu(args):
    with open("/proc/stat", encoding="ascii") as source:
        values = [int(v) for v in source.readline().split()[1:]]
    idle = values[3] + values[4]
    snapshot = {"time": time.time(), "busy": sum(values[:8]) - idle, "total": sum(values[:8])}
    for item in filter(None, args.snapshot.split(",")):
        name, _, pid = item.partition("=")
        if not pid.isdigit():
            continue
        if args.with_children and name in args.with_children.split(","):
            # The live children now, plus those already gone (their time is in the parent's cutime/cstime).
            ticks = process_ticks(int(pid), reaped_children=True)
            ticks += sum(process_ticks(child) for child in children_of(int(pid)))
        else:
            ticks = process_ticks(int(pid))
        snapshot[name] = ticks
    with open(args.out, "a", encoding="utf-8") as out:
        out.write("%s\t%s\n" % (args.label, json.dumps(snapshot)))
    return 0


# ------------------------------------------------------------------ report

def load_results(path):
    results = {}
    with open(path, encoding="utf-8") as source:
        for line in source:
            key, sep, value = line.rstrip("\n").partition("=")
            if sep:
                results[key] = value
    return results


def number(results, key, default=None):
    try:
        return float(results[key])
    except (KeyError, ValueError):
        return default


def delta(results, after, before):
    """`after - before` of two recorded counters, or None when either is missing."""
    a, b = number(results, after), number(results, before)
    return None if a is None or b is None else a - b


def cpu_table(path, loadgen_path):
    """Cores used per process between each `<phase>:start` and `<phase>:end` snapshot."""
    if not os.path.exists(path):
        return []
    loadgen = {}
    if loadgen_path and os.path.exists(loadgen_path):
        with open(loadgen_path, encoding="utf-8") as source:
            for line in source:
                phase, _, seconds = line.rstrip("\n").partition("\t")
                try:
                    loadgen[phase] = loadgen.get(phase, 0.0) + float(seconds)
                except ValueError:
                    pass
    snaps = {}
    order = []
    with open(path, encoding="utf-8") as source:
        for line in source:
            label, _, data = line.rstrip("\n").partition("\t")
            phase, _, edge = label.rpartition(":")
            snaps.setdefault(phase, {})[edge] = json.loads(data)
            if phase not in order:
                order.append(phase)
    hz = os.sysconf("SC_CLK_TCK")
    rows = []
    for phase in order:
        start, end = snaps[phase].get("start"), snaps[phase].get("end")
        if not start or not end:
            continue
        seconds = end["time"] - start["time"]
        if seconds <= 0:
            continue
        named = {}
        for key in end:
            if key in ("time", "busy", "total"):
                continue
            # A process started during the phase (a worker) had used nothing at its start.
            named[key] = max(0, end[key] - start.get(key, 0)) / hz / seconds
        if phase in loadgen:
            named["load generator"] = loadgen[phase] / seconds
        busy = (end["busy"] - start["busy"]) / hz / seconds
        rows.append((phase, seconds, busy, named))
    return rows


def report(args):
    r = load_results(args.results)
    lines = []
    add = lines.append
    quick = r.get("mode") == "quick"

    def fmt(value, digits=0, suffix=""):
        if value is None:
            return "n/a"
        return ("{:,.%df}" % digits).format(value) + suffix

    def verdict(ok):
        return "**met**" if ok else "**missed**"

    trivial = number(r, "ref_trivial.rps")
    accept = number(r, "accept.rps")
    accept_p99 = number(r, "accept.p99_us")
    access_with = number(r, "access_with.rps")
    access_without = number(r, "access_without.rps")
    drain1 = number(r, "drain1.rate")
    drain2 = number(r, "drain2.rate")
    apple_ms = number(r, "apple_latency_ms", 200)
    lat1 = number(r, "latency1.api_p50_ms")
    lat2 = number(r, "latency2.api_p50_ms")
    api_rss = number(r, "rss.api_mb")
    worker_rss = max(v for v in (number(r, "rss.worker1_mb", 0), number(r, "rss.worker2a_mb", 0), number(r, "rss.worker2b_mb", 0)))

    def ratio(a, b):
        return a / b if a is not None and b else None

    add("# Benchmarks")
    add("")
    if quick:
        add("> **Quick smoke run (`--quick`)**: phases of a few seconds and a small backlog; the figures are not")
        add("> representative and say nothing about the targets. Run `bash ops/bench` for the real figures.")
        add("")
    add("Produced by `bash ops/bench` (one run, every figure below from the same run, on the machine described")
    add("below). Everything runs on 127.0.0.1 on this one machine: PostgreSQL, Redis, the App Store emulator,")
    add("the API, the workers *and the load generators share its cores*, so each Tollgate figure is set next to a")
    add("reference measured in the same run with the same tools and concurrency.")
    add("")
    add("## Machine and run")
    add("")
    add("| | |")
    add("| --- | --- |")
    add("| date (UTC) | %s |" % r.get("date", "?"))
    add("| git commit | `%s`%s |" % (r.get("commit", "?"), " (with uncommitted changes)" if r.get("dirty") == "1" else ""))
    add("| CPU | %s, %s cores (`nproc`) |" % (r.get("cpu_model", "?"), r.get("nproc", "?")))
    add("| memory | %s |" % r.get("memory", "?"))
    add("| kernel | %s |" % r.get("kernel", "?"))
    add("| OS | %s |" % r.get("os", "?"))
    add("| toolchain | %s; %s |" % (r.get("swift", "?"), r.get("build", "`swift build -c release`")))
    add("| servers | PostgreSQL %s (fsync on, synchronous_commit on); Redis %s (`appendonly yes`, `appendfsync everysec`, as in production) |" % (
        r.get("postgres_version", "?"), r.get("redis_version", "?")))
    add("| load tools | %s; %s; %s; `ops/lib/bench_post.c` (%s, epoll, keep-alive HTTP/1.1) |" % (
        r.get("wrk_version", "wrk"), r.get("redis_benchmark_version", "redis-benchmark"), r.get("pgbench_version", "pgbench"),
        r.get("cc_version", "cc")))
    add("| Tollgate settings | defaults, except `TOLLGATE_RATE_LIMIT_PER_S=0` (limit off), the emulator's URLs and "
        "`TOLLGATE_WORKER_CONCURRENCY=%s` (default 256; sized for 1,000/s by Little's law); PostgreSQL pool %s per API "
        "process and %s per worker (by default one per 16 verifications in flight, at least 16), Redis pool %s per API "
        "process and %s per worker, as each process logged them when it started; log level info, JSON to a file |" % (
            r.get("worker_concurrency", "256"), r.get("db_pool") or "?", r.get("worker_db_pool") or "?",
            r.get("redis_pool") or "?", r.get("worker_redis_pool") or "?"))
    add("| run time | %s s after the build (bound: %s s)%s |" % (
        r.get("run_seconds", "?"), r.get("timeout_seconds", "?"),
        "; the build took %s s before it" % r["build_seconds"] if r.get("build_seconds") else ""))
    busy = number(r, "background_busy")
    add("| other load before the run | %s cores busy over 2 s before anything of the run started (load average %s)%s |" % (
        fmt(busy, 2), r.get("loadavg", "?"),
        "; **the machine was not quiet: every figure is depressed**" if busy is not None and busy >= 0.2 else ""))
    add("")
    add("## Targets (issue #6)")
    add("")
    add("| target | measured | verdict |")
    add("| --- | --- | --- |")
    acc_ratio = ratio(accept, trivial)
    add("| accept ≥ 0.35 × the trivial route | %s req/s = %s × %s req/s | %s |" % (
        fmt(accept), fmt(acc_ratio, 2), fmt(trivial), verdict(acc_ratio is not None and acc_ratio >= 0.35)))
    add("| accept p99 ≤ 15 ms | %s ms | %s |" % (fmt(accept_p99 / 1000 if accept_p99 else None, 2),
                                                verdict(accept_p99 is not None and accept_p99 <= 15000)))
    with_ratio, without_ratio = ratio(access_with, trivial), ratio(access_without, trivial)
    add("| access status ≥ 0.5 × the trivial route (customers with access) | %s req/s = %s × | %s |" % (
        fmt(access_with), fmt(with_ratio, 2), verdict(with_ratio is not None and with_ratio >= 0.5)))
    add("| access status ≥ 0.5 × the trivial route (customers without access) | %s req/s = %s × | %s |" % (
        fmt(access_without), fmt(without_ratio, 2), verdict(without_ratio is not None and without_ratio >= 0.5)))
    add("| fulfilment ≥ 1,000 receipts/s, one worker, Apple latency %s ms | %s receipts/s | %s |" % (
        fmt(apple_ms), fmt(drain1), verdict(drain1 is not None and drain1 >= 1000)))
    limit = apple_ms + 30
    add("| accepted → granted p50 ≤ Apple latency + 30 ms = %s ms (one worker, at half its rate) | %s ms | %s |" % (
        fmt(limit), fmt(lat1), verdict(lat1 is not None and lat1 <= limit and number(r, "latency1.not_granted", 1) == 0)))
    add("| accepted → granted p50 ≤ %s ms (two workers, at half their rate) | %s ms | %s |" % (
        fmt(limit), fmt(lat2), verdict(lat2 is not None and lat2 <= limit and number(r, "latency2.not_granted", 1) == 0)))
    add("| API peak RSS ≤ 150 MB | %s MB | %s |" % (fmt(api_rss, 1), verdict(api_rss is not None and api_rss <= 150)))
    add("| worker peak RSS ≤ 250 MB | %s MB | %s |" % (fmt(worker_rss, 1), verdict(worker_rss is not None and 0 < worker_rss <= 250)))
    add("")

    add("## References (same run, same machine)")
    add("")
    add("| reference | what | result |")
    add("| --- | --- | --- |")
    add("| trivial route | `wrk -t2 -c64` on `GET /health/live` of the same API process | %s req/s, p50 %s ms, p99 %s ms |" % (
        fmt(trivial), fmt(number(r, "ref_trivial.p50_us", 0) / 1000, 2), fmt(number(r, "ref_trivial.p99_us", 0) / 1000, 2)))
    add("| Redis XADD | `redis-benchmark -c 64 -P 1` (no pipelining), the same Redis server (AOF everysec) | %s ops/s |" % (
        fmt(number(r, "ref_redis.rps"))))
    add("| PostgreSQL grant | `pgbench -c %s` running the SQL of one grant transaction (advisory locks of the purchase and the customer, claim, ledger upsert, "
        "entitlement read and upsert, ledger update; `ops/lib/bench_grant.sql`), the same server | %s transactions/s, mean %s ms |" % (
            r.get("ref_pg.clients", "16"), fmt(number(r, "ref_pg.tps")), fmt(number(r, "ref_pg.latency_ms"), 2)))
    add("")

    add("## Tollgate")
    add("")
    add("| measurement | result | ratio to its reference |")
    add("| --- | --- | --- |")
    add("| accept: `POST /apple/payment`, a distinct valid receipt per request, `wrk -t2 -c64`, no worker running | "
        "%s req/s, p50 %s ms, p99 %s ms; %s jobs created in Redis for %s requests, %s non-200 | %s × trivial route; %s × Redis XADD |" % (
            fmt(accept), fmt(number(r, "accept.p50_us", 0) / 1000, 2), fmt(number(r, "accept.p99_us", 0) / 1000, 2),
            fmt(number(r, "accept.jobs_created")), fmt(number(r, "accept.requests")), fmt(number(r, "accept.errors_status")),
            fmt(acc_ratio, 2), fmt(ratio(accept, number(r, "ref_redis.rps")), 2)))
    for key, label in (("access_with", "with access (granted earlier in the run)"), ("access_without", "without access (never bought anything)")):
        hits = delta(r, key + ".cache_after.hits", key + ".cache_before.hits")
        misses = delta(r, key + ".cache_after.misses", key + ".cache_before.misses")
        add("| access status: `GET /v1/access-status`, %s random customers %s, `wrk -t2 -c64` | %s req/s, p50 %s ms, p99 %s ms, %s non-200; "
            "access cache: %s hits, %s misses (warm-up excluded) | %s × trivial route |" % (
            fmt(number(r, "drain1.granted")), label, fmt(number(r, key + ".rps")), fmt(number(r, key + ".p50_us", 0) / 1000, 2),
            fmt(number(r, key + ".p99_us", 0) / 1000, 2), fmt(number(r, key + ".errors_status")), fmt(hits), fmt(misses),
            fmt(ratio(number(r, key + ".rps"), trivial), 2)))
    for n, key in ((1, "1"), (2, "2")):
        add("| fulfilment, %d worker%s: backlog of %s receipts, Apple latency %s ms | %s receipts/s granted (first → last grant, "
            "counted in PostgreSQL); %s receipts/s including the worker's start; %s granted in %s s | %s × PostgreSQL grant reference |" % (
                n, "" if n == 1 else "s", fmt(number(r, "drain%s.backlog" % key)), fmt(apple_ms), fmt(number(r, "drain%s.rate" % key)),
                fmt(number(r, "drain%s.rate_from_start" % key)), fmt(number(r, "drain%s.granted" % key)),
                fmt(number(r, "drain%s.seconds" % key), 1), fmt(ratio(number(r, "drain%s.rate" % key), number(r, "ref_pg.tps")), 2)))
        add("| accepted → granted, %d worker%s, open-loop load at %s receipts/s (half the rate above) for %s s (send lag p99 %s ms; "
            "answered at %s/s) | "
            "p50 %s ms, p90 %s ms, p99 %s ms, max %s ms (%s jobs, %s); as seen by the client from its 200: p50 %s ms, p99 %s ms | "
            "p50 − Apple latency = %s ms |" % (
                n, "" if n == 1 else "s", fmt(number(r, "latency%s_load.target_rps" % key)), fmt(number(r, "latency_seconds")),
                fmt(number(r, "latency%s_load.send_lag_p99_ms" % key), 1), fmt(number(r, "latency%s_load.achieved_rps" % key)),
                fmt(number(r, "latency%s.api_p50_ms" % key)), fmt(number(r, "latency%s.api_p90_ms" % key)),
                fmt(number(r, "latency%s.api_p99_ms" % key)), fmt(number(r, "latency%s.api_max_ms" % key)),
                fmt(number(r, "latency%s.jobs" % key)), r.get("latency%s.statuses" % key, "?"),
                fmt(number(r, "latency%s.client_p50_ms" % key)), fmt(number(r, "latency%s.client_p99_ms" % key)),
                fmt((number(r, "latency%s.api_p50_ms" % key) or 0) - apple_ms)))
        means = step_means(r, "latency%s" % key)
        if means:
            add("| where that time went, %d worker%s: mean per job over the same load, from the workers' step timers "
                "(`tollgate_job_step_seconds`, Apple's call, accepted → granted) | %s | |" % (n, "" if n == 1 else "s", means))
    add("| scaling: two workers / one worker | %s × | |" % fmt(ratio(drain2, drain1), 2))
    add("| memory: peak RSS (`VmHWM`) | API %s MB (over every phase); worker %s MB (one-worker phases), %s MB and %s MB (two-worker phases); emulator %s MB | |" % (
        fmt(api_rss, 1), fmt(number(r, "rss.worker1_mb"), 1), fmt(number(r, "rss.worker2a_mb"), 1),
        fmt(number(r, "rss.worker2b_mb"), 1), fmt(number(r, "rss.emulator_mb"), 1)))
    add("| memory: Redis (`used_memory`, its buffers included) per job of the one-worker backlog, above what it held before | %s bytes waiting (receipt, status, keys, entry); %s bytes once all were granted (status, dedup key, claim: kept for the retention) | |" % (
        fmt(number(r, "redis.queued_bytes_per_job")), fmt(number(r, "redis.granted_bytes_per_job"))))
    add("")

    rows = cpu_table(args.cpu, args.loadgen)
    if rows:
        names = []
        for _phase, _seconds, _busy, named in rows:
            for name in named:
                if name not in names:
                    names.append(name)
        add("## Where the CPU went (cores used, of %s)" % r.get("nproc", "?"))
        add("")
        add("From `/proc/PID/stat` (user + system time) at the start and end of each phase; PostgreSQL counts the")
        add("postmaster and all its backends; \"load generator\" is the CPU time of the phase's wrk, pgbench,")
        add("redis-benchmark or bench_post (and, after the latency loads, the script that reads their jobs); \"rest\" is the machine's busy time minus all of those: the script's own")
        add("polling and anything else that ran on the machine at the time.")
        add("")
        add("| phase | seconds | machine busy | " + " | ".join(names) + " | rest |")
        add("| --- | --- | --- | " + " | ".join("---" for _ in names) + " | --- |")
        for phase, seconds, busy, named in rows:
            rest = busy - sum(named.values())
            add("| %s | %.1f | %.2f | %s | %.2f |" % (phase, seconds, busy, " | ".join(
                "%.2f" % named[n] if n in named else "" for n in names), max(0.0, rest)))
        add("")

    # The hand-kept profile of the targets missed (ops/bench-profile.md), copied into every report.
    profile = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench-profile.md")
    if os.path.exists(profile):
        with open(profile, encoding="utf-8") as source:
            for line in source:
                add(line.rstrip("\n"))
        add("")
    add("## How each figure is measured")
    add("")
    add("- **Requests/s and latency percentiles** come from wrk's own summary (`-t2 -c64`, %s s after a %s s warm-up "
        "of the same kind, `--latency`); the Lua script `ops/lib/bench_wrk.lua` builds each request. A payment request "
        "carries a distinct customer and a distinct 18-digit Apple transaction id in a valid emulator scenario receipt; "
        "the run checks afterwards that Redis holds at least one new job per request answered 200 (a few more: wrk "
        "does not count the requests still in flight when it stops)." % (
            r.get("wrk_seconds", "?"), r.get("warmup_seconds", "?")))
    add("- **Accept** runs with no worker, so the figure is the API and Redis alone; the jobs it creates are then "
        "deleted from Redis (`FLUSHDB`) so that they do not become the fulfilment backlog. The per-publisher rate limit "
        "is off (`TOLLGATE_RATE_LIMIT_PER_S=0`), as one publisher posts everything here: with the default (1,000/s) "
        "the rest would be 429, and each accepted or access-status request would also run the limiter's Redis script.")
    add("- **Access status** polls each customer far more often than an app does (about twice a second against every "
        "5 s). Its warm-up asks every customer once, in order (one wrk thread, up to four warm-ups of the same "
        "length until all were asked), so the measured phase, which asks at random, is access-cache hits; its row "
        "counts them.")
    add("- **Fulfilment**: with the workers stopped, %s receipts (distinct customers) are posted; the emulator's latency "
        "is set to %s ms through `POST /emulator/config`; the worker(s) start; the rate is the number of ledger rows "
        "(`transactions`) that reached `fulfilled` divided by the time between the first and the last `fulfilled_at` "
        "(PostgreSQL's clock). The figure \"including the worker's start\" divides by the time from the worker's launch "
        "to the last grant." % (r.get("backlog", "?"), fmt(apple_ms)))
    add("- **Accepted → granted**: an open-loop client (`ops/lib/bench_post.c`, `paced`) posts at half the measured "
        "drain rate, on schedule whatever the answers' latency. *Accepted* is the `acceptedAt` the API stamps on the job "
        "just before the atomic enqueue whose success it answers with 200 (so the figure includes the enqueue round trip "
        "and overstates slightly); *granted* is the `updatedAt` the worker writes in the same Redis script that turns the "
        "job's status to `granted`, after the PostgreSQL commit: the first moment `GET /v1/receipts/{jobId}` can read "
        "`granted`. Both stamps are the queue's clock in milliseconds: Redis' `TIME` as each process last read it, "
        "carried by its monotonic clock, so the API's and the worker's readings may differ by half a round trip of "
        "their best reading. The client's view (from the moment it read the 200, by this machine's wall clock, to "
        "the same granted stamp) is given alongside.")
    add("- **Memory**: `VmHWM` (peak resident set) from `/proc/PID/status` of each process just before it is stopped; "
        "the API process serves every phase (accept, fills, open-loop loads, access status).")
    add("- **References**: the trivial route is the same API process; XADD runs on the same Redis server (a "
        "separate database, flushed after); pgbench runs `ops/lib/bench_grant.sql` with `-M extended` (parameters, "
        "as the worker's libpq client) on a copy of the schema in a separate database of the same PostgreSQL server.")
    add("")
    add("## Commands of this run")
    add("")
    add("Ports were chosen free at run time; credentials were passed in environment variables.")
    add("")
    add("```sh")
    add("bash ops/bench%s" % (" --quick" if quick else ""))
    if os.path.exists(args.commands):
        with open(args.commands, encoding="utf-8") as source:
            for line in source:
                add(line.rstrip("\n"))
    add("```")
    add("")
    with open(args.out, "w", encoding="utf-8") as out:
        out.write("\n".join(lines))
    log("wrote %s" % args.out)
    return 0


# ------------------------------------------------------------------ main

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("latency")
    p.add_argument("--redis-port", type=int, required=True)
    p.add_argument("--prefix", default="tollgate")
    p.add_argument("--accepted", required=True)
    p.add_argument("--deadline-seconds", type=float, default=60)
    p.add_argument("--results", required=True)
    p.add_argument("--key", required=True)

    p = sub.add_parser("steps")
    p.add_argument("--url", action="append", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--key", required=True)

    p = sub.add_parser("cpu")
    p.add_argument("--snapshot", required=True)
    p.add_argument("--with-children", default="")
    p.add_argument("--label", required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("report")
    p.add_argument("--results", required=True)
    p.add_argument("--cpu", required=True)
    p.add_argument("--loadgen", default="")
    p.add_argument("--commands", required=True)
    p.add_argument("--out", required=True)

    args = parser.parse_args()
    if args.command == "latency":
        return latency(args)
    if args.command == "steps":
        return steps(args)
    if args.command == "cpu":
        return cpu(args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
