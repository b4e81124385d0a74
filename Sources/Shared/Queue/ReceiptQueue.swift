import Foundation
import Logging
import Synchronization

/// The queue protocol over Redis: enqueue, deliver, start, finish, retry, dead-letter, requeue.
///
/// Redis holds work in flight; PostgreSQL holds the truth. Delivery is at least once (an entry is
/// acknowledged only after its outcome is committed), so every consumer of a delivery must be idempotent.
public struct ReceiptQueue: Sendable {
    /// The key layout.
    public let keys: QueueKeys
    private let redis: RedisClient
    /// Concurrent submissions leave together, in one call of the enqueue script.
    private let submissions: RedisBatcher
    /// Every time the queue stores or compares is read here: Redis' clock (``QueueClock``).
    public let clock: QueueClock
    /// Set once ``prepare()`` has succeeded; shared by every copy of this value.
    private let preparation = PreparationState()

    /// Whether this process has prepared the queue (``prepare()``): until then it is not ready, and Redis
    /// refusing its credentials still counts as a bad value at start (exit 2), not as an outage.
    public var isPrepared: Bool { self.preparation.done.load(ordering: .acquiring) }

    /// Creates the queue over a client, for one prefix.
    public init(redis: RedisClient, prefix: String, clock: QueueClock = QueueClock()) {
        let keys = QueueKeys(prefix: prefix)
        self.redis = redis
        self.keys = keys
        self.clock = clock
        self.submissions = RedisBatcher(
            redis: redis, script: QueueScripts.enqueue, keys: [keys.stream, keys.inflight], arguments: [keys.jobPrefix, keys.accessChannel]
        )
    }

    /// Creates the consumer group (from the stream's start, so nothing enqueued earlier is skipped), loads
    /// the scripts, checks that the access channel takes messages and reads Redis' clock. Safe to call from
    /// every process, any number of times.
    public func prepare() async throws {
        try await self.synchronizeClock()
        do {
            try await self.redis.send("XGROUP", "CREATE", self.keys.stream, self.keys.group, "0", "MKSTREAM")
        } catch let error as RedisError where error.message.hasPrefix("BUSYGROUP") {
            // Another process created it first.
        } catch let error as RedisError where error.message.hasPrefix("OOM") {
            // Redis is full (maxmemory, noeviction) and refuses XGROUP CREATE before it looks for the group.
            // A worker starting now (a restart, or one added for the backlog) must still drain the queue,
            // which is what frees memory: the group being there is all this needed.
            guard try await self.groupExists() else { throw error }
        }
        for script in QueueScripts.all { try await self.redis.load(script) }
        // The scripts publish on the access channel after their writes, and Redis does not undo those when
        // PUBLISH is refused (an ACL user without the channel: Redis 7 gives new users none). Found now, a
        // `NOPERM` stops the process at start instead of failing every submission half-way. An empty
        // message invalidates nothing a subscriber holds.
        try await self.redis.send("PUBLISH", self.keys.accessChannel, "")
        self.preparation.done.store(true, ordering: .releasing)
    }

    /// Reads Redis' clock into ``clock`` (``QueueClock/synchronize(with:)``): how far this host's wall
    /// clock is from it, in ms.
    @discardableResult
    public func synchronizeClock() async throws -> Int {
        try await self.clock.synchronize(with: self.redis)
    }

    /// Whether the stream has the workers' consumer group (a read, which Redis answers when full too).
    private func groupExists() async throws -> Bool {
        let groups = try await self.redis.send("XINFO", "GROUPS", self.keys.stream).array ?? []
        return groups.contains { group in
            let fields = group.array ?? []
            return stride(from: 0, to: fields.count - 1, by: 2).contains { fields[$0].string == "name" && fields[$0 + 1].string == self.keys.group }
        }
    }

    /// How ``prepareWhenReachable(logger:)`` ended.
    public enum Preparation: Sendable, Equatable {
        /// The queue is prepared.
        case prepared
        /// The task was cancelled first.
        case cancelled
        /// Redis answered and refused Tollgate's credentials, database or permissions
        /// (``RedisError/isAccessRefused``): a bad `TOLLGATE_REDIS_URL`, which a process reports as any
        /// bad value at start (one line naming the variable, exit code 2).
        case refused(ConfigurationError)
    }

    /// ``prepare()`` once Redis answers, retried with a backoff from 100 ms to 5 s until the task is
    /// cancelled; then a warning if Redis could lose accepted receipts. A refusal of Tollgate's access
    /// ends it at once: no retry makes a wrong password right.
    public func prepareWhenReachable(logger: Logger) async -> Preparation {
        var delay = 100
        while !Task.isCancelled {
            do {
                try await self.prepare()
                await RedisSafety.warnIfUnsafe(redis: self.redis, logger: logger)
                return .prepared
            } catch let error as RedisError where error.isAccessRefused {
                // Redis' own text ("WRONGPASS …", "ERR DB index is out of range"): never the password.
                return .refused(ConfigurationError(variable: "TOLLGATE_REDIS_URL", "Redis refused it: \(error.message)"))
            } catch {
                guard !Task.isCancelled else { break }
                logger.warning("Redis not ready; retrying", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: .milliseconds(delay))
                delay = min(delay * 2, 5000)
            }
        }
        return .cancelled
    }

    // MARK: Submitting

    /// Stores a job atomically, or finds the identical submission, or refuses a claimed transaction.
    ///
    /// Submissions made while another call is in flight share the next call of the script; each is
    /// decided on its own, in order. `pendingKey` is the job's ``QueueKeys/pending(for:)``, for a caller that
    /// needs it too (it is a SHA-256): made here when not given.
    public func enqueue(_ job: ReceiptJob, keyTTLSeconds: Int, pendingKey: String? = nil) async throws -> EnqueueOutcome {
        assert(pendingKey == nil || pendingKey == self.keys.pending(for: job), "pendingKey is not this job's")
        let reply = try await self.submissions.run(self.submission(job, keyTTLSeconds: keyTTLSeconds, pendingKey: pendingKey))
        if reply.string == "created" { return .created(jobId: job.jobId) }
        let parts = reply.array ?? []
        switch parts.first?.string {
        case "duplicate":
            guard parts.count == 3, let jobId = parts[1].string, let status = parts[2].string.flatMap(JobStatus.init) else {
                throw RedisError(.protocolViolation, "enqueue returned a malformed duplicate")
            }
            return .duplicate(jobId: jobId, status: status)
        case "claimed":
            return .alreadyClaimed
        case "error":
            throw RedisError(.server, parts.count == 2 ? parts[1].string ?? "" : "enqueue failed")
        default:
            throw RedisError(.protocolViolation, "enqueue returned an unexpected reply")
        }
    }

    /// One submission's part of a call of the enqueue script.
    func submission(_ job: ReceiptJob, keyTTLSeconds: Int, pendingKey: String? = nil) -> RedisBatcher.Item {
        RedisBatcher.Item(
            keys: [self.keys.dedup(for: job), self.keys.job(job.jobId), pendingKey ?? self.keys.pending(for: job)] + self.claimKeys(job),
            arguments: [
                job.jobId, job.customerEmail, job.offerId, job.publisherId.lowercasedString, job.json,
                String(job.acceptedAtMilliseconds), String(keyTTLSeconds), job.transactionId == nil ? "0" : "1",
            ]
        )
    }

    /// The job an earlier identical submission created, and its status, while Redis still knows it: what
    /// ``enqueue(_:keyTTLSeconds:pendingKey:)`` would answer as a duplicate, without storing anything.
    public func existing(_ job: ReceiptJob) async throws -> (jobId: String, status: JobStatus)? {
        guard let jobId = try await self.redis.send("GET", self.keys.dedup(for: job)).string,
            let status = try await self.redis.send("HGET", self.keys.job(jobId), "status").string.flatMap(JobStatus.init)
        else { return nil }
        return (jobId, status)
    }

    // MARK: Reading status

    /// The job's status, or `nil` when Redis does not know it (never existed, or retention passed).
    public func record(jobId: String) async throws -> JobRecord? {
        let fields = ["status", "attempts", "reason", "nextAttemptAt", "customerEmail", "offerId", "environment", "expiresAt", "publisherId"]
        let reply = try await self.redis.send(["HMGET", self.keys.job(jobId)] + fields)
        let values = (reply.array ?? []).map(\.string)
        guard values.count == fields.count, let status = values[0].flatMap(JobStatus.init),
            let customerEmail = values[4], let offerId = values[5], let publisherId = values[8].flatMap({ UUID(uuidString: $0) })
        else { return nil }
        return JobRecord(
            jobId: jobId, publisherId: publisherId, status: status, attempts: values[1].flatMap { Int($0) } ?? 0,
            reason: values[2], nextAttemptAtMilliseconds: values[3].flatMap { Int($0) },
            customerEmail: customerEmail, offerId: offerId, environment: values[6], expiresAt: values[7].flatMap { Int($0) }
        )
    }

    /// Announces that these customers' access to these offers may have changed (refunds, renewals found
    /// in any receipt), so API caches drop those access statuses.
    public func announceAccessChanged(publisherId: UUID, _ changed: [CustomerOffer]) async throws {
        for pair in changed {
            let key = self.keys.pending(publisherId: publisherId, customerEmail: pair.customerEmail, offerId: pair.offerId)
            try await self.redis.send("PUBLISH", self.keys.accessChannel, key)
        }
    }

    /// Whether a job for this customer and offer is queued, processing or retrying.
    public func hasPendingJob(publisherId: UUID, customerEmail: String, offerId: String) async throws -> Bool {
        try await self.hasPendingJob(pendingKey: self.keys.pending(publisherId: publisherId, customerEmail: customerEmail, offerId: offerId))
    }

    /// ``hasPendingJob(publisherId:customerEmail:offerId:)`` by the customer and offer's pending key.
    public func hasPendingJob(pendingKey: String) async throws -> Bool {
        (try await self.redis.send("SCARD", pendingKey).int ?? 0) > 0
    }

    /// Counts for operators.
    public func counts() async throws -> QueueCounts {
        async let length = self.redis.send("XLEN", self.keys.stream)
        async let pending = self.redis.send("XPENDING", self.keys.stream, self.keys.group)
        async let retrying = self.redis.send("ZCARD", self.keys.retry)
        async let dead = self.redis.send("XLEN", self.keys.dead)
        let total = try await length.int ?? 0
        let held: Int
        do {
            held = try await pending.array?.first?.int ?? 0
        } catch let error as RedisError where error.isNoGroup {
            // No worker has created the group yet (or Redis lost it): nothing was handed to anyone.
            held = 0
        }
        return QueueCounts(queued: max(0, total - held), processing: held, retrying: try await retrying.int ?? 0, dead: try await dead.int ?? 0)
    }

    // MARK: Consuming

    /// New entries for `consumer`, waiting up to `blockMilliseconds` when there are none.
    ///
    /// Pass a client of its own as `blockingClient`: a blocked read holds its connection.
    public func readNew(consumer: String, count: Int, blockMilliseconds: Int, blockingClient: RedisClient) async throws -> [QueueDelivery] {
        let reply = try await blockingClient.send([
            "XREADGROUP", "GROUP", self.keys.group, consumer, "COUNT", String(count), "BLOCK", String(blockMilliseconds),
            "STREAMS", self.keys.stream, ">",
        ])
        guard let streams = reply.array, let stream = streams.first?.array, stream.count == 2 else { return [] }
        return Self.deliveries(stream[1], consumer: consumer)
    }

    /// Entries this consumer already holds (after a restart under the same name), in id order after
    /// `after`: page through them by passing the last id seen. Entries stay pending while they are being
    /// processed, so reading from "0" again would hand out the same entries twice.
    public func readOwnPending(consumer: String, after: String = "0", count: Int) async throws -> [QueueDelivery] {
        let reply = try await self.redis.send([
            "XREADGROUP", "GROUP", self.keys.group, consumer, "COUNT", String(count), "STREAMS", self.keys.stream, after,
        ])
        guard let streams = reply.array, let stream = streams.first?.array, stream.count == 2 else { return [] }
        return Self.deliveries(stream[1], consumer: consumer)
    }

    /// Takes over entries other consumers have held longer than `minIdleMilliseconds` (a dead or stalled worker).
    ///
    /// Returns the next cursor ("0-0" when the scan is complete), the claimed deliveries, and the ids of
    /// entries that were deleted while pending (their pending records are dropped by Redis).
    public func autoclaim(consumer: String, minIdleMilliseconds: Int, cursor: String, count: Int) async throws -> (cursor: String, deliveries: [QueueDelivery], deleted: [String]) {
        let reply = try await self.redis.send([
            "XAUTOCLAIM", self.keys.stream, self.keys.group, consumer, String(minIdleMilliseconds), cursor, "COUNT", String(count),
        ])
        guard let parts = reply.array, parts.count >= 2, let next = parts[0].string else {
            throw RedisError(.protocolViolation, "XAUTOCLAIM returned an unexpected reply")
        }
        let deleted = parts.count > 2 ? (parts[2].array ?? []).compactMap(\.string) : []
        return (next, Self.deliveries(parts[1], consumer: consumer), deleted)
    }

    /// Marks the job `processing` and returns its payload, or says why there is nothing to do.
    /// `maxStarts` bounds how often a job may start: past it the job is poison.
    public func start(_ delivery: QueueDelivery, now: Int, maxStarts: Int) async throws -> StartOutcome {
        let reply = try await self.redis.run(
            QueueScripts.start, keys: [self.keys.job(delivery.jobId), self.keys.inflight],
            arguments: [String(now), String(maxStarts), delivery.jobId]
        )
        let parts = reply.array ?? []
        switch parts.first?.string {
        case "ready", "poison":
            guard parts.count == 5, let attempt = parts[1].int, let payload = parts[2].string else { return .missing }
            guard let job = ReceiptJob(json: payload) else { return .unreadable(attempt: attempt) }
            let acceptedAt = parts[3].int ?? job.acceptedAtMilliseconds
            if parts[0].string == "poison" { return .poison(job, attempt: attempt, acceptedAtMilliseconds: acceptedAt) }
            return .ready(job, attempt: attempt, acceptedAtMilliseconds: acceptedAt, startedBefore: parts[4].string == "1")
        case "final":
            return .final(parts.count > 1 ? parts[1].string.flatMap(JobStatus.init) ?? .failed : .failed)
        default:
            return .missing
        }
    }

    /// Records a final `granted`/`rejected` outcome and acknowledges the entry. A grant's `claimed`
    /// transaction ids become the customer's in Redis for `retentionSeconds`, so the API refuses another
    /// customer's submission of them at once (409), though this job was submitted without them.
    ///
    /// Returns ``FinalRecord/superseded`` when a rejection came from a stale copy (its job runs on another entry by
    /// now: promoted, put back or requeued since), which only acknowledged its entry.
    @discardableResult
    public func finish(
        _ delivery: QueueDelivery, job: ReceiptJob, status: JobStatus, reason: JobReason?, environment: String?,
        expiresAt: Int?, now: Int, retentionSeconds: Int, claimed: [String] = []
    ) async throws -> FinalRecord {
        let own = self.claimKeys(job)
        return try FinalRecord(reply: await self.redis.run(
            QueueScripts.finish,
            keys: [self.keys.job(job.jobId), self.keys.stream, self.keys.pending(for: job), self.keys.dead, self.keys.inflight, self.keys.retry] + own
                + claimed.map { self.keys.claim(publisherId: job.publisherId, transactionId: $0) },
            arguments: [
                delivery.entryId, self.keys.group, status.rawValue, reason?.rawValue ?? "", environment ?? "",
                expiresAt.map(String.init) ?? "", String(now), String(retentionSeconds), job.jobId, self.keys.accessChannel, job.customerEmail,
                own.isEmpty ? "0" : "1", delivery.consumer,
            ]
        ))
    }

    /// Tells the group that `consumer` is still working on these entries (their idle time starts again), so
    /// no peer's ``autoclaim(consumer:minIdleMilliseconds:cursor:count:)`` takes them; entries it no longer
    /// holds are skipped. Returns how many it still held.
    @discardableResult
    public func keepHeld(consumer: String, entryIds: [String]) async throws -> Int {
        guard !entryIds.isEmpty else { return 0 }
        let reply = try await self.redis.run(QueueScripts.keepHeld, keys: [self.keys.stream], arguments: [self.keys.group, consumer] + entryIds)
        return reply.int ?? 0
    }

    /// Removes `consumer` from the group when it holds no entry, and says whether it did. A consumer that
    /// holds entries is kept: removing it would drop them from the group's pending list, past the group's
    /// last delivered entry, where no read or claim would ever hand them out again. The check and the
    /// removal are one script: a read under the same name in between (a second process given the same
    /// `TOLLGATE_WORKER_NAME`) cannot slip an entry in.
    public func leaveGroup(consumer: String) async throws -> Bool {
        try await self.redis.run(QueueScripts.leaveGroup, keys: [self.keys.stream], arguments: [self.keys.group, consumer]).int == 1
    }

    /// Removes from the group the consumer names that hold nothing and have not read for `idleMilliseconds`:
    /// those of workers that crashed or were killed, which would otherwise stay listed for good.
    @discardableResult
    public func forgetIdleConsumers(idleMilliseconds: Int) async throws -> Int {
        try await self.redis.run(QueueScripts.forgetIdleConsumers, keys: [self.keys.stream], arguments: [self.keys.group, String(idleMilliseconds)]).int ?? 0
    }

    /// Acknowledges an entry with nothing to record (its job is final or gone).
    public func acknowledge(_ delivery: QueueDelivery) async throws {
        _ = try await self.redis.run(QueueScripts.acknowledge, keys: [self.keys.stream], arguments: [self.keys.group, delivery.entryId])
    }

    /// Parks the job until `dueAt` (Unix ms) and acknowledges the entry, atomically; returns when the job
    /// is due. With a `limit`, the attempts that ended as `limit.key` says are counted: from the second
    /// on, the job is due no sooner than `limit.repeatDueAt`, and the one that reaches `limit.attempts`
    /// parks nothing: `nil`, and the caller ends the job. Unless the attempt `counts`, it is taken back from
    /// the job's `attempts` (a shutdown cut it off: it is neither a try the retry policy allows nor a start
    /// that never finished). Only the consumer that holds the entry parks it (``ParkOutcome/notHeld``).
    @discardableResult
    public func retry(
        _ delivery: QueueDelivery, jobId: String, dueAt: Int, reason: JobReason, now: Int,
        limit: (key: String, attempts: Int, repeatDueAt: Int)? = nil, counts: Bool = true
    ) async throws -> ParkOutcome {
        var arguments = [
            delivery.entryId, self.keys.group, jobId, String(dueAt), reason.rawValue, String(now), counts ? "1" : "0", delivery.consumer,
        ]
        if let limit { arguments += ["tries:\(limit.key)", String(limit.attempts), String(limit.repeatDueAt)] }
        let reply = try await self.redis.run(
            QueueScripts.retry, keys: [self.keys.job(jobId), self.keys.stream, self.keys.retry, self.keys.inflight], arguments: arguments
        )
        switch reply.int {
        case let due? where due >= 0: return .parked(dueAt: due)
        case -1: return .limitReached
        case -2: return .notHeld
        case -3: return .alreadyFinal
        default: throw RedisError(.protocolViolation, "the retry script returned an unexpected reply")
        }
    }

    /// The length of the stretches of time in which Apple's verifications are counted.
    public static let verificationBucketMilliseconds = 10_000

    /// Records, for every worker, that Apple's `environment` verified `count` receipts at about `now` (Unix ms);
    /// counted for `lifetimeMilliseconds`. Stretches older than that are dropped once there are twice as many
    /// as that holds, so the count is pruned rarely and stays bounded.
    public func recordAppleVerified(_ environment: VerifyReceiptClient.Environment, count: Int, now: Int, lifetimeMilliseconds: Int) async throws {
        let length = Self.verificationBucketMilliseconds
        let kept = max(1, lifetimeMilliseconds / length + 1)
        _ = try await self.redis.run(
            QueueScripts.appleVerified, keys: [self.keys.appleVerifications(environment)],
            arguments: [String(now / length), String(count), String(now / length - kept + 1), String(max(1, lifetimeMilliseconds)), String(2 * kept)]
        )
    }

    /// Records that Apple's `environment` answered 21002 for `jobId` at `now`, and returns what every
    /// worker saw of that environment within the last `windowMilliseconds`: how many receipts it verified,
    /// and how many other jobs got 21002.
    public func appleMalformedAnswer(
        _ environment: VerifyReceiptClient.Environment, jobId: String, now: Int, windowMilliseconds: Int
    ) async throws -> AppleEvidence {
        let reply = try await self.redis.run(
            QueueScripts.appleMalformed, keys: [self.keys.appleVerifications(environment), self.keys.appleMalformed(environment)],
            arguments: [jobId, String(now), String(max(1, windowMilliseconds)), String(Self.verificationBucketMilliseconds)]
        )
        let values = (reply.array ?? []).map { $0.int ?? 0 }
        return AppleEvidence(verifications: values.first ?? 0, otherMalformed: values.dropFirst().first ?? 0)
    }

    /// Moves up to `limit` due retries back to the stream; returns how many moved.
    @discardableResult
    public func promoteDue(now: Int, limit: Int = 500) async throws -> Int {
        let reply = try await self.redis.run(
            QueueScripts.promote, keys: [self.keys.retry, self.keys.stream, self.keys.inflight],
            arguments: [String(now), String(limit), self.keys.jobPrefix]
        )
        return reply.int ?? 0
    }

    /// Dead-letters a job (status `failed`) and acknowledges its entry; `delivery` is `nil` for a job
    /// that is no longer on the stream. Returns what it recorded, as
    /// ``finish(_:job:status:reason:environment:expiresAt:now:retentionSeconds:claimed:)`` does.
    @discardableResult
    public func deadLetter(_ delivery: QueueDelivery?, job: ReceiptJob, reason: JobReason, detail: String, now: Int, retentionSeconds: Int) async throws -> FinalRecord {
        try await self.deadLetter(
            delivery, jobId: job.jobId, customerEmail: job.customerEmail, pendingKey: self.keys.pending(for: job), claimKeys: self.claimKeys(job),
            reason: reason, detail: detail, now: now, retentionSeconds: retentionSeconds
        )
    }

    /// ``deadLetter(_:job:reason:detail:now:retentionSeconds:)`` for a job known only by its status record
    /// (its payload could not be read). Its transaction's claim, if any, is left to expire.
    @discardableResult
    public func deadLetter(_ delivery: QueueDelivery, record: JobRecord, reason: JobReason, detail: String, now: Int, retentionSeconds: Int) async throws -> FinalRecord {
        try await self.deadLetter(
            delivery, jobId: record.jobId, customerEmail: record.customerEmail,
            pendingKey: self.keys.pending(publisherId: record.publisherId, customerEmail: record.customerEmail, offerId: record.offerId), claimKeys: [],
            reason: reason, detail: detail, now: now, retentionSeconds: retentionSeconds
        )
    }

    private func deadLetter(
        _ delivery: QueueDelivery?, jobId: String, customerEmail: String, pendingKey: String, claimKeys: [String], reason: JobReason, detail: String,
        now: Int, retentionSeconds: Int
    ) async throws -> FinalRecord {
        try FinalRecord(reply: await self.redis.run(
            QueueScripts.deadLetter,
            keys: [self.keys.job(jobId), self.keys.stream, self.keys.dead, pendingKey, self.keys.inflight, self.keys.retry] + claimKeys,
            arguments: [
                delivery?.entryId ?? "", self.keys.group, jobId, reason.rawValue, detail, String(now), String(retentionSeconds),
                self.keys.accessChannel, customerEmail, delivery?.consumer ?? "",
            ]
        ))
    }

    /// Puts back on the stream unfinished jobs whose entry vanished (an `XTRIM`, an `XDEL`) and that were
    /// last seen before `olderThan` (Unix ms); returns how many it put back.
    @discardableResult
    public func restoreLost(olderThan: Int, now: Int, limit: Int = 500) async throws -> Int {
        let reply = try await self.redis.run(
            QueueScripts.restore, keys: [self.keys.inflight, self.keys.stream],
            arguments: [String(olderThan), String(limit), self.keys.jobPrefix, String(now)]
        )
        return reply.int ?? 0
    }

    /// Drops the dead letters older than the retention: their jobs' statuses have expired, so they could
    /// not be requeued. (Dead-lettering trims too, but only when another job fails.) Returns how many.
    @discardableResult
    public func trimDeadLetters(now: Int, retentionSeconds: Int) async throws -> Int {
        let oldest = max(0, now - retentionSeconds * 1000)
        return try await self.redis.send("XTRIM", self.keys.dead, "MINID", String(oldest)).int ?? 0
    }

    /// Tells every API process that a publisher's credentials were taken away (``QueueKeys/revocation(of:)``).
    public func announceRevocation(of publisherId: UUID) async throws {
        try await self.redis.send("PUBLISH", self.keys.accessChannel, self.keys.revocation(of: publisherId))
    }

    /// The oldest dead letters after the entry `after` (a page's `next`; from the first when nil), up to `limit`.
    /// One entry more is read to tell whether another page follows.
    public func deadLetters(limit: Int, after: String? = nil) async throws -> DeadLetterPage {
        let after = after.map { DeadLetterPage.cursor(Substring($0)) ?? $0 }
        // Redis refuses an interval that starts after its last id.
        guard after != DeadLetterPage.lastCursor else { return DeadLetterPage(deadLetters: [], next: nil) }
        let reply = try await self.redis.send("XRANGE", self.keys.dead, after.map { "(" + $0 } ?? "-", "+", "COUNT", String(limit + 1))
        let entries: [(id: String, fields: [RedisValue])] = (reply.array ?? []).compactMap { entry in
            guard let parts = entry.array, parts.count == 2, let id = parts[0].string, let fields = parts[1].array else { return nil }
            return (id, fields)
        }
        let page = entries.prefix(limit)
        let letters = page.compactMap { entry -> DeadLetter? in
            let map = Self.fieldMap(entry.fields)
            guard let jobId = map["job"] else { return nil }
            return DeadLetter(jobId: jobId, reason: map["reason"] ?? "", detail: map["detail"] ?? "", failedAt: map["at"].flatMap { Int($0) } ?? 0)
        }
        return DeadLetterPage(deadLetters: letters, next: entries.count > limit ? page.last?.id : nil)
    }

    /// Puts a failed job back on the stream with fresh attempts.
    public func requeue(
        jobId: String, publisherId: UUID, customerEmail: String, offerId: String, now: Int, keyTTLSeconds: Int
    ) async throws -> RequeueOutcome {
        var keys = [
            self.keys.job(jobId), self.keys.stream, self.keys.dead,
            self.keys.pending(publisherId: publisherId, customerEmail: customerEmail, offerId: offerId), self.keys.inflight, self.keys.retry,
        ]
        // The submission's own keys come from its payload; one this version cannot read is requeued without them.
        if let payload = try await self.redis.send("HGET", self.keys.job(jobId), "payload").string, let job = ReceiptJob(json: payload) {
            keys += [self.keys.dedup(for: job)] + self.claimKeys(job)
        }
        let reply = try await self.redis.run(
            QueueScripts.requeue, keys: keys, arguments: [jobId, String(now), self.keys.accessChannel, customerEmail, String(keyTTLSeconds)]
        )
        let parts = reply.array ?? []
        switch parts.first?.string {
        case "requeued": return .requeued
        case "not_failed": return .notFailed(parts.count > 1 ? parts[1].string.flatMap(JobStatus.init) ?? .queued : .queued)
        default: return .missing
        }
    }

    /// The job's claim key, when it names a transaction.
    private func claimKeys(_ job: ReceiptJob) -> [String] {
        job.transactionId.map { [self.keys.claim(publisherId: job.publisherId, transactionId: $0)] } ?? []
    }

    private static func deliveries(_ value: RedisValue, consumer: String) -> [QueueDelivery] {
        (value.array ?? []).compactMap { entry in
            guard let parts = entry.array, parts.count == 2, let id = parts[0].string else { return nil }
            let map = Self.fieldMap(parts[1].array ?? [])
            return QueueDelivery(entryId: id, jobId: map["job"] ?? "", consumer: consumer)
        }
    }

    private static func fieldMap(_ fields: [RedisValue]) -> [String: String] {
        var map: [String: String] = [:]
        var index = 0
        while index + 1 < fields.count {
            if let key = fields[index].string { map[key] = fields[index + 1].string }
            index += 2
        }
        return map
    }
}

/// Whether a ``ReceiptQueue``, and every copy of it, has been prepared.
private final class PreparationState: Sendable {
    let done = Atomic<Bool>(false)
}
