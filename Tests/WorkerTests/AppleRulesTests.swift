import Foundation
import Logging
import Shared
import Testing
import TestSupport
@testable import Worker

/// Issue #3, table 1: every row of Apple's status classification, through the real worker (queue,
/// fulfiller, processor) against the emulator, asserting the final job record and that nothing was granted.
@Suite("Apple rules: status classification")
struct AppleRulesTests {
    static let bundle = "com.example.rules"
    /// The policy's attempt limit in this suite: above the table's own limits (3 for 21002, 5 for unknown
    /// statuses), so those numbers can only come from the table.
    static let maxAttempts = 7

    /// One row of the table, driven by the scenario's forced `status`.
    struct StatusRow: Sendable, CustomTestStringConvertible {
        var status: Int
        var isRetryable: Bool? = nil
        var retryableKey: String? = nil
        var expected: JobStatus
        var reason: String
        var attempts: Int

        var testDescription: String {
            var text = "\(self.status)"
            if let isRetryable { text += " \(self.retryableKey ?? "is-retryable")=\(isRetryable)" }
            return "\(text) → \(self.expected.rawValue) \(self.reason) after \(self.attempts)"
        }
    }

    static let rows: [StatusRow] = [
        StatusRow(status: 21000, expected: .failed, reason: "internal", attempts: 1),
        StatusRow(status: 21003, expected: .rejected, reason: "invalid_receipt", attempts: 1),
        StatusRow(status: 21010, expected: .rejected, reason: "invalid_receipt", attempts: 1),
        // Alone, believed: nothing says Apple is in an incident (see malformedDuringIncident).
        StatusRow(status: 21002, expected: .rejected, reason: "invalid_receipt", attempts: 3),
        StatusRow(status: 21004, expected: .failed, reason: "shared_secret_mismatch", attempts: 1),
        StatusRow(status: 21005, expected: .failed, reason: "apple_unavailable", attempts: maxAttempts),
        StatusRow(status: 21009, expected: .failed, reason: "apple_unavailable", attempts: maxAttempts),
        StatusRow(status: 21100, isRetryable: true, retryableKey: "is-retryable", expected: .failed, reason: "apple_unavailable", attempts: maxAttempts),
        StatusRow(status: 21150, isRetryable: true, retryableKey: "is_retryable", expected: .failed, reason: "apple_unavailable", attempts: maxAttempts),
        StatusRow(status: 21199, isRetryable: true, retryableKey: "is-retryable", expected: .failed, reason: "apple_unavailable", attempts: maxAttempts),
        StatusRow(status: 21199, isRetryable: true, retryableKey: "is_retryable", expected: .failed, reason: "apple_unavailable", attempts: maxAttempts),
        StatusRow(status: 21199, isRetryable: false, retryableKey: "is-retryable", expected: .failed, reason: "apple_unavailable", attempts: 1),
        StatusRow(status: 21199, isRetryable: false, retryableKey: "is_retryable", expected: .failed, reason: "apple_unavailable", attempts: 1),
        StatusRow(status: 21999, expected: .failed, reason: "apple_unavailable", attempts: 5),
        StatusRow(status: 21001, expected: .failed, reason: "apple_unavailable", attempts: 5),
    ]

    @Test("a forced Apple status ends the job as the table says, after exactly the table's attempts, granting nothing", arguments: rows)
    func statusRow(_ row: StatusRow) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: Self.maxAttempts)) { harness in
            var extra: [String: Any] = ["status": row.status]
            if let isRetryable = row.isRetryable { extra["isRetryable"] = isRetryable }
            if let key = row.retryableKey { extra["retryableKey"] = key }
            let (_, job) = try await Self.submitPremium(harness, extra: extra)

            if row.attempts > 1 {
                try await harness.work()
                let first = try await harness.record(job)
                #expect(first.status == .retrying, "a retried status parks the job after the first attempt")
                #expect(first.attempts == 1)
                #expect(first.nextAttemptAtMilliseconds != nil)
            }
            let record = try await harness.workUntilFinal(job)
            #expect(record.status == row.expected)
            #expect(record.reason == row.reason)
            #expect(record.attempts == row.attempts)
            let deadLetters = try await harness.queue.deadLetters(limit: 10).deadLetters
            if row.expected == .failed {
                #expect(deadLetters.map(\.jobId) == [job], "a failed job is dead-lettered")
                #expect(deadLetters.first?.reason == row.reason)
            } else {
                #expect(deadLetters.isEmpty, "a rejected job is not dead-lettered")
            }
            // One verifyReceipt call per attempt, all at the production URL.
            let stats = try await harness.emulatorStats()
            #expect(stats.production == row.attempts)
            #expect(stats.sandbox == 0)
            try await harness.expectNothingGranted()
            #expect(try await harness.access("PREMIUM").granted == false)
        }
    }

    /// An Apple incident: `outage` 503s, then 21002, which Apple also answers for good receipts in outages,
    /// while Apple verifies other receipts (so the 21002 is about this one).
    struct Incident: Sendable, CustomTestStringConvertible {
        let policyAttempts: Int
        let outage: Int
        let status: JobStatus
        let reason: String
        let attempts: Int
        var testDescription: String { "\(self.outage) 503s, \(self.policyAttempts) attempts allowed: \(self.status.rawValue) \(self.reason)" }
    }

    @Test(
        "21002's three tries count only 21002 answers (timeouts before them do not use them up); out of the policy's attempts first, the job is failed, for an operator to requeue, not rejected",
        arguments: [
            Incident(policyAttempts: 10, outage: 3, status: .rejected, reason: "invalid_receipt", attempts: 6),
            Incident(policyAttempts: 4, outage: 2, status: .failed, reason: "apple_unavailable", attempts: 4),
        ]
    )
    func limitCountsItsOwnAnswers(_ incident: Incident) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: incident.policyAttempts)) { harness in
            try await harness.app(Self.bundle, selling: [.premium])
            #expect(try await harness.purchase(Self.bundle, productId: "premium", offerId: "PREMIUM", email: "other@example.com").status == .granted)
            let record = try await harness.purchase(
                Self.bundle, productId: "premium", offerId: "PREMIUM", extra: ["status": 21002, "fail": ["count": incident.outage, "mode": "http503"]]
            )
            #expect(record.status == incident.status)
            #expect(record.reason == incident.reason)
            #expect(record.attempts == incident.attempts)
            #expect(try await harness.queue.deadLetters(limit: 100).deadLetters.contains { $0.jobId == record.jobId } == (incident.status == .failed))
            #expect(try await harness.access("PREMIUM").granted == false)
        }
    }

    @Test("21002 for several receipts while Apple verifies none is an incident (as on 7-8 Feb 2023): the jobs retry past three 21002s as apple_unavailable and are granted once Apple reads them")
    func malformedDuringIncident() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 10)) { harness in
            try await harness.app(Self.bundle, selling: [.premium])
            var jobs: [String] = []
            for buyer in ["first@example.com", "second@example.com"] {
                let transaction = ScenarioReceipt.transactionId()
                let receipt = ScenarioReceipt.make(
                    bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)],
                    extra: ["fail": ["count": 5, "mode": "status21002"]]
                )
                jobs.append(try await harness.submit(email: buyer, offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
            }
            for job in jobs {
                let record = try await harness.workUntilFinal(job)
                #expect(record.status == .granted)
                #expect(record.attempts == 6)
            }
            #expect(try await harness.access("PREMIUM", email: "first@example.com").granted)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
        }
    }

    @Test(
        "21002 for a share of receipts while Apple verifies others: from one answer in twenty on, an incident (the jobs retry and are granted once Apple reads them); below it, believed",
        arguments: [(40, JobStatus.granted), (100, JobStatus.rejected)]
    )
    func malformedForSomeReceipts(verifiedElsewhere: Int, expected: JobStatus) async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 10)) { harness in
            try await harness.app(Self.bundle, selling: [.premium])
            // Apple reads receipts: this worker's and, counted in Redis, other workers'.
            #expect(try await harness.purchase(Self.bundle, productId: "premium", offerId: "PREMIUM", email: "reader@example.com").status == .granted)
            try await harness.queue.recordAppleVerified(
                .production, count: verifiedElsewhere, now: WallClock.nowMilliseconds(), lifetimeMilliseconds: 3_600_000
            )
            // Four good receipts that Apple answers 21002 three times each: 4 against 41 answers is more
            // than one in twenty, 4 against 101 less.
            var jobs: [String] = []
            for index in 0..<4 {
                let transaction = ScenarioReceipt.transactionId()
                let receipt = ScenarioReceipt.make(
                    bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)],
                    extra: ["fail": ["count": 3, "mode": "status21002"]]
                )
                jobs.append(try await harness.submit(email: "buyer\(index)@example.com", offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
            }
            for job in jobs {
                let record = try await harness.workUntilFinal(job)
                #expect(record.status == expected)
                #expect(record.reason == (expected == .granted ? nil : "invalid_receipt"))
                #expect(record.attempts == (expected == .granted ? 4 : 3))
            }
            #expect(try await harness.access("PREMIUM", email: "buyer0@example.com").granted == (expected == .granted))
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
        }
    }

    @Test("21006: a valid receipt with an expired subscription is rejected expired, reporting the subscription's greatest expiry")
    func expiredSubscription() async throws {
        try await WorkerHarness.rules(Self.bundle, selling: .monthly) { harness in
            let now = Millis.now
            let original = ScenarioReceipt.transactionId()
            // Six periods, every one over, out of order with the newest in the middle.
            let greatest = now - 2 * Millis.day + 123
            let periods = Subscription.periods("monthly", original: original, count: 6, lastEnd: greatest)
            #expect(periods.last?.expiresDateMs != greatest && periods.first?.expiresDateMs != greatest)
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, entries: periods, extra: ["status": 21006])
            let job = try await harness.submit(offerId: "MONTHLY", transactionId: original, receipt: receipt)
            let record = try await harness.workUntilFinal(job)
            #expect(record.status == .rejected)
            #expect(record.reason == "expired")
            #expect(record.attempts == 1)
            #expect(record.expiresAt == Int(greatest / 1000))
            try await harness.expectNothingGranted()
            #expect(try await harness.access("MONTHLY").granted == false)
        }
    }

    @Test("21007: a sandbox receipt is asked again at the sandbox URL and granted from the sandbox")
    func sandboxGranted() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            try await harness.app(Self.bundle, allowSandbox: true, selling: [.premium])
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)], environment: "Sandbox"
            )
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
            #expect(record.status == .granted)
            #expect(record.reason == nil)
            #expect(record.attempts == 1)
            #expect(record.environment == "Sandbox")
            #expect(try await harness.emulatorStats() == .init(production: 1, sandbox: 1, failuresInjected: 0))
            let row = try #require(try await harness.ledgerRow(transaction))
            #expect(row.state == "fulfilled")
            #expect(row.environment == "Sandbox")
            #expect(try await harness.access("PREMIUM") == (true, nil))
        }
    }

    @Test("21007 for an app that does not allow sandbox: rejected sandbox_not_allowed, nothing granted")
    func sandboxNotAllowed() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry()) { harness in
            try await harness.app(Self.bundle, allowSandbox: false, selling: [.premium])
            let transaction = ScenarioReceipt.transactionId()
            let receipt = ScenarioReceipt.make(
                bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)], environment: "Sandbox"
            )
            let record = try await harness.workUntilFinal(try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
            #expect(record.status == .rejected)
            #expect(record.reason == "sandbox_not_allowed")
            #expect(record.attempts == 1)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
            try await harness.expectNothingGranted()
            #expect(try await harness.access("PREMIUM").granted == false)
        }
    }

    @Test("21008: the worker asks the production URL again, never the sandbox, and grants nothing on that answer")
    func productionRedirect() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 2)) { harness in
            // The emulator can only answer 21008 at the production route by a forced status, so every
            // production call answers 21008: the worker must follow it to production each time.
            let (_, job) = try await Self.submitPremium(harness, extra: ["status": 21008])
            try await harness.work()
            let afterFirst = try await harness.emulatorStats()
            #expect(afterFirst.production >= 2, "a 21008 answer is followed by another call to the production URL")
            #expect(afterFirst.sandbox == 0)
            let record = try await harness.workUntilFinal(job)
            #expect(record.status != .granted)
            #expect(try await harness.emulatorStats().sandbox == 0)
            try await harness.expectNothingGranted()
        }
    }

    @Test("a second 21002 is asked again no sooner than a quarter of the largest delay, so the three tries span more than a short incident; the first at once")
    func malformedAnswerSpaced() async throws {
        let policy = RetryPolicy(baseMilliseconds: 5, maxDelayMilliseconds: 2000, maxAttempts: 7, maxAgeSeconds: 3600)
        try await WorkerHarness.with(retry: policy) { harness in
            let (_, job) = try await Self.submitPremium(harness, extra: ["status": 21002])
            // Another customer's good receipt, verified in the same round: Apple is reading receipts, so the
            // 21002s are about this one.
            let other = ScenarioReceipt.transactionId()
            let good = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: other)])
            let goodJob = try await harness.submit(email: "other@example.com", offerId: "PREMIUM", transactionId: other, receipt: good)
            let started = harness.queue.clock.nowMilliseconds()
            try await harness.work()
            // Parked before this instant, however long the round took on a busy machine (read on the queue's
            // clock, which the due time is on).
            let parked = harness.queue.clock.nowMilliseconds()
            #expect(try await harness.record(goodJob).status == .granted)
            let first = try await harness.record(job)
            #expect(first.status == .retrying)
            let due = first.nextAttemptAtMilliseconds ?? .max
            #expect(due >= started && due - parked < 500, "one 21002 is asked again as soon as any failure")

            let (second, asked) = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(5), "the second attempt") {
                let asked = harness.queue.clock.nowMilliseconds()
                try await harness.queue.promoteDue(now: asked)
                try await harness.work()
                let record = try await harness.record(job)
                return record.attempts >= 2 ? (record, asked) : nil
            }
            #expect(second.status == .retrying)
            #expect((second.nextAttemptAtMilliseconds ?? 0) - asked >= 500, "the second 21002 is asked again \((second.nextAttemptAtMilliseconds ?? 0) - asked) ms later")
            let record = try await harness.workUntilFinal(job)
            #expect(record.status == .rejected)
            #expect(record.reason == "invalid_receipt")
            #expect(record.attempts == 3)
        }
    }

    /// A transport failure (fail mode) on the first call.
    enum Transport: String, CaseIterable, Sendable {
        case http429, http500, http503, redirect, html, empty, truncated, malformed, oversized, timeout
    }

    @Test("HTTP 429/5xx, a redirect (not followed), a body that is not Apple's JSON, or a timeout on the first call: retrying, then granted", arguments: Transport.allCases)
    func transportFailure(_ mode: Transport) async throws {
        // A shorter Apple timeout, so the emulator's held request (`timeout` mode, 30 s) fails the call sooner;
        // 3 s, so the calls after it (each bound by it too) beat it even on a loaded machine.
        let timeout = mode == .timeout ? 3000 : 30_000
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(), appleTimeoutMilliseconds: timeout) { harness in
            let (transaction, job) = try await Self.submitPremium(harness, extra: ["fail": ["count": 1, "mode": mode.rawValue]])
            try await harness.work()
            let first = try await harness.record(job)
            #expect(first.status == .retrying)
            #expect(first.attempts == 1)
            #expect(first.reason == "apple_unavailable")
            #expect(first.nextAttemptAtMilliseconds != nil)
            #expect(try await harness.count("transactions") == 0, "nothing is recorded from a failed call")

            let record = try await harness.workUntilFinal(job)
            #expect(record.status == .granted)
            #expect(record.reason == nil)
            if mode == .timeout {
                // Under load a second call could also exceed the short timeout; it must still end granted.
                #expect(record.attempts >= 2)
            } else {
                #expect(record.attempts == 2)
            }
            #expect(try await harness.emulatorStats().failuresInjected == 1)
            #expect(try await harness.ledgerRow(transaction)?.state == "fulfilled")
            #expect(try await harness.access("PREMIUM") == (true, nil))
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
        }
    }

    /// The PREMIUM non-consumable in the catalog, and one purchase of it submitted, with the scenario's
    /// `extra` keys (a forced status, failures): its transaction id and job id. The scenario lists the
    /// purchase, so a worker that ignored a forced status would grant it.
    private static func submitPremium(_ harness: WorkerHarness, extra: [String: Any] = [:]) async throws -> (transactionId: String, jobId: String) {
        try await harness.app(Self.bundle, selling: [.premium])
        let transaction = ScenarioReceipt.transactionId()
        let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)], extra: extra)
        return (transaction, try await harness.submit(offerId: "PREMIUM", transactionId: transaction, receipt: receipt))
    }

    /// Attempt 1 of the next job on the stream, against the emulator: started, fulfilled in PostgreSQL, and
    /// then its worker (consumer "dead") died before recording the outcome. Returns its fulfilment.
    @discardableResult
    private static func fulfilThenDie(
        _ harness: WorkerHarness, jobId: String, expect expected: FulfilmentOutcome, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (QueueDelivery, ReceiptJob) {
        let delivery = try #require(try await harness.queue.readNew(consumer: "dead", count: 1, blockMilliseconds: 100, blockingClient: harness.redis).first)
        #expect(delivery.jobId == jobId, sourceLocation: sourceLocation)
        guard case .ready(let job, 1, _, false) = try await harness.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 10) else {
            throw ManagedProcess.Failure("attempt 1 did not start")
        }
        #expect(await harness.emulatorFulfiller().fulfil(job, logger: Logger(label: "test.worker")) == expected, sourceLocation: sourceLocation)
        return (delivery, job)
    }

    /// A peer claims what the dead worker held (attempt 2 of `jobId`, with Apple down) and processes it.
    private static func claimAsPeer(_ harness: WorkerHarness, jobId: String) async throws {
        let claimed = try await harness.queue.autoclaim(consumer: "peer", minIdleMilliseconds: 0, cursor: "0-0", count: 1).deliveries
        #expect(claimed.map(\.jobId) == [jobId])
        for delivery in claimed { await harness.processor.process(delivery) }
    }

    @Test("a replay of a job whose grant committed before its outcome was recorded finishes granted, though Apple fails since")
    func replayAfterCommittedGrant() async throws {
        // The harness' own worker finds Apple down; the first attempt ran against the emulator.
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 4), appleBase: "http://127.0.0.1:1") { harness in
            let (transaction, jobId) = try await Self.submitPremium(harness)
            try await Self.fulfilThenDie(harness, jobId: jobId, expect: .granted(environment: "Production", expiresAt: nil, claimed: [transaction]))

            // A peer claims the entry: attempt 2 finds Apple down, and the grant already there.
            try await Self.claimAsPeer(harness, jobId: jobId)
            let record = try await harness.record(jobId)
            #expect(record.status == .granted)
            #expect(record.attempts == 2)
            #expect(record.environment == "Production")
            #expect(try await harness.access("PREMIUM") == (true, nil))
        }
    }

    @Test("a first attempt whose grant committed as PostgreSQL went away (its answer lost): parked without spending the attempt, its next start finds the grant and finishes granted, though Apple answers 21010 since")
    func grantCommittedAsPostgresWentAway() async throws {
        // Since the first attempt, Apple refuses the receipt for good (the account is gone): asked again, it would end the job rejected.
        try await EmulatedApple.with(["--fail-rate", "1", "--fail-mode", "status21010"]) { apple in
            try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 4), appleBase: apple.base) { harness in
                let (transaction, jobId) = try await Self.submitPremium(harness)
                let (delivery, _) = try await Self.fulfilThenDie(
                    harness, jobId: jobId, expect: .granted(environment: "Production", expiresAt: nil, claimed: [transaction])
                )
                // What the worker records for an outage: parked due at once, the attempt taken back.
                let now = harness.queue.clock.nowMilliseconds()
                #expect(try await harness.queue.retry(delivery, jobId: jobId, dueAt: now, reason: .internal, now: now, counts: false) == .parked(dueAt: now))

                let record = try await harness.workUntilFinal(jobId)
                #expect(record.status == .granted, "\(record)")
                #expect(record.attempts == 1)
                #expect(try await harness.access("PREMIUM") == (true, nil))
            }
        }
    }

    @Test("a job that found its purchase granted by another job: its replay finishes granted though Apple fails since, and the ledger keeps its outcome")
    func replayOfPurchaseGrantedBefore() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 4), appleBase: "http://127.0.0.1:1") { harness in
            let (transaction, firstJob) = try await Self.submitPremium(harness)
            let granted = FulfilmentOutcome.granted(environment: "Production", expiresAt: nil, claimed: [transaction])
            // The first job grants it and records that.
            let (first, job) = try await Self.fulfilThenDie(harness, jobId: firstJob, expect: granted)
            try await harness.queue.finish(
                first, job: job, status: .granted, reason: nil, environment: "Production", expiresAt: nil, now: WallClock.nowMilliseconds(),
                retentionSeconds: 3600, claimed: [transaction]
            )

            // The same purchase again, in other bytes and without its transaction id: a job of its own, which
            // grants on the first job's ledger row, and whose worker dies before recording that.
            let receipt = ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)], extra: ["copy": 2])
            let secondJob = try await harness.submit(offerId: "PREMIUM", transactionId: nil, receipt: receipt)
            try await Self.fulfilThenDie(harness, jobId: secondJob, expect: granted)
            try await Self.claimAsPeer(harness, jobId: secondJob)
            let record = try await harness.record(secondJob)
            #expect(record.status == .granted, "\(record)")
            #expect(record.attempts == 2)

            // Once its Redis status has expired, the ledger still answers for it.
            let outcome = try await AccessStore(database: harness.database).jobOutcome(jobId: secondJob, publisherId: harness.publisher.id)
            #expect(outcome?.status == .granted)
            #expect(outcome?.offerId == "PREMIUM")
            #expect(outcome?.environment == "Production")
        }
    }

    /// A job whose grant committed, and whose every later start died too, up to the processor's limit.
    private static func poisonJob(_ harness: WorkerHarness) async throws -> String {
        let (transaction, jobId) = try await Self.submitPremium(harness)
        try await Self.fulfilThenDie(harness, jobId: jobId, expect: .granted(environment: "Production", expiresAt: nil, claimed: [transaction]))
        _ = try await harness.redis.send("HSET", harness.queue.keys.job(jobId), "attempts", String(harness.processor.maxStarts))
        return jobId
    }

    /// A peer whose PostgreSQL is away (here, its grants' database does not exist) claims the entry of `jobId`
    /// and processes it.
    private static func claimAsPeerWithoutPostgres(_ harness: WorkerHarness, jobId: String) async throws {
        let missing = try Self.missingDatabase()
        try await TestEnvironment.using(missing) {
            let away = JobProcessor(
                queue: harness.queue,
                fulfiller: Fulfiller(catalog: harness.catalog, grants: GrantStore(database: missing), queue: harness.queue, apple: harness.emulatorFulfiller().apple),
                retry: harness.retry, retentionSeconds: 86_400, recordPatience: .seconds(60), logger: Logger(label: "test.worker")
            )
            let claimed = try await harness.queue.autoclaim(consumer: "peer", minIdleMilliseconds: 0, cursor: "0-0", count: 1).deliveries
            #expect(claimed.map(\.jobId) == [jobId])
            for delivery in claimed { await away.process(delivery) }
        }
    }

    /// A client of a database that does not exist: every query fails at once.
    private static func missingDatabase() throws -> PostgresClient {
        let base = try TestEnvironment.databaseURL()
        return PostgresClient(url: base[..<(base.lastIndex(of: "/") ?? base.endIndex)] + "/no_such_database_\(UInt32.random(in: 0...UInt32.max))", connections: 1)
    }

    @Test("a job started too often without finishing, whose grant committed, ends granted, not failed")
    func poisonWithCommittedGrant() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 4), appleBase: "http://127.0.0.1:1") { harness in
            let jobId = try await Self.poisonJob(harness)
            try await Self.claimAsPeer(harness, jobId: jobId)
            let record = try await harness.record(jobId)
            #expect(record.status == .granted, "\(record)")
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
        }
    }

    @Test("a poison job is not dead-lettered while PostgreSQL cannot tell whether its grant committed; it stays pending for a claim")
    func poisonWhilePostgresAway() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 4), appleBase: "http://127.0.0.1:1") { harness in
            let jobId = try await Self.poisonJob(harness)
            try await Self.claimAsPeerWithoutPostgres(harness, jobId: jobId)
            #expect(try await harness.record(jobId).status != .failed)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
            // Once PostgreSQL answers, a claim finds the grant: granted.
            try await Self.claimAsPeer(harness, jobId: jobId)
            #expect(try await harness.record(jobId).status == .granted)
        }
    }

    @Test("a job out of time whose last attempt found PostgreSQL away: granted when PostgreSQL holds its grant (the COMMIT's answer lost), left for a claim while it cannot tell, never failed", arguments: [true, false])
    func outOfTimeAfterOutage(postgresAnswers: Bool) async throws {
        try await WorkerHarness.with { harness in
            let job = try await Self.enqueuePastAgeLimit(harness)
            // Its grant commits, and the attempt that committed it sees PostgreSQL go away (a failover cut the COMMIT's answer).
            guard case .granted = await harness.emulatorFulfiller().fulfil(job, logger: Logger(label: "test.worker")) else {
                Issue.record("not granted")
                return
            }
            let delivery = try #require(try await harness.queue.readNew(consumer: "test", count: 1, blockMilliseconds: 100, blockingClient: harness.redis).first)
            if postgresAnswers {
                // The attempt's ledger write fails as on a full disk (an outage); its grant is there to read.
                try await harness.database.query("""
                    CREATE FUNCTION tg_test_out_of_space() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$
                    """)
                try await harness.database.query(
                    "CREATE TRIGGER tg_test_out_of_space BEFORE UPDATE ON transactions FOR EACH ROW EXECUTE FUNCTION tg_test_out_of_space()"
                )
                await harness.processor.process(delivery)
                #expect(try await harness.record(job.jobId).status == .granted)
            } else {
                let missing = try Self.missingDatabase()
                try await TestEnvironment.using(missing) {
                    let away = JobProcessor(
                        queue: harness.queue,
                        fulfiller: Fulfiller(catalog: CatalogStore(database: missing), grants: GrantStore(database: missing), queue: harness.queue, apple: harness.emulatorFulfiller().apple),
                        retry: harness.retry, retentionSeconds: 86_400, recordPatience: .seconds(60), logger: Logger(label: "test.worker")
                    )
                    await away.process(delivery)
                }
                #expect(try await harness.record(job.jobId).status == .processing, "left pending for a claim")
                // Once PostgreSQL answers, a claim finds the grant.
                try await Self.claimAsPeer(harness, jobId: job.jobId)
                #expect(try await harness.record(job.jobId).status == .granted)
            }
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
        }
    }

    /// A premium purchase accepted longer ago than the policy's age limit: its first outcome that is not final ends it.
    private static func enqueuePastAgeLimit(_ harness: WorkerHarness) async throws -> ReceiptJob {
        try await harness.app(Self.bundle, selling: [.premium])
        let transaction = ScenarioReceipt.transactionId()
        let job = ReceiptJob(
            jobId: UUID().uuidString.lowercased(), publisherId: harness.publisher.id, customerEmail: WorkerHarness.buyer, offerId: "PREMIUM",
            transactionId: transaction, receiptData: ScenarioReceipt.make(bundleId: Self.bundle, purchases: [.init(productId: "premium", transactionId: transaction)]),
            appType: .ios, ipAddress: nil, acceptedAtMilliseconds: WallClock.nowMilliseconds() - harness.retry.maxAgeSeconds * 1000 - 60_000
        )
        guard case .created = try await harness.queue.enqueue(job, keyTTLSeconds: 3600) else { throw ManagedProcess.Failure("not created") }
        return job
    }

    @Test("a job past the age limit whose attempt finds Apple unreachable is failed apple_unavailable on that attempt, not retried")
    func pastAgeLimit() async throws {
        try await WorkerHarness.with(appleBase: "http://127.0.0.1:1") { harness in
            let job = try await Self.enqueuePastAgeLimit(harness)
            _ = try await harness.work()
            let record = try await harness.record(job.jobId)
            #expect(record.status == .failed, "\(record)")
            #expect(record.reason == "apple_unavailable", "\(record)")
            #expect(record.attempts == 1, "\(record)")
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.map(\.jobId) == [job.jobId])
            try await harness.expectNothingGranted()
        }
    }

    @Test("a poison job whose grant lookup keeps failing, not for an outage, is left for a claim a few times, then dead-lettered")
    func poisonLookupKeepsFailing() async throws {
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 4), appleBase: "http://127.0.0.1:1") { harness in
            let jobId = try await Self.poisonJob(harness)
            // The lookup now fails with 42P01, as with a schema out of step: no probe of PostgreSQL clears that.
            try await harness.database.query("ALTER TABLE granted_jobs RENAME TO granted_jobs_elsewhere")
            try await Self.claimAsPeer(harness, jobId: jobId)
            #expect(try await harness.record(jobId).status != .failed, "one more start: left for a later claim")
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
            _ = try await harness.redis.send(
                "HSET", harness.queue.keys.job(jobId), "attempts", String(harness.processor.maxStarts + JobProcessor.poisonLookupPatience)
            )
            try await Self.claimAsPeer(harness, jobId: jobId)
            let record = try await harness.record(jobId)
            #expect(record.status == .failed, "\(record)")
            let letter = try #require(try await harness.queue.deadLetters(limit: 10).deadLetters.first)
            #expect(letter.jobId == jobId)
            #expect(letter.detail.contains("whether its grant committed is unknown"), "\(letter.detail)")
            try await harness.database.query("ALTER TABLE granted_jobs_elsewhere RENAME TO granted_jobs")
        }
    }

    @Test("when PostgreSQL cannot tell whether an earlier attempt granted, the attempt is parked as an outage, not run against Apple")
    func committedLookupFails() async throws {
        try await WorkerHarness.with { harness in
            let (_, jobId) = try await Self.submitPremium(harness)
            // Attempt 1 started, and its worker died before it recorded anything.
            let delivery = try #require(try await harness.queue.readNew(consumer: "dead", count: 1, blockMilliseconds: 100, blockingClient: harness.redis).first)
            guard case .ready(_, 1, _, false) = try await harness.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 10) else {
                throw ManagedProcess.Failure("attempt 1 did not start")
            }
            let asked = try await harness.emulatorStats()
            // Attempt 2 must look for attempt 1's grant first, and cannot.
            try await Self.claimAsPeerWithoutPostgres(harness, jobId: jobId)
            let record = try await harness.record(jobId)
            #expect(record.status == .retrying, "\(record)")
            #expect(record.reason == "internal", "\(record)")
            #expect(record.attempts == 1, "an outage gives the attempt back: \(record)")
            #expect(try await harness.emulatorStats() == asked, "Apple was asked while PostgreSQL could not tell whether the job was granted")
            try await harness.expectNothingGranted()
        }
    }

    @Test("every PostgreSQL connection of the worker busy past the acquire timeout parks the attempt without spending it, and holds no intake off")
    func poolBusy() async throws {
        try await WorkerHarness.with { harness in
            let (_, jobId) = try await Self.submitPremium(harness)
            let busy = PostgresClient(url: try TestEnvironment.databaseURL(), connections: 1, acquireTimeout: .milliseconds(300))
            try await TestEnvironment.using(busy) {
                let holder = await busy.holdConnection()
                let fulfiller = Fulfiller(catalog: harness.catalog, grants: GrantStore(database: busy), queue: harness.queue, apple: harness.emulatorFulfiller().apple)
                let processor = JobProcessor(
                    queue: harness.queue, fulfiller: fulfiller, retry: harness.retry, retentionSeconds: 86_400, recordPatience: .seconds(60),
                    logger: Logger(label: "test.worker")
                )
                let delivery = try #require(try await harness.queue.readNew(consumer: "busy", count: 1, blockMilliseconds: 100, blockingClient: harness.redis).first)
                await processor.process(delivery)
                let record = try await harness.record(jobId)
                #expect(record.status == .retrying, "\(record)")
                #expect(record.reason == "internal", "\(record)")
                #expect(record.attempts == 0, "contention gives the attempt back: \(record)")
                #expect(!fulfiller.database.isAway, "PostgreSQL answers: no outage")
                try await holder.release()
            }
            try await harness.expectNothingGranted()
        }
    }

    @Test("a connection error (nothing listening) is retried until the policy's limit, then failed apple_unavailable")
    func connectionRefused() async throws {
        // Port 1 on loopback: nothing listens there, so every call is refused.
        try await WorkerHarness.with(retry: WorkerHarness.fastRetry(maxAttempts: 4), appleBase: "http://127.0.0.1:1") { harness in
            let (_, job) = try await Self.submitPremium(harness)
            try await harness.work()
            let first = try await harness.record(job)
            #expect(first.status == .retrying)
            #expect(first.reason == "apple_unavailable")
            let record = try await harness.workUntilFinal(job)
            #expect(record.status == .failed)
            #expect(record.reason == "apple_unavailable")
            #expect(record.attempts == 4)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.map(\.jobId) == [job])
            try await harness.expectNothingGranted()
        }
    }
}
