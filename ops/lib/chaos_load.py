#!/usr/bin/env python3
"""Load generator and bookkeeping for ops/chaos (python3 standard library only).

  chaos_load.py load    --api URL --out DIR --rate R --seconds S ...   steady receipts, accepted jobs to DIR/accepted.tsv
  chaos_load.py drain   --redis-port P --accepted FILE --out FILE ...  poll Redis until every accepted job is final
  chaos_load.py report  --accepted FILE --statuses FILE ...            the final line; exit 1 on lost/duplicated/nothing

Publisher credentials come from the environment (TOLLGATE_CHAOS_PUBLISHER_TOKEN and
TOLLGATE_CHAOS_BASIC_AUTH, the base64 of user:password), never from the command line.
"""

import argparse
import base64
import collections
import concurrent.futures
import http.client
import json
import os
import random
import secrets
import signal
import socket
import sys
import threading
import time

from resp import Redis, RedisError  # ops/lib is on sys.path: the scripts run from there

FINAL = ("granted", "rejected", "failed")


LOG_FILE = None


def log(message):
    line = "==> %s\n" % message
    sys.stdout.write(line)
    sys.stdout.flush()
    if LOG_FILE is not None:
        LOG_FILE.write(line)
        LOG_FILE.flush()


# ------------------------------------------------------------------ load

class Load:
    """Posts one receipt per distinct customer at a steady rate; retries 503, 429 and connection errors."""

    def __init__(self, args):
        self.args = args
        self.host, self.port = parse_http_url(args.api)
        self.token = os.environ.get("TOLLGATE_CHAOS_PUBLISHER_TOKEN", "")
        self.basic = os.environ.get("TOLLGATE_CHAOS_BASIC_AUTH", "")
        if not self.token or not self.basic:
            sys.exit("chaos_load: TOLLGATE_CHAOS_PUBLISHER_TOKEN and TOLLGATE_CHAOS_BASIC_AUTH must be set")
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.local = threading.local()
        self.counts = collections.Counter()
        self.retry_causes = collections.Counter()
        self.error_codes = collections.Counter()
        self.in_flight = 0
        self.latencies = []
        self.used_transactions = set()
        os.makedirs(args.out, exist_ok=True)
        self.accepted_file = open(os.path.join(args.out, "accepted.tsv"), "a", encoding="utf-8")
        self.errors_file = open(os.path.join(args.out, "load-errors.tsv"), "a", encoding="utf-8")

    def transaction_id(self):
        with self.lock:
            while True:
                candidate = str(secrets.randbelow(9 * 10**15) + 10**15)
                if candidate not in self.used_transactions:
                    self.used_transactions.add(candidate)
                    return candidate

    def body(self, number, transaction):
        scenario = {
            "bundleId": self.args.bundle,
            "inApp": [{"productId": self.args.product, "transactionId": transaction}],
        }
        receipt = base64.b64encode(json.dumps(scenario, separators=(",", ":")).encode()).decode()
        return json.dumps({
            "customerEmail": "c%d@chaos.example" % number,
            "offerId": self.args.offer,
            "receipt": {"transactionId": transaction, "receiptData": receipt},
            "appType": "ios",
            "ipAddress": "127.0.0.1",
        }).encode()

    def connection(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.args.request_timeout)
            self.local.conn = conn
        return conn

    def drop_connection(self):
        conn = getattr(self.local, "conn", None)
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
        self.local.conn = None

    def post(self, body):
        """One attempt: (status, headers, body text) or raises OSError/HTTPException."""
        conn = self.connection()
        try:
            conn.request("POST", "/apple/payment", body=body, headers={
                "Content-Type": "application/json",
                "X-Publisher-Token": self.token,
                "Authorization": "Basic " + self.basic,
            })
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
            if response.getheader("Connection", "").lower() == "close":
                self.drop_connection()
            return response.status, response.getheader("Retry-After"), text
        except (OSError, http.client.HTTPException):
            self.drop_connection()
            raise

    def submit(self, number):
        transaction = self.transaction_id()
        customer = "c%d@chaos.example" % number
        body = self.body(number, transaction)
        first = time.monotonic()
        give_up_at = first + self.args.retry_window
        attempt = 0
        with self.lock:
            self.in_flight += 1
        try:
            while True:
                attempt += 1
                cause = None
                retry_after = None
                try:
                    status, retry_after, text = self.post(body)
                except socket.timeout:
                    cause = "timeout"
                except (OSError, http.client.HTTPException):
                    cause = "connection"
                if cause is None:
                    if status == 200:
                        try:
                            job = json.loads(text)["jobId"]
                        except (ValueError, KeyError, TypeError):
                            job = None
                        if job:
                            with self.lock:
                                self.accepted_file.write("%s\t%s\t%s\n" % (job, transaction, customer))
                                self.accepted_file.flush()
                                self.counts["accepted"] += 1
                                if attempt > 1:
                                    self.counts["accepted_after_retry"] += 1
                                self.latencies.append(time.monotonic() - first)
                            return
                        cause = None
                        status = "200-without-jobId"
                    elif status in (503, 429):
                        cause = "http%d" % status
                    if cause is None:
                        with self.lock:
                            self.counts["errors"] += 1
                            self.error_codes[str(status)] += 1
                            self.errors_file.write("%s\t%s\t%s\t%s\n" % (status, transaction, customer, text[:300].replace("\n", " ")))
                            self.errors_file.flush()
                        return
                with self.lock:
                    self.counts["retries"] += 1
                    self.retry_causes[cause] += 1
                delay = min(2.0, 0.1 * (2 ** min(attempt, 5))) * random.uniform(0.5, 1.0)
                if retry_after and retry_after.isdigit():
                    delay = max(delay, min(2.0, float(retry_after)))
                if self.stop.is_set() or time.monotonic() + delay > give_up_at:
                    with self.lock:
                        self.counts["gave_up"] += 1
                        self.errors_file.write("gave-up\t%s\t%s\tlast: %s after %d attempts\n" % (transaction, customer, cause, attempt))
                        self.errors_file.flush()
                    return
                time.sleep(delay)
        finally:
            with self.lock:
                self.in_flight -= 1

    def progress(self, started, sent):
        with self.lock:
            log("load: %3ds sent=%d accepted=%d in_flight=%d retries=%d (%s) errors=%d gave_up=%d" % (
                time.monotonic() - started, sent, self.counts["accepted"], self.in_flight, self.counts["retries"],
                ",".join("%s:%d" % kv for kv in sorted(self.retry_causes.items())) or "-",
                self.counts["errors"], self.counts["gave_up"]))

    def run(self):
        total = int(self.args.rate * self.args.seconds)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.args.threads)
        started = time.monotonic()
        next_progress = started + 10
        sent = 0
        for index in range(total):
            if self.stop.is_set():
                break
            due = started + index / self.args.rate
            while True:
                now = time.monotonic()
                if now >= next_progress:
                    self.progress(started, sent)
                    next_progress += 10
                if now >= due or self.stop.is_set():
                    break
                time.sleep(min(due - now, 0.05))
            if self.stop.is_set():
                break
            pool.submit(self.submit, self.args.first_customer + index)
            sent += 1
        log("load: stopped sending after %.1fs (%d receipts); waiting for %d in flight" % (
            time.monotonic() - started, sent, self.in_flight))
        pool.shutdown(wait=True)
        self.progress(started, sent)
        self.accepted_file.close()
        self.errors_file.close()
        latencies = sorted(self.latencies)

        def pct(p):
            return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000) if latencies else None

        summary = {
            "sent": sent,
            "planned": total,
            "accepted": self.counts["accepted"],
            "accepted_after_retry": self.counts["accepted_after_retry"],
            "retries": self.counts["retries"],
            "retry_causes": dict(self.retry_causes),
            "errors": self.counts["errors"],
            "error_codes": dict(self.error_codes),
            "gave_up": self.counts["gave_up"],
            "accept_ms_p50": pct(0.50),
            "accept_ms_p99": pct(0.99),
            "accept_ms_max": round(latencies[-1] * 1000) if latencies else None,
            "seconds": round(time.monotonic() - started, 1),
        }
        with open(os.path.join(self.args.out, "load-summary.json"), "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=2, sort_keys=True)
        return 0


def parse_http_url(url):
    if not url.startswith("http://"):
        sys.exit("chaos_load: --api must be an http:// URL")
    hostport = url[len("http://"):].rstrip("/")
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def cmd_load(args):
    global LOG_FILE
    if args.log:
        LOG_FILE = open(args.log, "a", encoding="utf-8")
    load = Load(args)

    def on_signal(signum, _frame):
        log("load: SIG%s, stopping" % signal.Signals(signum).name[3:])
        load.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return load.run()


# ----------------------------------------------------------------- redis

def read_accepted(path):
    jobs = collections.OrderedDict()
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3 and parts[0]:
                jobs[parts[0]] = (parts[1], parts[2])
    return jobs


def fetch_statuses(port, prefix, job_ids):
    client = Redis(port)
    try:
        commands = [("HMGET", "%s:{q}:job:%s" % (prefix, job), "status", "reason", "attempts") for job in job_ids]
        replies = client.pipeline(commands)
    finally:
        client.close()
    statuses = {}
    for job, reply in zip(job_ids, replies):
        if isinstance(reply, RedisError):
            raise reply
        status, reason, attempts = reply
        statuses[job] = (status or "", reason or "", attempts or "")
    return statuses


def cmd_drain(args):
    jobs = read_accepted(args.accepted)
    job_ids = list(jobs)
    started = time.monotonic()
    deadline = started + args.deadline_seconds
    next_progress = started
    statuses = {}
    last_error = None
    while True:
        try:
            statuses = fetch_statuses(args.redis_port, args.prefix, job_ids)
            last_error = None
        except (OSError, RedisError, ConnectionError) as error:
            last_error = error
        counts = collections.Counter(s[0] or "missing" for s in statuses.values())
        final = sum(counts[s] for s in FINAL)
        done = bool(statuses) and final == len(job_ids) or not job_ids
        now = time.monotonic()
        if done or now >= next_progress or now >= deadline:
            detail = " ".join("%s=%d" % kv for kv in sorted(counts.items()))
            log("drain: %3ds final %d/%d (%s)%s" % (now - started, final, len(job_ids), detail or "-",
                                                    " redis error: %s" % last_error if last_error else ""))
            next_progress = now + 10
        if done or now >= deadline:
            break
        time.sleep(args.poll_seconds)
    with open(args.out, "w", encoding="utf-8") as handle:
        for job in job_ids:
            status, reason, attempts = statuses.get(job, ("", "", ""))
            handle.write("%s\t%s\t%s\t%s\n" % (job, status, reason, attempts))
    if not done:
        log("drain: deadline of %ds reached with %d of %d jobs not final" % (
            args.deadline_seconds, len(job_ids) - final, len(job_ids)))
    return 0


# ---------------------------------------------------------------- report

def cmd_report(args):
    jobs = read_accepted(args.accepted)
    statuses = {}
    with open(args.statuses, encoding="utf-8") as handle:
        for line in handle:
            job, status, reason, attempts = (line.rstrip("\n").split("\t") + ["", "", ""])[:4]
            statuses[job] = (status, reason, attempts)

    # Ledger: one row per (transaction row): transaction_id, customer, state, job_id, credits, reversals, coins.
    ledger = collections.defaultdict(list)
    with open(args.ledger, encoding="utf-8") as handle:
        for line in handle:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 7:
                continue
            transaction, customer, state, job, credits, reversals, coins = parts
            ledger[transaction].append({
                "customer": customer, "state": state, "job": job,
                "credits": int(credits), "reversals": int(reversals), "coins": int(coins),
            })
    balances = {}
    with open(args.balances, encoding="utf-8") as handle:
        for line in handle:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 2:
                balances[parts[0]] = int(parts[1])

    counts = collections.Counter()
    reasons = collections.Counter()
    lost = []
    attempts_total = 0
    attempts_max = 0
    accepted_transactions = set()
    for job, (transaction, customer) in jobs.items():
        accepted_transactions.add(transaction)
        status, reason, attempts = statuses.get(job, ("", "", ""))
        if attempts.isdigit():
            attempts_total += int(attempts)
            attempts_max = max(attempts_max, int(attempts))
        if status in FINAL:
            counts[status] += 1
            if status != "granted":
                reasons["%s:%s" % (status, reason or "?")] += 1
        else:
            why = "status vanished from Redis" if not status else "not final (%s)" % status
            lost.append((job, transaction, customer, status or "-", reason, attempts, why))
            continue
        if status == "granted":
            rows = ledger.get(transaction, [])
            good = [r for r in rows if r["state"] == "fulfilled" and r["credits"] >= 1 and r["customer"] == customer]
            if not good:
                if not rows:
                    why = "granted but no ledger row"
                else:
                    why = "granted but ledger says %s" % ",".join(
                        "%s/%s/credits=%d" % (r["state"], r["customer"], r["credits"]) for r in rows)
                lost.append((job, transaction, customer, status, reason, attempts, why))

    duplicated = []
    for customer, coins in sorted(balances.items()):
        if coins > args.coins:
            duplicated.append(("customer", customer, "balance %d > %d" % (coins, args.coins)))
    for transaction, rows in sorted(ledger.items()):
        credits = sum(r["credits"] for r in rows)
        if credits > 1:
            duplicated.append(("transaction", transaction, "%d credits in %d ledger rows" % (credits, len(rows))))

    # Not counted in the line, but worth a look.
    credited_not_granted = []
    for job, (transaction, customer) in jobs.items():
        status = statuses.get(job, ("",))[0]
        if status != "granted" and any(r["credits"] >= 1 for r in ledger.get(transaction, [])):
            credited_not_granted.append((job, transaction, customer, status or "-"))
    unknown_credits = sorted(t for t, rows in ledger.items()
                             if t not in accepted_transactions and any(r["credits"] for r in rows))

    with open(args.lost_out, "w", encoding="utf-8") as handle:
        for row in lost:
            handle.write("\t".join(row) + "\n")
    with open(args.duplicated_out, "w", encoding="utf-8") as handle:
        for row in duplicated:
            handle.write("\t".join(row) + "\n")

    print("accepted=%d granted=%d rejected=%d failed=%d lost=%d duplicated=%d" % (
        len(jobs), counts["granted"], counts["rejected"], counts["failed"], len(lost), len(duplicated)))
    sys.stdout.flush()
    log("jobs: attempts total=%d max=%d; wallet: %d customers credited, %d coins; ledger rows %d" % (
        attempts_total, attempts_max, len(balances), sum(balances.values()), sum(len(r) for r in ledger.values())))
    if reasons:
        log("not granted: %s" % ", ".join("%s=%d" % kv for kv in sorted(reasons.items())))
    if credited_not_granted:
        log("warning: %d job(s) have a wallet credit but status not granted, e.g. %s" % (
            len(credited_not_granted), " ".join("/".join(r) for r in credited_not_granted[:5])))
    if unknown_credits:
        log("note: %d credited transaction(s) were never reported accepted to the load generator "
            "(a request whose answer was lost, then given up), e.g. %s" % (len(unknown_credits), " ".join(unknown_credits[:5])))
    for row in lost[:20]:
        log("lost: job %s transaction %s customer %s status=%s reason=%s attempts=%s: %s" % row)
    for row in duplicated[:20]:
        log("duplicated: %s %s: %s" % row)
    if not jobs:
        log("error: nothing was accepted")
        return 1
    return 1 if lost or duplicated else 0


# ------------------------------------------------------------------ main

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    load = sub.add_parser("load")
    load.add_argument("--api", required=True)
    load.add_argument("--out", required=True)
    load.add_argument("--rate", type=float, required=True)
    load.add_argument("--seconds", type=float, required=True)
    load.add_argument("--bundle", required=True)
    load.add_argument("--product", required=True)
    load.add_argument("--offer", required=True)
    load.add_argument("--log", help="also append the progress lines here")
    load.add_argument("--first-customer", type=int, default=1)
    load.add_argument("--threads", type=int, default=128)
    load.add_argument("--request-timeout", type=float, default=10.0)
    load.add_argument("--retry-window", type=float, default=90.0,
                      help="give a receipt up after this many seconds of 503s and connection errors")

    drain = sub.add_parser("drain")
    drain.add_argument("--redis-port", type=int, required=True)
    drain.add_argument("--prefix", default="tollgate")
    drain.add_argument("--accepted", required=True)
    drain.add_argument("--out", required=True)
    drain.add_argument("--deadline-seconds", type=float, required=True)
    drain.add_argument("--poll-seconds", type=float, default=1.0)

    report = sub.add_parser("report")
    report.add_argument("--accepted", required=True)
    report.add_argument("--statuses", required=True)
    report.add_argument("--ledger", required=True)
    report.add_argument("--balances", required=True)
    report.add_argument("--coins", type=int, required=True)
    report.add_argument("--lost-out", required=True)
    report.add_argument("--duplicated-out", required=True)

    args = parser.parse_args()
    return {"load": cmd_load, "drain": cmd_drain, "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
