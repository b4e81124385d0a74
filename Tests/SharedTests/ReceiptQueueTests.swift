import Foundation
import Logging
import Synchronization
import Testing
import TestSupport
@testable import Shared

@Suite("ReceiptQueue against a real Redis")
struct ReceiptQueueTests {
    static let ttl = 86_400
    static let retention = 604_800

    /// A prepared queue on a prefix of its own, a Redis client to inspect it, and a client for blocking reads.
    struct Harness {
        let queue: ReceiptQueue
        let redis: RedisClient
        let blocking: RedisClient
        var keys: QueueKeys { self.queue.keys }

        func xlen() async throws -> Int { try await self.redis.send("XLEN", self.keys.stream).int ?? -1 }
        func pendingCount() async throws -> Int {
            try await self.redis.send("XPENDING", self.keys.stream, self.keys.group).array?.first?.int ?? -1
        }
        func streamJobIds() async throws -> [String] {
            let entries = try await self.redis.send("XRANGE", self.keys.stream, "-", "+").array ?? []
            return entries.compactMap { entry in
                guard let parts = entry.array, parts.count == 2, let fields = parts[1].array, fields.count == 2 else { return nil }
                return fields[1].string
            }
        }
        func field(_ jobId: String, _ name: String) async throws -> String? {
            try await self.redis.send("HGET", self.keys.job(jobId), name).string
        }
        /// How Redis stores the job's hash: `listpack` (compact) or `hashtable`.
        func encoding(_ jobId: String) async throws -> String? {
            try await self.redis.send("OBJECT", "ENCODING", self.keys.job(jobId)).string
        }
        func fields(_ jobId: String) async throws -> [String: String] {
            let flat = try await self.redis.send("HGETALL", self.keys.job(jobId)).array ?? []
            return Dictionary(uniqueKeysWithValues: stride(from: 0, to: flat.count - 1, by: 2).map { (flat[$0].string ?? "", flat[$0 + 1].string ?? "") })
        }
        func read(_ consumer: String, count: Int = 10) async throws -> [QueueDelivery] {
            try await self.queue.readNew(consumer: consumer, count: count, blockMilliseconds: 50, blockingClient: self.blocking)
        }
        func pending(_ job: ReceiptJob) async throws -> Bool {
            try await self.queue.hasPendingJob(publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId)
        }
        /// Enqueues, reads and starts a job with a transaction id; returns it, its claim key and its delivery.
        func enqueueClaimedAndStart() async throws -> (job: ReceiptJob, claim: String, delivery: QueueDelivery) {
            let job = Fixtures.job(transactionId: Fixtures.transactionId())
            let claim = self.keys.claim(publisherId: job.publisherId, transactionId: try #require(job.transactionId))
            return (job, claim, try await self.enqueueAndStart(job))
        }
        /// Enqueues, reads and starts one job; returns its delivery.
        func enqueueAndStart(_ job: ReceiptJob, consumer: String = "worker-a") async throws -> QueueDelivery {
            #expect(try await self.queue.enqueue(job, keyTTLSeconds: ReceiptQueueTests.ttl) == .created(jobId: job.jobId))
            let delivery = try #require(try await self.read(consumer).first { $0.jobId == job.jobId })
            guard case .ready = try await self.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 100) else {
                Issue.record("start did not find the job ready")
                return delivery
            }
            return delivery
        }
    }

    /// On the shared test Redis, or on `redisURL` (a server of the test's own).
    static func withQueue<T>(redisURL: String? = nil, _ body: (Harness) async throws -> T) async throws -> T {
        let configuration = try RedisConfiguration(url: redisURL ?? TestEnvironment.redisURL())
        let redis = RedisClient(configuration: configuration, connections: 2)
        let blocking = RedisClient(configuration: configuration, connections: 1)
        let prefix = TestEnvironment.uniquePrefix()
        let harness = Harness(queue: ReceiptQueue(redis: redis, prefix: prefix), redis: redis, blocking: blocking)
        do {
            try await harness.queue.prepare()
            let value = try await body(harness)
            try? await RedisClientTests.deleteKeys(prefix: prefix, client: redis)
            await redis.shutdown()
            await blocking.shutdown()
            return value
        } catch {
            try? await RedisClientTests.deleteKeys(prefix: prefix, client: redis)
            await redis.shutdown()
            await blocking.shutdown()
            throw error
        }
    }

    @Test("21002 evidence: a job's own answers count once, other jobs' within the window count, verifications are counted for every worker, per environment")
    func appleEvidence() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            let window = 60_000
            func answer(_ jobId: String, at time: Int, _ environment: VerifyReceiptClient.Environment = .production) async throws -> AppleEvidence {
                try await harness.queue.appleMalformedAnswer(environment, jobId: jobId, now: time, windowMilliseconds: window)
            }
            func verified(_ count: Int, at time: Int, _ environment: VerifyReceiptClient.Environment = .production) async throws {
                try await harness.queue.recordAppleVerified(environment, count: count, now: time, lifetimeMilliseconds: 3_600_000)
            }
            // One job alone, however often: nothing says Apple is in an incident.
            #expect(try await answer("a", at: now - 2_000) == AppleEvidence(verifications: 0, otherMalformed: 0))
            #expect(try await answer("a", at: now - 1_000) == AppleEvidence(verifications: 0, otherMalformed: 0))
            // Another job's 21002 within the window: an incident, until a receipt is verified.
            #expect(try await answer("b", at: now).looksLikeIncident)
            #expect(try await answer("a", at: now + 1) == AppleEvidence(verifications: 0, otherMalformed: 1))
            // Out of the window, it no longer counts.
            #expect(try await answer("a", at: now + window + 1) == AppleEvidence(verifications: 0, otherMalformed: 0))
            // The other environment is apart.
            #expect(try await answer("c", at: now, .sandbox) == AppleEvidence(verifications: 0, otherMalformed: 0))
            // Verifications by any worker within the window add up, from every stretch of it.
            let later = now + window + 2
            try await verified(2, at: later - window + ReceiptQueue.verificationBucketMilliseconds)
            try await verified(5, at: later)
            try await verified(1, at: later)
            #expect(try await answer("b", at: later + 1) == AppleEvidence(verifications: 8, otherMalformed: 1))
            // A stretch wholly before the window does not count.
            try await verified(100, at: later - window - ReceiptQueue.verificationBucketMilliseconds - 1)
            #expect(try await answer("b", at: later + 2).verifications == 8)
            #expect(try await answer("b", at: later + 2 * window) == AppleEvidence(verifications: 0, otherMalformed: 0))
            #expect(try await answer("c", at: later, .sandbox).verifiedLately == false)
        }
    }

    @Test("the verification count keeps its lifetime's stretches and drops older ones once it holds twice as many")
    func verificationCountPruned() async throws {
        try await Self.withQueue { harness in
            let length = ReceiptQueue.verificationBucketMilliseconds
            let lifetime = 5 * length
            let key = harness.queue.keys.appleVerifications(.production)
            let start = (WallClock.nowMilliseconds() / length) * length
            // Six stretches fit the lifetime (its five and the one under way); the count is pruned past twelve.
            for stretch in 0..<12 {
                try await harness.queue.recordAppleVerified(.production, count: 1, now: start + stretch * length, lifetimeMilliseconds: lifetime)
            }
            #expect(try await harness.redis.send("HLEN", key).int == 12)
            try await harness.queue.recordAppleVerified(.production, count: 1, now: start + 12 * length, lifetimeMilliseconds: lifetime)
            let kept = try await harness.redis.send("HKEYS", key).array?.compactMap { $0.string.flatMap(Int.init) }.sorted()
            #expect(kept == Array((start / length + 7)...(start / length + 12)))
            let ttl = try await harness.redis.send("PTTL", key).int ?? 0
            #expect(ttl > 0 && ttl <= lifetime)
        }
    }

    @Test("prepare can run any number of times")
    func prepareIsIdempotent() async throws {
        try await Self.withQueue { harness in
            try await harness.queue.prepare()
            try await harness.queue.prepare()
            let groups = try await harness.redis.send("XINFO", "GROUPS", harness.keys.stream).array ?? []
            #expect(groups.count == 1)
        }
    }

    @Test("enqueue creates one stream entry and a queued record")
    func enqueueCreates() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job(ipAddress: "192.168.1.1")
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .created(jobId: job.jobId))
            #expect(try await harness.xlen() == 1)
            #expect(try await harness.streamJobIds() == [job.jobId])
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .queued)
            #expect(record.attempts == 0)
            #expect(record.customerEmail == job.customerEmail)
            #expect(record.offerId == job.offerId)
            #expect(record.publisherId == job.publisherId)
            #expect(record.reason == nil)
            #expect(try await harness.pending(job))
            #expect(try await harness.queue.counts() == QueueCounts(queued: 1, processing: 0, retrying: 0, dead: 0))
            #expect(try await harness.queue.record(jobId: "no-such-job") == nil)
        }
    }

    @Test("in one call of the enqueue script, a submission whose key holds another type fails alone; the others are decided")
    func enqueueItemFails() async throws {
        try await Self.withQueue { harness in
            let (first, broken, last) = (Fixtures.job(), Fixtures.job(transactionId: Fixtures.transactionId()), Fixtures.job())
            try await harness.redis.send("SET", harness.keys.pending(for: broken), "not a set")
            let items = [first, broken, last].map { harness.queue.submission($0, keyTTLSeconds: Self.ttl) }
            let reply = try await harness.redis.run(
                QueueScripts.enqueue, keys: [harness.keys.stream, harness.keys.inflight] + items.flatMap(\.keys),
                arguments: [harness.keys.jobPrefix, harness.keys.accessChannel] + items.flatMap(\.arguments)
            )
            let parts = try #require(reply.array)
            // A created job's reply is the bare word; any other reply is an array that says what it is.
            #expect(parts.map(\.string) == ["created", nil, "created"])
            #expect(parts[1].array?.first?.string == "error")
            #expect(try #require(reply.array)[1].array?[1].string?.hasPrefix("WRONGTYPE") == true)
            #expect(try await harness.pending(first))
            #expect(try await harness.pending(last))

            // Sent alone, through the queue: the error is thrown, not answered as a duplicate.
            try await harness.redis.send("DEL", harness.keys.dedup(for: broken))
            let error = await #expect(throws: RedisError.self) { try await harness.queue.enqueue(broken, keyTTLSeconds: Self.ttl) }
            #expect(error?.message.hasPrefix("WRONGTYPE") == true)
            #expect(error?.isUnavailable == false)
        }
    }

    @Test("counts without a consumer group (no worker has started yet, or Redis lost it): all queued, none processing")
    func countsWithoutGroup() async throws {
        try await Self.withQueue { harness in
            try await harness.redis.send("XGROUP", "DESTROY", harness.keys.stream, harness.keys.group)
            let job = Fixtures.job()
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .created(jobId: job.jobId))
            #expect(try await harness.queue.counts() == QueueCounts(queued: 1, processing: 0, retrying: 0, dead: 0))
            #expect(try await harness.queue.existing(job)?.jobId == job.jobId)
            #expect(try await harness.queue.existing(Fixtures.job()) == nil)
        }
    }

    @Test("the same submission again is a duplicate with the same job id, and no second entry")
    func duplicate() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .created(jobId: job.jobId))
            var again = job
            again.jobId = UUID().uuidString.lowercased()
            again.receiptData = "YW5vdGhlciByZWNlaXB0"
            #expect(try await harness.queue.enqueue(again, keyTTLSeconds: Self.ttl) == .duplicate(jobId: job.jobId, status: .queued))
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .duplicate(jobId: job.jobId, status: .queued))
            #expect(try await harness.xlen() == 1)
            #expect(try await harness.queue.record(jobId: again.jobId) == nil)
            // The duplicate reports the current status.
            _ = try await harness.read("worker-a")
            let delivery = try #require(try await harness.queue.readOwnPending(consumer: "worker-a", count: 10).first)
            _ = try await harness.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 100)
            #expect(try await harness.queue.enqueue(again, keyTTLSeconds: Self.ttl) == .duplicate(jobId: job.jobId, status: .processing))
        }
    }

    @Test("the same transaction for another customer is already claimed, and nothing is written")
    func alreadyClaimed() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job(customerEmail: "first@example.com")
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .created(jobId: job.jobId))
            let keysBefore = try await harness.redis.send("KEYS", "\(harness.keys.prefix):*").array?.count
            let other = Fixtures.job(publisherId: job.publisherId, customerEmail: "second@example.com", transactionId: job.transactionId)
            #expect(try await harness.queue.enqueue(other, keyTTLSeconds: Self.ttl) == .alreadyClaimed)
            // Also for another offer of the same publisher.
            let otherOffer = Fixtures.job(publisherId: job.publisherId, customerEmail: "second@example.com", offerId: "offer.other", transactionId: job.transactionId)
            #expect(try await harness.queue.enqueue(otherOffer, keyTTLSeconds: Self.ttl) == .alreadyClaimed)
            #expect(try await harness.xlen() == 1)
            #expect(try await harness.queue.record(jobId: other.jobId) == nil)
            #expect(try await harness.pending(other) == false)
            #expect(try await harness.redis.send("KEYS", "\(harness.keys.prefix):*").array?.count == keysBefore)
            // Another publisher's customer may use the same transaction id: claims are per publisher.
            let otherPublisher = Fixtures.job(customerEmail: "second@example.com", transactionId: job.transactionId)
            #expect(try await harness.queue.enqueue(otherPublisher, keyTTLSeconds: Self.ttl) == .created(jobId: otherPublisher.jobId))
        }
    }

    @Test("a dedup key whose job is gone passes to the next submission; resubmitting refreshes the customer's own claim")
    func staleDedupAndOwnClaim() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job(customerEmail: "first@example.com")
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .created(jobId: job.jobId))
            let dedup = harness.keys.dedup(for: job)
            let claim = harness.keys.claim(publisherId: job.publisherId, transactionId: try #require(job.transactionId))
            // The job's status expired before its dedup key did.
            try await harness.redis.send("DEL", harness.keys.job(job.jobId))
            // Another customer is still refused, and the stale dedup key stays as it was.
            let other = Fixtures.job(publisherId: job.publisherId, customerEmail: "second@example.com", transactionId: job.transactionId)
            #expect(try await harness.queue.enqueue(other, keyTTLSeconds: Self.ttl) == .alreadyClaimed)
            #expect(try await harness.redis.send("GET", dedup).string == job.jobId)
            // The same submission makes a new job, which the dedup key now names.
            try await harness.redis.send("EXPIRE", claim, "100")
            var again = job
            again.jobId = UUID.random().lowercasedString
            #expect(try await harness.queue.enqueue(again, keyTTLSeconds: Self.ttl) == .created(jobId: again.jobId))
            #expect(try await harness.redis.send("GET", dedup).string == again.jobId)
            #expect(try await harness.redis.send("TTL", dedup).int ?? 0 > Self.ttl - 60)
            // The vanished job still counts as a holder (nothing can tell it is gone): the claim outlives the new
            // job's ending, until its lifetime runs out.
            #expect(try await harness.redis.send("GET", claim).string == "first@example.com\n2")
            #expect(try await harness.redis.send("TTL", claim).int ?? 0 > Self.ttl - 60, "the claim's lifetime starts again")
            var third = job
            third.jobId = UUID.random().lowercasedString
            #expect(try await harness.queue.enqueue(third, keyTTLSeconds: Self.ttl) == .duplicate(jobId: again.jobId, status: .queued))
            #expect(try await harness.xlen() == 2)
        }
    }

    @Test("concurrent submissions are each decided in order: one job per submission, one customer per transaction")
    func concurrentSubmissions() async throws {
        try await Self.withQueue { harness in
            let publisherId = UUID()
            let first = Fixtures.job(publisherId: publisherId, customerEmail: "same@example.com", transactionId: Fixtures.transactionId())
            // The same submission eight times (fresh job ids), and one transaction for eight customers.
            let resubmissions = (0..<8).map { _ in
                var again = first
                again.jobId = UUID.random().lowercasedString
                return again
            }
            let contested = Fixtures.transactionId()
            let customers = (0..<8).map { Fixtures.job(publisherId: publisherId, customerEmail: "c\($0)@example.com", transactionId: contested) }
            let distinct = (0..<16).map { _ in Fixtures.job(publisherId: publisherId, transactionId: Fixtures.transactionId()) }
            let all = resubmissions + customers + distinct
            let outcomes = try await withThrowingTaskGroup(of: (String, EnqueueOutcome).self) { group in
                for job in all {
                    group.addTask { (job.jobId, try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl)) }
                }
                var outcomes: [String: EnqueueOutcome] = [:]
                for try await (jobId, outcome) in group { outcomes[jobId] = outcome }
                return outcomes
            }

            let sameCreated = resubmissions.filter { outcomes[$0.jobId] == .created(jobId: $0.jobId) }
            try #require(sameCreated.count == 1)
            for job in resubmissions where job.jobId != sameCreated[0].jobId {
                #expect(outcomes[job.jobId] == .duplicate(jobId: sameCreated[0].jobId, status: .queued))
            }
            let winners = customers.filter { outcomes[$0.jobId] == .created(jobId: $0.jobId) }
            try #require(winners.count == 1)
            for job in customers where job.jobId != winners[0].jobId {
                #expect(outcomes[job.jobId] == .alreadyClaimed)
            }
            for job in distinct { #expect(outcomes[job.jobId] == .created(jobId: job.jobId)) }
            #expect(Set(try await harness.streamJobIds()) == Set([sameCreated[0].jobId, winners[0].jobId] + distinct.map(\.jobId)))
            #expect(try await harness.pending(winners[0]))
            #expect(try await harness.queue.record(jobId: winners[0].jobId)?.customerEmail == winners[0].customerEmail)
        }
    }

    @Test("without a transaction id, the receipt digest deduplicates")
    func receiptDigestDedup() async throws {
        try await Self.withQueue { (harness: Harness) async throws in
            let job = Fixtures.job(transactionId: nil, receiptData: "cmVjZWlwdC1B")
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .created(jobId: job.jobId))
            let sameReceipt = Fixtures.job(publisherId: job.publisherId, transactionId: nil, receiptData: "cmVjZWlwdC1B")
            #expect(try await harness.queue.enqueue(sameReceipt, keyTTLSeconds: Self.ttl) == .duplicate(jobId: job.jobId, status: .queued))
            let otherReceipt = Fixtures.job(publisherId: job.publisherId, transactionId: nil, receiptData: "cmVjZWlwdC1C")
            #expect(try await harness.queue.enqueue(otherReceipt, keyTTLSeconds: Self.ttl) == .created(jobId: otherReceipt.jobId))
            #expect(try await harness.xlen() == 2)
        }
    }

    @Test("start marks the job processing and hands out attempt 1 with the payload")
    func start() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job(ipAddress: "10.1.2.3")
            _ = try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl)
            let deliveries = try await harness.read("worker-a")
            try #require(deliveries.count == 1)
            #expect(deliveries[0].jobId == job.jobId)
            let outcome = try await harness.queue.start(deliveries[0], now: WallClock.nowMilliseconds(), maxStarts: 100)
            #expect(outcome == .ready(job, attempt: 1, acceptedAtMilliseconds: job.acceptedAtMilliseconds, startedBefore: false))
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .processing)
            #expect(record.attempts == 1)
            #expect(try await harness.queue.counts() == QueueCounts(queued: 0, processing: 1, retrying: 0, dead: 0))
            // A second delivery of the same entry counts a second attempt.
            #expect(try await harness.queue.start(deliveries[0], now: WallClock.nowMilliseconds(), maxStarts: 100)
                == .ready(job, attempt: 2, acceptedAtMilliseconds: job.acceptedAtMilliseconds, startedBefore: true))
            #expect(try await harness.queue.start(QueueDelivery(entryId: "0-1", jobId: "missing", consumer: "worker-a"), now: 0, maxStarts: 100) == .missing)
        }
    }

    @Test("finish granted: record granted, entry acked and deleted, payload gone, the hash compact with every other field, TTL set, nothing pending")
    func finishGranted() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            #expect(try await harness.field(job.jobId, "payload") != nil)
            #expect(try await harness.encoding(job.jobId) == "hashtable", "the receipt makes the hash a table")
            let before = try await harness.fields(job.jobId)
            #expect(try await harness.pending(job))
            try await harness.queue.finish(
                delivery, job: job, status: .granted, reason: nil, environment: "Production", expiresAt: 1_900_000_000,
                now: WallClock.nowMilliseconds(), retentionSeconds: Self.retention
            )
            // Redis keeps a hash table once made, so the final status is rebuilt without the receipt, and keeps
            // every other field the job had.
            #expect(try await harness.encoding(job.jobId) == "listpack")
            let after = try await harness.fields(job.jobId)
            #expect(Set(after.keys) == Set(before.keys).subtracting(["payload"]).union(["updatedAt", "finishedBy", "environment", "expiresAt"]))
            for name in ["customerEmail", "offerId", "publisherId", "acceptedAt", "entry", "claimed", "attempts"] {
                #expect(after[name] != nil && after[name] == before[name], "\(name)")
            }
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .granted)
            #expect(record.environment == "Production")
            #expect(record.expiresAt == 1_900_000_000)
            #expect(record.reason == nil)
            #expect(try await harness.xlen() == 0)
            #expect(try await harness.pendingCount() == 0)
            #expect(try await harness.redis.send("HEXISTS", harness.keys.job(job.jobId), "payload") == .integer(0))
            let ttl = try #require(try await harness.redis.send("TTL", harness.keys.job(job.jobId)).int)
            #expect(ttl > 0 && ttl <= Self.retention)
            #expect(try await harness.pending(job) == false)
            #expect(try await harness.redis.send("EXISTS", harness.keys.pending(for: job)) == .integer(0))
            // A replayed delivery finds the job final.
            #expect(try await harness.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 100) == .final(.granted))
            // And a resubmission is a duplicate of the granted job.
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .duplicate(jobId: job.jobId, status: .granted))
            #expect(try await harness.queue.counts() == QueueCounts(queued: 0, processing: 0, retrying: 0, dead: 0))
        }
    }

    @Test("finish rejected records the reason")
    func finishRejected() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            try await harness.queue.finish(
                delivery, job: job, status: .rejected, reason: .bundleMismatch, environment: nil, expiresAt: nil,
                now: WallClock.nowMilliseconds(), retentionSeconds: Self.retention
            )
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .rejected)
            #expect(record.reason == "bundle_mismatch")
            #expect(record.expiresAt == nil)
            #expect(try await harness.pending(job) == false)
            #expect(try await harness.xlen() == 0)
            #expect(try await harness.encoding(job.jobId) == "listpack")
        }
    }

    @Test("a final status that would not fit a listpack (a consumer name past 64 bytes) is left a hash table, whole, with its TTL")
    func finishLeavesWideStatus() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job, consumer: String(repeating: "w", count: 70))
            let key = harness.keys.job(job.jobId)
            let before = try await harness.fields(job.jobId)
            try await harness.queue.finish(
                delivery, job: job, status: .granted, reason: nil, environment: "Production", expiresAt: 1_900_000_000,
                now: WallClock.nowMilliseconds(), retentionSeconds: Self.retention
            )
            #expect(try await harness.encoding(job.jobId) == "hashtable")
            let after = try await harness.fields(job.jobId)
            #expect(after["finishedBy"]?.hasSuffix(String(repeating: "w", count: 70)) == true)
            #expect(Set(after.keys) == Set(before.keys).subtracting(["payload"]).union(["updatedAt", "finishedBy", "environment", "expiresAt"]))
            let ttl = try #require(try await harness.redis.send("TTL", key).int)
            #expect(ttl > 0 && ttl <= Self.retention)
        }
    }

    @Test("a grant over a dead letter rebuilds the status compact, with its TTL set again")
    func grantOverDeadLetterCompacts() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            let key = harness.keys.job(job.jobId)
            let now = WallClock.nowMilliseconds()
            try await harness.queue.deadLetter(delivery, job: job, reason: .appleUnavailable, detail: "", now: now, retentionSeconds: Self.retention)
            #expect(try await harness.encoding(job.jobId) == "hashtable", "a dead letter keeps its receipt")
            try await harness.queue.finish(
                delivery, job: job, status: .granted, reason: nil, environment: "Production", expiresAt: nil,
                now: now, retentionSeconds: Self.retention
            )
            #expect(try await harness.queue.record(jobId: job.jobId)?.status == .granted)
            #expect(try await harness.encoding(job.jobId) == "listpack")
            #expect(try await harness.field(job.jobId, "deadEntry") == nil)
            let ttl = try #require(try await harness.redis.send("TTL", key).int)
            #expect(ttl > 0 && ttl <= Self.retention)
        }
    }

    @Test("a job that ends without a grant gives its transaction up to other customers; a grant keeps it", arguments: ["rejected", "failed", "granted"])
    func claimOutlivesOnlyGrants(_ outcome: String) async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job(customerEmail: "first@example.com")
            let delivery = try await harness.enqueueAndStart(job)
            let now = WallClock.nowMilliseconds()
            switch outcome {
            case "failed":
                try await harness.queue.deadLetter(delivery, job: job, reason: .appleUnavailable, detail: "", now: now, retentionSeconds: Self.retention)
            default:
                try await harness.queue.finish(
                    delivery, job: job, status: outcome == "granted" ? .granted : .rejected, reason: outcome == "granted" ? nil : .transactionNotFound,
                    environment: nil, expiresAt: nil, now: now, retentionSeconds: Self.retention
                )
            }
            let other = Fixtures.job(publisherId: job.publisherId, customerEmail: "second@example.com", transactionId: job.transactionId)
            let expected: EnqueueOutcome = outcome == "granted" ? .alreadyClaimed : .created(jobId: other.jobId)
            #expect(try await harness.queue.enqueue(other, keyTTLSeconds: Self.ttl) == expected)
            // A late copy of the first job, finishing again, never takes the second customer's claim away.
            try await harness.queue.finish(
                delivery, job: job, status: .rejected, reason: .transactionNotFound, environment: nil, expiresAt: nil,
                now: now, retentionSeconds: Self.retention
            )
            let third = Fixtures.job(publisherId: job.publisherId, customerEmail: "third@example.com", transactionId: job.transactionId)
            #expect(try await harness.queue.enqueue(third, keyTTLSeconds: Self.ttl) == .alreadyClaimed)
        }
    }

    @Test("retry: status retrying with the next attempt time, entry acked, job in the retry set")
    func retry() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            let now = WallClock.nowMilliseconds()
            let due = now + 30_000
            try await harness.queue.retry(delivery, jobId: job.jobId, dueAt: due, reason: .appleUnavailable, now: now)
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .retrying)
            #expect(record.nextAttemptAtMilliseconds == due)
            #expect(record.reason == "apple_unavailable")
            #expect(record.attempts == 1)
            #expect(try await harness.pendingCount() == 0)
            #expect(try await harness.xlen() == 0)
            #expect(try await harness.redis.send("ZSCORE", harness.keys.retry, job.jobId).int == due)
            #expect(try await harness.pending(job), "a retrying job is still pending for access status")
            #expect(try await harness.queue.counts() == QueueCounts(queued: 0, processing: 0, retrying: 1, dead: 0))
            // Not due yet: nothing moves.
            #expect(try await harness.queue.promoteDue(now: now) == 0)
            #expect(try await harness.xlen() == 0)
        }
    }

    @Test("hosts whose clocks are ten minutes off keep Redis' time: a retry one parks a minute out is released neither early nor late by the other's promoter", arguments: [-600_000, 600_000])
    func clockFromRedis(_ skew: Int) async throws {
        try await Self.withQueue { harness in
            let skewed = ReceiptQueue(redis: harness.redis, prefix: harness.keys.prefix, clock: QueueClock(host: { QueueClock.hostMilliseconds() + skew }))
            // Readings are off by up to half a round trip, which a loaded machine stretches: ten minutes, measured in seconds.
            #expect(abs(skewed.clock.nowMilliseconds() - WallClock.nowMilliseconds() - skew) < 5000, "before its first reading it keeps the host's time")
            try await skewed.prepare()
            let reply = try await harness.redis.send("TIME").array ?? []
            let redisNow = (reply.first?.string.flatMap(Int.init) ?? 0) * 1000 + (reply.last?.string.flatMap(Int.init) ?? 0) / 1000
            #expect(abs(skewed.clock.nowMilliseconds() - redisNow) < 5000)
            let offBy = try await skewed.synchronizeClock()
            #expect(abs(offBy - skew) < 5000, "it reports how far the host is off")

            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            let parkedAt = skewed.clock.nowMilliseconds()
            try await skewed.retry(delivery, jobId: job.jobId, dueAt: parkedAt + 60_000, reason: .appleUnavailable, now: parkedAt)
            #expect(try await harness.queue.promoteDue(now: harness.queue.clock.nowMilliseconds()) == 0, "not due for a minute")
            #expect(try await harness.queue.promoteDue(now: harness.queue.clock.nowMilliseconds() + 70_000) == 1, "due a minute on")
        }
    }

    @Test("a reading of Redis' clock whose round trip a saturated machine stretched does not move the queue's clock; a step of either clock does")
    func clockKeepsQuickReading() async throws {
        try await Self.withQueue { harness in
            // A synchronisation reads the host's clock twice per reading of TIME, before and after, and nothing
            // else reads this one: `late` is added to every second read (the answer seen that much later, its
            // midpoint half of it later), `step` to every read.
            let script = Mutex((reads: 0, late: 0, step: 0))
            let clock = QueueClock(host: {
                let extra = script.withLock { script in
                    defer { script.reads += 1 }
                    return script.step + (script.reads % 2 == 1 ? script.late : 0)
                }
                return QueueClock.hostMilliseconds() + extra
            })
            // Any round trip may be stretched by a loaded machine: read until one is quick.
            func quickReading() async throws -> QueueClock.Reading {
                try await Poll.until(timeout: .seconds(30), "a quick reading of Redis' clock") {
                    try await clock.synchronize(with: harness.redis)
                    return clock.reading.flatMap { $0.roundTrip < 100 ? $0 : nil }
                }
            }
            let quick = try await quickReading()
            // Under a second, so the release before this one took it.
            script.withLock { $0.late = 900 }
            #expect(try await clock.synchronize(with: harness.redis) == -quick.offset, "a 900 ms round trip says less than the quick reading in use")
            #expect(clock.reading == quick)
            script.withLock { $0.step = 60_000 }
            let stepped = try await clock.synchronize(with: harness.redis)
            let slow = try #require(clock.reading)
            #expect(slow.roundTrip >= 900)
            #expect(abs(stepped - 60_450) <= (slow.roundTrip - 900) / 2 + 2, "a minute from the reading in use, the slow reading is the one that can be right")
            script.withLock { $0.late = 0 }
            let again = try await quickReading()
            #expect(abs(-again.offset - 60_000) <= again.roundTrip / 2 + 2, "and a quick reading replaces it")
        }
    }

    @Test("a reading replaces the one in use when its round trip is as short as that one's with the drift since, or when their ranges do not meet", arguments: [
        // (offset, round trip, at) of the new reading against (0, 2, 0): 1 ms of drift every 10 s widens the old,
        // and each range is 2 ms wider for the whole milliseconds a reading is taken in.
        (1, 2, 1000, true), (0, 3, 1000, false), (0, 4, 10_000, true), (40, 80, 60_000, false), (0, 40, 600_000, true),
        (5000, 900, 60_000, true), (462, 900, 60_000, true), (461, 900, 60_000, false), (-462, 900, 60_000, true),
    ])
    func clockReadingReplaces(offset: Int, roundTrip: Int, at: Int, replaces: Bool) {
        let current = QueueClock.Reading(offset: 0, roundTrip: 2, at: 0)
        #expect(QueueClock.Reading(offset: offset, roundTrip: roundTrip, at: at).replaces(current) == replaces)
    }

    @Test("QueueClockSync warns once when this host's clock is more than a second off Redis', not at every reading, and again after it was back in step")
    func clockSkewWarnedOnce() async throws {
        try await Self.withQueue { harness in
            // Nothing else reads this clock, and each synchronisation reads the host's clock six times (three
            // readings): a new skew takes effect at the next synchronisation, never within one, whose round
            // trips would then look negative or minutes long.
            let skew = Atomic<Int>(0)
            let host = Mutex((reads: 0, skew: 0))
            let clock = QueueClock(host: {
                let offset = host.withLock { host in
                    if host.reads % 6 == 0 { host.skew = skew.load(ordering: .relaxed) }
                    host.reads += 1
                    return host.skew
                }
                return QueueClock.hostMilliseconds() + offset
            })
            let lines = CapturedLines()
            let sync = QueueClockSync(
                queue: ReceiptQueue(redis: harness.redis, prefix: harness.keys.prefix, clock: clock), interval: .milliseconds(20),
                logger: Logger(label: "test.clock") { _ in lines }
            )
            let warning = "this host's clock is off from Redis' clock; the queue keeps Redis' time"
            func synchronisations(_ count: Int) async throws {
                let target = host.withLock { $0.reads } + 6 * count
                _ = try await Poll.until(timeout: .seconds(30), "\(count) more readings of Redis' clock") {
                    host.withLock { $0.reads } >= target ? true : nil
                }
            }
            func warned(_ count: Int) async throws -> Int {
                _ = try await Poll.until(timeout: .seconds(30), "warning \(count)") { lines.count(warning) >= count ? true : nil }
                return try #require(lines.metadata(of: warning).last?["skew_ms"].flatMap { Int($0.description) })
            }
            let running = Task { await sync.run() }
            defer { running.cancel() }

            try await synchronisations(3)
            #expect(lines.count(warning) == 0, "a host in step with Redis is not warned about")
            skew.store(600_000, ordering: .relaxed)
            #expect(abs(try await warned(1) - 600_000) < 5000, "it says how far off, and which way")
            try await synchronisations(3)
            #expect(lines.count(warning) == 1, "still off: not said again at every reading")
            skew.store(0, ordering: .relaxed)
            try await synchronisations(3)
            skew.store(-600_000, ordering: .relaxed)
            #expect(abs(try await warned(2) + 600_000) < 5000, "off again after it was back in step: said again")
            #expect(lines.count(warning) == 2)
            running.cancel()
            await running.value
        }
    }

    @Test("promoteDue moves only due jobs, and never twice even when called concurrently")
    func promoteDue() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            let dueJob = Fixtures.job(transactionId: Fixtures.transactionId())
            let laterJob = Fixtures.job(transactionId: Fixtures.transactionId())
            let dueDelivery = try await harness.enqueueAndStart(dueJob)
            let laterDelivery = try await harness.enqueueAndStart(laterJob)
            try await harness.queue.retry(dueDelivery, jobId: dueJob.jobId, dueAt: now - 1000, reason: .appleUnavailable, now: now)
            try await harness.queue.retry(laterDelivery, jobId: laterJob.jobId, dueAt: now + 600_000, reason: .appleUnavailable, now: now)
            #expect(try await harness.xlen() == 0)

            let moved = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<12 { group.addTask { try await harness.queue.promoteDue(now: now) } }
                var total = 0
                for try await count in group { total += count }
                return total
            }
            #expect(moved == 1)
            #expect(try await harness.streamJobIds() == [dueJob.jobId])
            #expect(try await harness.redis.send("ZRANGE", harness.keys.retry, "0", "-1") == .array([.bulk(Array(laterJob.jobId.utf8))]))
            #expect(try await harness.queue.promoteDue(now: now) == 0)

            // The promoted job is delivered again and starts its second attempt.
            let again = try await harness.read("worker-b")
            #expect(again.map(\.jobId) == [dueJob.jobId])
            let outcome = try await harness.queue.start(try #require(again.first), now: WallClock.nowMilliseconds(), maxStarts: 100)
            #expect(outcome == .ready(dueJob, attempt: 2, acceptedAtMilliseconds: dueJob.acceptedAtMilliseconds, startedBefore: true))
            // Processing again: the last attempt's reason and due time belong to `retrying`, not to this status.
            let record = try #require(try await harness.queue.record(jobId: dueJob.jobId))
            #expect(record.status == .processing && record.reason == nil && record.nextAttemptAtMilliseconds == nil)
        }
    }

    @Test("a job parked by one copy and ended by another leaves the retry set; requeued, it is on the stream once")
    func parkedCopyEnded() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            let failing = Fixtures.job()
            let granted = Fixtures.job()
            // Copy A of each job is parked; copy B (a peer's claim of the same entry) ends it.
            let failingDelivery = try await harness.enqueueAndStart(failing)
            let grantedDelivery = try await harness.enqueueAndStart(granted)
            try await harness.queue.retry(failingDelivery, jobId: failing.jobId, dueAt: now + 1000, reason: .appleUnavailable, now: now)
            try await harness.queue.retry(grantedDelivery, jobId: granted.jobId, dueAt: now + 1000, reason: .appleUnavailable, now: now)
            try await harness.queue.deadLetter(nil, job: failing, reason: .appleUnavailable, detail: "x", now: now, retentionSeconds: Self.retention)
            try await harness.queue.finish(
                grantedDelivery, job: granted, status: .granted, reason: nil, environment: "Production", expiresAt: nil, now: now,
                retentionSeconds: Self.retention
            )
            #expect(try await harness.queue.counts().retrying == 0, "neither is retrying")

            // The operator requeues the dead letter; the parked copy's due time passes.
            #expect(try await harness.queue.requeue(
                jobId: failing.jobId, publisherId: failing.publisherId, customerEmail: failing.customerEmail, offerId: failing.offerId,
                now: now, keyTTLSeconds: Self.ttl
            ) == .requeued)
            // Left in the set by an older version, a final job is not put back either.
            try await harness.redis.send("ZADD", harness.keys.retry, String(now), granted.jobId)
            _ = try await harness.queue.promoteDue(now: now + 2000)
            #expect(try await harness.streamJobIds() == [failing.jobId], "the requeued job once, the granted one not at all")
            #expect(try await harness.queue.counts().retrying == 0)
        }
    }

    @Test("retrying a job another copy ended already only acknowledges its entry, and says so")
    func retryFinalJob() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            // Another copy of the job (a peer's run of it) granted it.
            try await harness.redis.send("HSET", harness.keys.job(job.jobId), "status", "granted")
            #expect(try await harness.queue.retry(delivery, jobId: job.jobId, dueAt: now + 1000, reason: .appleUnavailable, now: now) == .alreadyFinal)
            #expect(try await harness.queue.record(jobId: job.jobId)?.status == .granted)
            #expect(try await harness.queue.readOwnPending(consumer: "worker-a", count: 10).isEmpty, "the entry is acknowledged")
            #expect(try await harness.queue.counts().retrying == 0)
        }
    }

    /// The consumer names of the group.
    static func consumers(_ harness: Harness) async throws -> [String] {
        try await harness.redis.send("XINFO", "CONSUMERS", harness.keys.stream, harness.keys.group).array?.compactMap { entry in
            guard let fields = entry.array, let index = fields.firstIndex(where: { $0.string == "name" }), index + 1 < fields.count else { return nil }
            return fields[index + 1].string
        } ?? []
    }

    @Test("a consumer leaves the group only once it holds no entry")
    func leaveGroup() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job, consumer: "worker-a")
            func consumers() async throws -> [String] { try await Self.consumers(harness) }
            #expect(try await harness.queue.leaveGroup(consumer: "worker-a") == false, "it holds the job's entry")
            #expect(try await consumers() == ["worker-a"])
            try await harness.queue.finish(
                delivery, job: job, status: .granted, reason: nil, environment: "Production", expiresAt: nil, now: WallClock.nowMilliseconds(),
                retentionSeconds: Self.retention
            )
            #expect(try await harness.queue.leaveGroup(consumer: "worker-a"))
            #expect(try await consumers().isEmpty)
        }
    }

    @Test("the names of workers gone (holding nothing, idle past the limit) are removed from the group; one holding an entry stays")
    func forgetIdleConsumers() async throws {
        try await Self.withQueue { harness in
            _ = try await harness.enqueueAndStart(Fixtures.job(), consumer: "worker-a")
            for name in ["worker-b", "worker-c"] {
                _ = try await harness.redis.send("XGROUP", "CREATECONSUMER", harness.keys.stream, harness.keys.group, name)
            }
            #expect(try await Self.consumers(harness).sorted() == ["worker-a", "worker-b", "worker-c"])
            #expect(try await harness.queue.forgetIdleConsumers(idleMilliseconds: 3_600_000) == 0, "none idle that long")
            #expect(try await harness.queue.forgetIdleConsumers(idleMilliseconds: 0) == 2)
            #expect(try await Self.consumers(harness) == ["worker-a"], "it holds the job's entry")
        }
    }

    @Test("deadLetter: status failed, listed in dead letters, counted")
    func deadLetter() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            let now = WallClock.nowMilliseconds()
            try await harness.queue.deadLetter(delivery, job: job, reason: .appleUnavailable, detail: "apple status 21005", now: now, retentionSeconds: Self.retention)
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .failed)
            #expect(record.reason == "apple_unavailable")
            let letters = try await harness.queue.deadLetters(limit: 10).deadLetters
            #expect(letters == [DeadLetter(jobId: job.jobId, reason: "apple_unavailable", detail: "apple status 21005", failedAt: now)])
            #expect(try await harness.queue.counts().dead == 1)
            #expect(try await harness.queue.counts() == QueueCounts(queued: 0, processing: 0, retrying: 0, dead: 1))
            #expect(try await harness.pendingCount() == 0)
            #expect(try await harness.xlen() == 0)
            #expect(try await harness.pending(job) == false)
            // The receipt is kept so an operator can requeue.
            #expect(try await harness.field(job.jobId, "payload") != nil)
            #expect(try await harness.queue.start(delivery, now: now, maxStarts: 100) == .final(.failed))
        }
    }

    @Test("a job's outcome is recorded for one run: the same run's record sent again is still its own; a peer that claimed the entry, or a late dead letter, finds it final and counts nothing", arguments: ["granted", "rejected", "failed"])
    func finalRecordedOnce(_ outcome: String) async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let stalled = try await harness.enqueueAndStart(job)
            let claimed = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(20), "worker-b to claim the entry") { () async throws -> QueueDelivery? in
                try await harness.queue.autoclaim(consumer: "worker-b", minIdleMilliseconds: 1, cursor: "0-0", count: 10).deliveries.first
            }
            #expect(claimed.entryId == stalled.entryId && claimed.consumer != stalled.consumer)
            let now = harness.queue.clock.nowMilliseconds()
            func record(_ delivery: QueueDelivery?, _ status: String) async throws -> FinalRecord {
                switch status {
                case "failed":
                    try await harness.queue.deadLetter(delivery, job: job, reason: .appleUnavailable, detail: "out of attempts", now: now, retentionSeconds: Self.retention)
                default:
                    try await harness.queue.finish(
                        try #require(delivery), job: job, status: status == "granted" ? .granted : .rejected, reason: status == "granted" ? nil : .invalidReceipt,
                        environment: "Production", expiresAt: nil, now: now, retentionSeconds: Self.retention
                    )
                }
            }
            #expect(try await record(claimed, outcome) == .recorded)
            #expect(try await record(claimed, outcome) == .recorded, "its answer lost, the same run records again")
            // The stalled worker's copy of the same entry ends the job too, as it decided.
            #expect(try await record(stalled, outcome) == .alreadyFinal)
            #expect(try await record(stalled, "failed") == .alreadyFinal)
            #expect(try await record(nil, "failed") == .alreadyFinal, "a dead letter of a job off the stream")
            if outcome != "granted" {
                #expect(try await record(stalled, "rejected") == .alreadyFinal)
                // A grant (PostgreSQL's truth) replaces a rejection or a dead letter: its status changes, so it counts.
                #expect(try await record(stalled, "granted") == .recorded)
            }
            #expect(try await harness.queue.record(jobId: job.jobId)?.status == .granted)
            // A job whose status is gone (expired) counts, as before: no run is known to have counted it.
            _ = try await harness.redis.send("DEL", harness.keys.job(job.jobId))
            #expect(try await record(stalled, outcome) == .recorded)
        }
    }

    @Test("dead letters older than the retention leave the dead-letter stream when the next one is added")
    func deadLettersTrimmed() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            // Two entries a retention old and older (their jobs' statuses have expired), one just inside it.
            for (id, job) in [("\(now - Self.retention * 1000 - 60_000)-0", "gone-1"), ("\(now - Self.retention * 1000 - 1000)-0", "gone-2"), ("\(now - Self.retention * 1000 + 60_000)-0", "kept")] {
                try await harness.redis.send("XADD", harness.keys.dead, id, "job", job, "reason", "internal", "detail", "", "at", "0")
            }
            let job = Fixtures.job()
            try await harness.queue.deadLetter(try await harness.enqueueAndStart(job), job: job, reason: .internal, detail: "", now: now, retentionSeconds: Self.retention)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.map(\.jobId) == ["kept", job.jobId])
        }
    }

    @Test("dead letters are read a page at a time: each page but the last names where the next starts, and none is missed or repeated")
    func deadLetterPages() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            // Five entries, two in one millisecond, and one that is not a dead letter (it still takes a place).
            for (id, job) in [("\(now)-0", "a"), ("\(now)-1", "b"), ("\(now + 1)-0", nil), ("\(now + 2)-0", "c"), ("\(now + 3)-0", "d")] {
                if let job {
                    try await harness.redis.send("XADD", harness.keys.dead, id, "job", job, "reason", "internal", "detail", "", "at", String(now))
                } else {
                    try await harness.redis.send("XADD", harness.keys.dead, id, "other", "x")
                }
            }
            let first = try await harness.queue.deadLetters(limit: 2)
            #expect(first == DeadLetterPage(deadLetters: ["a", "b"].map { DeadLetter(jobId: $0, reason: "internal", detail: "", failedAt: now) }, next: "\(now)-1"))
            let second = try await harness.queue.deadLetters(limit: 2, after: first.next)
            #expect(second.deadLetters.map(\.jobId) == ["c"])
            #expect(second.next == "\(now + 2)-0")
            let last = try await harness.queue.deadLetters(limit: 2, after: second.next)
            #expect(last.deadLetters.map(\.jobId) == ["d"])
            #expect(last.next == nil, "nothing follows")
            let whole = try await harness.queue.deadLetters(limit: 5)
            #expect(whole.deadLetters.map(\.jobId) == ["a", "b", "c", "d"])
            #expect(whole.next == nil, "a page that ends at the last entry is the last")
            #expect(try await harness.queue.deadLetters(limit: 4).next == "\(now + 2)-0")
            // A cursor whose entry was requeued since (XDEL) still starts after it.
            try await harness.redis.send("XDEL", harness.keys.dead, "\(now)-1")
            #expect(try await harness.queue.deadLetters(limit: 10, after: "\(now)-1").deadLetters.map(\.jobId) == ["c", "d"])
            #expect(try await harness.queue.deadLetters(limit: 10, after: "\(now + 3)-0") == DeadLetterPage(deadLetters: [], next: nil))
            #expect(try await harness.queue.deadLetters(limit: 10, after: "18446744073709551615-18446744073709551615") == DeadLetterPage(deadLetters: [], next: nil))
            // Zero-padded, the last id (and one past the 127 characters Redis reads) is read as written without zeros.
            #expect(try await harness.queue.deadLetters(limit: 10, after: "018446744073709551615-18446744073709551615") == DeadLetterPage(deadLetters: [], next: nil))
            let padded = String(repeating: "0", count: 130) + "\(now + 2)-0"
            #expect(DeadLetterPage.isCursor(Substring(padded)))
            #expect(try await harness.queue.deadLetters(limit: 10, after: padded).deadLetters.map(\.jobId) == ["d"])
            #expect(DeadLetterPage.isCursor("18446744073709551615-0") && DeadLetterPage.isCursor("0-0") && DeadLetterPage.isCursor("007-1"))
            for text in ["18446744073709551616-0", "0-18446744073709551616", "", "1", "1-", "-1", "1-2-3", "+1-0", "1-+0", "1.0-0", "١-0"] {
                #expect(!DeadLetterPage.isCursor(Substring(text)), "\(text)")
            }
        }
    }

    @Test("dead letters older than the retention are dropped with no other job failing, and counted no more")
    func deadLettersTrimmedAlone() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            for (id, job) in [("\(now - Self.retention * 1000 - 1000)-0", "gone"), ("\(now - Self.retention * 1000 + 60_000)-0", "kept")] {
                try await harness.redis.send("XADD", harness.keys.dead, id, "job", job, "reason", "internal", "detail", "", "at", "0")
            }
            #expect(try await harness.queue.trimDeadLetters(now: now, retentionSeconds: Self.retention) == 1)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.map(\.jobId) == ["kept"])
            #expect(try await harness.queue.counts().dead == 1)
            #expect(try await harness.queue.trimDeadLetters(now: now, retentionSeconds: Self.retention) == 0)
        }
    }

    @Test("a job started more often than attempts allow, without finishing, is poison")
    func poison() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .created(jobId: job.jobId))
            let delivery = try #require(try await harness.read("worker-a").first)
            // Three starts that never record an outcome (crashed workers), with at most three starts allowed.
            for attempt in 1...3 {
                let outcome = try await harness.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 3)
                #expect(outcome == .ready(job, attempt: attempt, acceptedAtMilliseconds: job.acceptedAtMilliseconds, startedBefore: attempt > 1))
            }
            #expect(try await harness.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 3) == .poison(job, attempt: 4, acceptedAtMilliseconds: job.acceptedAtMilliseconds))
            // When it was accepted is the job's status record's, which a requeue restarts, as for a ready job.
            let requeuedAt = job.acceptedAtMilliseconds + 60_000
            _ = try await harness.redis.send("HSET", harness.keys.job(job.jobId), "acceptedAt", String(requeuedAt))
            #expect(try await harness.queue.start(delivery, now: WallClock.nowMilliseconds(), maxStarts: 3) == .poison(job, attempt: 5, acceptedAtMilliseconds: requeuedAt))
        }
    }

    @Test("deadLetter without a delivery (a job parked in the retry set)")
    func deadLetterWithoutDelivery() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            _ = try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl)
            try await harness.queue.deadLetter(nil, job: job, reason: .internal, detail: "d", now: 1, retentionSeconds: Self.retention)
            #expect(try await harness.queue.record(jobId: job.jobId)?.status == .failed)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.map(\.jobId) == [job.jobId])
        }
    }

    @Test("Redis at maxmemory: a submission is refused whole, while a worker starting meanwhile prepares the queue and the workers' scripts (start, finish, retry, dead-letter, promote, restore) still run: finishing jobs is what frees room")
    func workersRunWhenFull() async throws {
        let server = try await DedicatedRedis()
        try await TestEnvironment.using(server) {
            try await Self.withQueue(redisURL: server.url) { harness in
                let jobs = (0..<4).map { _ in Fixtures.job(transactionId: Fixtures.transactionId()) }
                for job in jobs { #expect(try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) == .created(jobId: job.jobId)) }
                let deliveries = try await harness.read("worker-a")
                try #require(deliveries.map(\.jobId) == jobs.map(\.jobId))
                let now = WallClock.nowMilliseconds()

                _ = try await harness.redis.send("CONFIG", "SET", "maxmemory", "1")
                await #expect { try await harness.queue.enqueue(Fixtures.job(), keyTTLSeconds: Self.ttl) } throws: { error in
                    (error as? RedisError)?.isUnavailable == true
                }
                #expect(try await harness.xlen() == 4, "nothing of the refused submission is written")
                // A worker starting now (a restart, or one added for the backlog) prepares the queue, then drains it.
                try await harness.queue.prepare()
                for delivery in deliveries {
                    guard case .ready = try await harness.queue.start(delivery, now: now, maxStarts: 100) else {
                        Issue.record("\(delivery.jobId) did not start")
                        continue
                    }
                }
                try await harness.queue.finish(
                    deliveries[0], job: jobs[0], status: .granted, reason: nil, environment: "Production", expiresAt: nil, now: now,
                    retentionSeconds: Self.retention
                )
                #expect(try await harness.field(jobs[0].jobId, "payload") == nil, "a final job forgets its receipt")
                let limit = (key: "apple status 21002", attempts: 3, repeatDueAt: now)
                #expect(try await harness.queue.retry(deliveries[1], jobId: jobs[1].jobId, dueAt: now - 1, reason: .appleUnavailable, now: now, limit: limit) == .parked(dueAt: now - 1))
                #expect(try await harness.field(jobs[1].jobId, "tries:apple status 21002") == "1")
                try await harness.queue.deadLetter(deliveries[2], job: jobs[2], reason: .appleUnavailable, detail: "x", now: now, retentionSeconds: Self.retention)
                #expect(try await harness.queue.promoteDue(now: now) == 1)
                #expect(try await harness.queue.restoreLost(olderThan: now + 1, now: now + 2) == 0)
                #expect(try await harness.queue.record(jobId: jobs[0].jobId)?.status == .granted)
                #expect(try await harness.queue.record(jobId: jobs[1].jobId)?.status == .retrying)
                #expect(try await harness.queue.record(jobId: jobs[2].jobId)?.status == .failed)
                #expect(try await harness.queue.record(jobId: jobs[3].jobId)?.status == .processing)
                #expect(try await harness.streamJobIds() == [jobs[3].jobId, jobs[1].jobId], "the retry is back on the stream")
                _ = try await harness.redis.send("CONFIG", "SET", "maxmemory", "0")
            }
        }
    }

    @Test("requeue puts a failed job back with fresh attempts; a second requeue finds it not failed")
    func requeue() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            // An answer with its own limit was counted before the job failed.
            #expect(try await harness.queue.retry(delivery, jobId: job.jobId, dueAt: 0, reason: .appleUnavailable, now: 0, limit: ("apple status 21999", 2, 0)) == .parked(dueAt: 0))
            try await harness.queue.deadLetter(delivery, job: job, reason: .appleUnavailable, detail: "x", now: WallClock.nowMilliseconds(), retentionSeconds: Self.retention)
            #expect(try await harness.field(job.jobId, "tries:apple status 21999") == "1")
            let before = try #require(try await harness.redis.send("TTL", harness.keys.job(job.jobId)).int)
            #expect(before > 0)

            let requeued = try await harness.queue.requeue(
                jobId: job.jobId, publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId, now: WallClock.nowMilliseconds(),
                keyTTLSeconds: Self.ttl
            )
            #expect(requeued == .requeued)
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .queued)
            #expect(record.attempts == 0)
            #expect(record.reason == nil)
            #expect(try await harness.field(job.jobId, "tries:apple status 21999") == nil, "fresh attempts, per answer too")
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
            #expect(try await harness.queue.counts() == QueueCounts(queued: 1, processing: 0, retrying: 0, dead: 0))
            #expect(try await harness.streamJobIds() == [job.jobId])
            #expect(try await harness.pending(job))
            #expect(try await harness.redis.send("TTL", harness.keys.job(job.jobId)) == .integer(-1), "a live job does not expire")

            let second = try await harness.queue.requeue(
                jobId: job.jobId, publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId, now: WallClock.nowMilliseconds(),
                keyTTLSeconds: Self.ttl
            )
            #expect(second == .notFailed(.queued))
            #expect(try await harness.xlen() == 1)
            #expect(try await harness.queue.requeue(jobId: "nope", publisherId: job.publisherId, customerEmail: "x", offerId: "y", now: 0, keyTTLSeconds: Self.ttl) == .missing)

            // The requeued job starts again from attempt 1.
            let again = try #require(try await harness.read("worker-b").first)
            guard case .ready(_, let attempt, _, _) = try await harness.queue.start(again, now: WallClock.nowMilliseconds(), maxStarts: 100) else {
                Issue.record("the requeued job did not start")
                return
            }
            #expect(attempt == 1)
        }
    }

    @Test("a stalled worker's late dead letter or rejection does not undo a requeue made meanwhile: it only acknowledges its entry", arguments: ["failed", "rejected"])
    func staleCopyAfterRequeue(_ outcome: String) async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job(transactionId: Fixtures.transactionId())
            let stalled = try await harness.enqueueAndStart(job)
            // A peer claims the entry of the stalled worker, dead-letters the job, and an operator requeues it.
            let claimed = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(20), "worker-b to claim the entry") { () async throws -> QueueDelivery? in
                try await harness.queue.autoclaim(consumer: "worker-b", minIdleMilliseconds: 1, cursor: "0-0", count: 10).deliveries.first
            }
            let now = harness.queue.clock.nowMilliseconds()
            #expect(try await harness.queue.deadLetter(claimed, job: job, reason: .appleUnavailable, detail: "out of attempts", now: now, retentionSeconds: Self.retention) == .recorded)
            let requeued = try await harness.queue.requeue(
                jobId: job.jobId, publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId, now: now, keyTTLSeconds: Self.ttl
            )
            #expect(requeued == .requeued)

            // The stalled worker wakes and records what it decided about the old entry.
            let late = outcome == "failed"
                ? try await harness.queue.deadLetter(stalled, job: job, reason: .appleUnavailable, detail: "stale", now: now, retentionSeconds: Self.retention)
                : try await harness.queue.finish(stalled, job: job, status: .rejected, reason: .invalidReceipt, environment: "Production", expiresAt: nil, now: now, retentionSeconds: Self.retention)
            #expect(late == .superseded)
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .queued)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)
            #expect(try await harness.pending(job), "still pending for access status")
            #expect(try await harness.redis.send("ZSCORE", harness.keys.inflight, job.jobId).int != nil, "still watched for a lost entry")
            let claim = harness.keys.claim(publisherId: job.publisherId, transactionId: try #require(job.transactionId))
            #expect(try await harness.redis.send("GET", claim).string != nil, "the requeued job keeps its transaction's claim")
            // The requeued job's own entry runs and is recorded as usual.
            let again = try #require(try await harness.read("worker-c").first)
            #expect(again.entryId != stalled.entryId)
            guard case .ready = try await harness.queue.start(again, now: now, maxStarts: 100) else {
                Issue.record("the requeued job did not start")
                return
            }
            try await harness.queue.finish(again, job: job, status: .rejected, reason: .invalidReceipt, environment: "Production", expiresAt: nil, now: now, retentionSeconds: Self.retention)
            #expect(try await harness.queue.record(jobId: job.jobId)?.status == .rejected)
        }
    }

    @Test("requeue takes the submission's dedup key and its transaction's claim again, unless another job or customer holds them")
    func requeueRetakesKeys() async throws {
        try await Self.withQueue { harness in
            let (job, claim, delivery) = try await harness.enqueueClaimedAndStart()
            try await harness.queue.deadLetter(delivery, job: job, reason: .appleUnavailable, detail: "x", now: WallClock.nowMilliseconds(), retentionSeconds: Self.retention)
            #expect(try await harness.redis.send("GET", claim) == .null, "a failed job gives up its transaction")
            // Meanwhile the dedup key expired.
            try await harness.redis.send("DEL", harness.keys.dedup(for: job))

            let requeued = try await harness.queue.requeue(
                jobId: job.jobId, publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId,
                now: WallClock.nowMilliseconds(), keyTTLSeconds: Self.ttl
            )
            #expect(requeued == .requeued)
            let other = Fixtures.job(publisherId: job.publisherId, customerEmail: "someone-else@example.com", transactionId: job.transactionId)
            #expect(try await harness.queue.enqueue(other, keyTTLSeconds: Self.ttl) == .alreadyClaimed, "the transaction is the requeued job's again")
            let again = Fixtures.job(publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId, transactionId: job.transactionId)
            #expect(try await harness.queue.enqueue(again, keyTTLSeconds: Self.ttl) == .duplicate(jobId: job.jobId, status: .queued))
            let ttl = try #require(try await harness.redis.send("TTL", claim).int)
            #expect((1...Self.ttl).contains(ttl))

            // A claim another customer took while the job was dead is left to them.
            let second = Fixtures.job(publisherId: job.publisherId, transactionId: Fixtures.transactionId())
            let secondClaim = harness.keys.claim(publisherId: second.publisherId, transactionId: try #require(second.transactionId))
            let secondDelivery = try await harness.enqueueAndStart(second)
            try await harness.queue.deadLetter(secondDelivery, job: second, reason: .internal, detail: "x", now: WallClock.nowMilliseconds(), retentionSeconds: Self.retention)
            try await harness.redis.send("SET", secondClaim, "someone-else@example.com")
            _ = try await harness.queue.requeue(
                jobId: second.jobId, publisherId: second.publisherId, customerEmail: second.customerEmail, offerId: second.offerId,
                now: WallClock.nowMilliseconds(), keyTTLSeconds: Self.ttl
            )
            #expect(try await harness.redis.send("GET", secondClaim).string == "someone-else@example.com")
        }
    }

    @Test("a job dead-lettered by its record (payload unreadable, so its claim was kept) holds its claim once when requeued, and lets it go when it ends")
    func requeueAfterDeadLetterByRecord() async throws {
        try await Self.withQueue { harness in
            let (job, claim, delivery) = try await harness.enqueueClaimedAndStart()
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            try await harness.queue.deadLetter(delivery, record: record, reason: .internal, detail: "x", now: WallClock.nowMilliseconds(), retentionSeconds: Self.retention)
            #expect(try await harness.redis.send("GET", claim).string == job.customerEmail, "no claim key was known: the claim stays")

            #expect(try await harness.queue.requeue(
                jobId: job.jobId, publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId,
                now: WallClock.nowMilliseconds(), keyTTLSeconds: Self.ttl
            ) == .requeued)
            #expect(try await harness.redis.send("GET", claim).string == job.customerEmail, "one holder, the requeued job, not two")

            // It ends without a grant: the transaction is free for another customer.
            let again = try #require(try await harness.read("worker-a").first { $0.jobId == job.jobId })
            guard case .ready = try await harness.queue.start(again, now: WallClock.nowMilliseconds(), maxStarts: 100) else {
                Issue.record("the requeued job did not start")
                return
            }
            try await harness.queue.finish(
                again, job: job, status: .rejected, reason: .invalidReceipt, environment: nil, expiresAt: nil, now: WallClock.nowMilliseconds(),
                retentionSeconds: Self.retention
            )
            #expect(try await harness.redis.send("GET", claim) == .null)
            let other = Fixtures.job(publisherId: job.publisherId, customerEmail: "someone-else@example.com", transactionId: job.transactionId)
            #expect(try await harness.queue.enqueue(other, keyTTLSeconds: Self.ttl) == .created(jobId: other.jobId))
        }
    }

    @Test("autoclaim: consumer B takes an entry consumer A has held past the minimum idle time")
    func autoclaim() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            _ = try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl)
            let held = try await harness.read("worker-a")
            try #require(held.count == 1)
            // Far from idle enough: nothing to take.
            let early = try await harness.queue.autoclaim(consumer: "worker-b", minIdleMilliseconds: 3_600_000, cursor: "0-0", count: 10)
            #expect(early.deliveries.isEmpty)

            let claimed = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(50), "worker-b to claim the entry") { () async throws -> [QueueDelivery]? in
                let result = try await harness.queue.autoclaim(consumer: "worker-b", minIdleMilliseconds: 100, cursor: "0-0", count: 10)
                return result.deliveries.isEmpty ? nil : result.deliveries
            }
            #expect(claimed.map(\.entryId) == held.map(\.entryId))
            #expect(claimed.map(\.consumer) == ["worker-b"])
            #expect(try await harness.queue.readOwnPending(consumer: "worker-b", count: 10) == claimed)
            #expect(try await harness.queue.readOwnPending(consumer: "worker-a", count: 10).isEmpty)
            let owners = try await harness.redis.send("XPENDING", harness.keys.stream, harness.keys.group, "-", "+", "10").array ?? []
            #expect(owners.count == 1)
            #expect(owners.first?.array?[1].string == "worker-b")
        }
    }

    @Test("keepHeld restarts the idle time of the entries a consumer still holds; claimed or acknowledged ones are left alone")
    func keepHeld() async throws {
        try await Self.withQueue { harness in
            for _ in 0..<3 { _ = try await harness.queue.enqueue(Fixtures.job(), keyTTLSeconds: Self.ttl) }
            let held = try await harness.read("worker-a")
            try #require(held.count == 3)
            let (kept, claimed, acknowledged) = (held[0].entryId, held[1].entryId, held[2].entryId)
            try await harness.queue.acknowledge(held[2])
            // Idle for 3 s: worker-b takes the second entry (a peer claimed it from a stalled worker-a).
            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(50), "the entries to be idle for 3 s") { () async throws -> Bool? in
                try await Self.pendingEntry(harness, kept).idle >= 3000 ? true : nil
            }
            let taken = try await harness.queue.autoclaim(consumer: "worker-b", minIdleMilliseconds: 3000, cursor: claimed, count: 1)
            #expect(taken.deliveries.map(\.entryId) == [claimed])

            #expect(try await harness.queue.keepHeld(consumer: "worker-a", entryIds: [kept, claimed, acknowledged]) == 1)
            let renewed = try await Self.pendingEntry(harness, kept)
            #expect(renewed.owner == "worker-a")
            #expect(renewed.deliveries == 1, "JUSTID: renewing is not a delivery")
            // Read after it, the entry claimed before the renewal has been idle at least as long, however slow the
            // machine; unrenewed, this one would have been idle 3 s longer.
            let other = try await Self.pendingEntry(harness, claimed)
            #expect(renewed.idle <= other.idle, "the idle time starts again (it was over 3,000 ms): \(renewed.idle) against \(other.idle)")
            #expect(other.owner == "worker-b")
            #expect(other.deliveries == 2)
            #expect(try await harness.pendingCount() == 2, "the acknowledged entry stays acknowledged")
            #expect(try await harness.queue.keepHeld(consumer: "worker-a", entryIds: []) == 0)
        }
    }

    @Test("only the worker holding an entry parks its job: a stalled worker's late retry changes nothing")
    func retryNeedsTheEntry() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job(transactionId: Fixtures.transactionId())
            let stalled = try await harness.enqueueAndStart(job)
            // worker-a stalled past the claim idle time; worker-b took the entry over and started the job.
            let taken = try #require(try await harness.queue.autoclaim(consumer: "worker-b", minIdleMilliseconds: 0, cursor: "0-0", count: 10).deliveries.first)
            #expect(taken.entryId == stalled.entryId)
            guard case .ready = try await harness.queue.start(taken, now: WallClock.nowMilliseconds(), maxStarts: 100) else {
                Issue.record("worker-b did not find the job ready")
                return
            }
            let now = WallClock.nowMilliseconds()
            #expect(try await harness.queue.retry(stalled, jobId: job.jobId, dueAt: now, reason: .appleUnavailable, now: now) == .notHeld)
            #expect(try await harness.queue.record(jobId: job.jobId)?.status == .processing, "worker-b's run still shows")
            #expect(try await harness.redis.send("ZCARD", harness.keys.retry).int == 0, "no third copy is on its way")
            #expect(try await Self.pendingEntry(harness, taken.entryId).owner == "worker-b")
            #expect(try await harness.queue.retry(stalled, jobId: job.jobId, dueAt: now, reason: .appleUnavailable, now: now, counts: false) == .notHeld)
            #expect(try await harness.field(job.jobId, "attempts") == "2", "a cut-off park of the stale copy gives nothing back either")

            // The holder parks it; after that the entry is nobody's, and the stalled copy still changes nothing.
            #expect(try await harness.queue.retry(taken, jobId: job.jobId, dueAt: now + 60_000, reason: .appleUnavailable, now: now) == .parked(dueAt: now + 60_000))
            #expect(try await harness.queue.retry(stalled, jobId: job.jobId, dueAt: now, reason: .internal, now: now) == .notHeld)
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .retrying)
            #expect(record.reason == "apple_unavailable")
            #expect(try await harness.redis.send("ZSCORE", harness.keys.retry, job.jobId).string == String(now + 60_000))
        }
    }

    /// One entry of the group's pending list: who holds it, for how long (ms), delivered how often.
    static func pendingEntry(_ harness: Harness, _ entryId: String) async throws -> (owner: String, idle: Int, deliveries: Int) {
        let reply = try await harness.redis.send("XPENDING", harness.keys.stream, harness.keys.group, entryId, entryId, "1")
        let entry = try #require(reply.array?.first?.array, "\(entryId) is not pending")
        return (try #require(entry[1].string), try #require(entry[2].int), try #require(entry[3].int))
    }

    @Test("autoclaim reports entries deleted while pending")
    func autoclaimDeleted() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            _ = try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl)
            let held = try #require(try await harness.read("worker-a").first)
            try await harness.redis.send("XDEL", harness.keys.stream, held.entryId)
            let deleted = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(50), "the deleted entry to be reported") { () async throws -> [String]? in
                let result = try await harness.queue.autoclaim(consumer: "worker-b", minIdleMilliseconds: 100, cursor: "0-0", count: 10)
                #expect(result.deliveries.isEmpty)
                return result.deleted.isEmpty ? nil : result.deleted
            }
            #expect(deleted == [held.entryId])
        }
    }

    @Test("readOwnPending pages through held entries by cursor, handing out each once")
    func readOwnPendingPages() async throws {
        try await Self.withQueue { harness in
            let jobs = (0..<5).map { _ in Fixtures.job(transactionId: Fixtures.transactionId()) }
            for job in jobs { _ = try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) }
            let held = try await harness.read("worker-a", count: 10)
            #expect(held.count == 5)
            var seen: [QueueDelivery] = []
            var cursor = "0"
            while true {
                let page = try await harness.queue.readOwnPending(consumer: "worker-a", after: cursor, count: 2)
                guard let last = page.last else { break }
                seen += page
                cursor = last.entryId
            }
            #expect(seen == held)
        }
    }

    @Test("a late copy of a finished job never overwrites its final status; a grant replaces a dead letter or a rejection")
    func finalStatusIsKept() async throws {
        try await Self.withQueue { harness in
            let job = Fixtures.job()
            let delivery = try await harness.enqueueAndStart(job)
            let now = WallClock.nowMilliseconds()
            try await harness.queue.finish(
                delivery, job: job, status: .granted, reason: nil, environment: "Production", expiresAt: nil, now: now, retentionSeconds: Self.retention
            )
            // A second worker that processed the same job concurrently now reports a retry, a failure, a rejection.
            try await harness.queue.retry(delivery, jobId: job.jobId, dueAt: now + 1000, reason: .appleUnavailable, now: now)
            try await harness.queue.deadLetter(delivery, job: job, reason: .appleUnavailable, detail: "late", now: now, retentionSeconds: Self.retention)
            try await harness.queue.finish(
                delivery, job: job, status: .rejected, reason: .invalidReceipt, environment: nil, expiresAt: nil, now: now, retentionSeconds: Self.retention
            )
            let record = try #require(try await harness.queue.record(jobId: job.jobId))
            #expect(record.status == .granted)
            #expect(record.reason == nil)
            #expect(try await harness.redis.send("ZCARD", harness.keys.retry).int == 0)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty)

            let other = Fixtures.job(transactionId: Fixtures.transactionId())
            let otherDelivery = try await harness.enqueueAndStart(other)
            try await harness.queue.deadLetter(otherDelivery, job: other, reason: .internal, detail: "x", now: now, retentionSeconds: Self.retention)
            try await harness.queue.finish(
                otherDelivery, job: other, status: .granted, reason: nil, environment: "Production", expiresAt: nil, now: now,
                retentionSeconds: Self.retention
            )
            #expect(try await harness.queue.record(jobId: other.jobId)?.status == .granted)
            #expect(try await harness.queue.deadLetters(limit: 10).deadLetters.isEmpty, "the grant took the job out of the dead letters")

            // A copy that ended rejected (the third 21002 of an outage) while another committed the grant.
            let third = Fixtures.job(transactionId: Fixtures.transactionId())
            let thirdDelivery = try await harness.enqueueAndStart(third)
            for status in [JobStatus.rejected, .granted] {
                try await harness.queue.finish(
                    thirdDelivery, job: third, status: status, reason: status == .rejected ? .invalidReceipt : nil, environment: "Production",
                    expiresAt: nil, now: now, retentionSeconds: Self.retention
                )
            }
            let granted = try #require(try await harness.queue.record(jobId: third.jobId))
            #expect(granted.status == .granted)
            #expect(granted.reason == nil)
        }
    }

    @Test("only the job that took a claim gives it up, and never once granted: the customer's jobs for other offers keep it")
    func claimHeldByItsJob() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            let publisher = UUID()
            func job(_ customer: String, _ offer: String, _ transactionId: String?) -> ReceiptJob {
                Fixtures.job(publisherId: publisher, customerEmail: customer, offerId: offer, transactionId: transactionId)
            }
            let transaction = Fixtures.transactionId()
            let first = job("first@example.com", "offer.one", transaction)
            let firstDelivery = try await harness.enqueueAndStart(first)
            // The same purchase submitted for another offer: a job of its own, which found the claim taken.
            let second = job("first@example.com", "offer.two", transaction)
            try await harness.queue.finish(
                try await harness.enqueueAndStart(second), job: second, status: .rejected, reason: .offerMismatch, environment: "Production",
                expiresAt: nil, now: now, retentionSeconds: Self.retention
            )
            let thief = job("second@example.com", "offer.one", transaction)
            #expect(try await harness.queue.enqueue(thief, keyTTLSeconds: Self.ttl) == .alreadyClaimed, "the first job still holds it")

            try await harness.queue.finish(
                firstDelivery, job: first, status: .granted, reason: nil, environment: "Production", expiresAt: nil, now: now,
                retentionSeconds: Self.retention
            )
            let third = job("first@example.com", "offer.three", transaction)
            try await harness.queue.deadLetter(
                try await harness.enqueueAndStart(third), job: third, reason: .internal, detail: "x", now: now, retentionSeconds: Self.retention
            )
            #expect(try await harness.queue.enqueue(thief, keyTTLSeconds: Self.ttl) == .alreadyClaimed, "granted to the first customer")
            let fourth = job("first@example.com", "offer.four", transaction)
            #expect(try await harness.queue.enqueue(fourth, keyTTLSeconds: Self.ttl) == .created(jobId: fourth.jobId), "still the owner's to submit")
        }
    }

    @Test("a claim two of a customer's jobs hold (one purchase submitted for two offers) is given up only when the last of them ends without a grant")
    func claimSharedByTwoJobs() async throws {
        try await Self.withQueue { harness in
            let now = WallClock.nowMilliseconds()
            let publisher = UUID()
            let transaction = Fixtures.transactionId()
            let first = Fixtures.job(publisherId: publisher, customerEmail: "first@example.com", offerId: "offer.one", transactionId: transaction)
            let second = Fixtures.job(publisherId: publisher, customerEmail: "first@example.com", offerId: "offer.two", transactionId: transaction)
            let other = Fixtures.job(publisherId: publisher, customerEmail: "second@example.com", offerId: "offer.one", transactionId: transaction)
            let firstDelivery = try await harness.enqueueAndStart(first)
            let secondDelivery = try await harness.enqueueAndStart(second)
            // The job that took the claim ends first, without a grant.
            try await harness.queue.finish(
                firstDelivery, job: first, status: .rejected, reason: .offerMismatch, environment: "Production", expiresAt: nil, now: now,
                retentionSeconds: Self.retention
            )
            #expect(try await harness.queue.enqueue(other, keyTTLSeconds: Self.ttl) == .alreadyClaimed, "the second job still holds it")
            // The last one ends without a grant too: the transaction is neither queued nor granted any more.
            try await harness.queue.deadLetter(secondDelivery, job: second, reason: .internal, detail: "x", now: now, retentionSeconds: Self.retention)
            #expect(try await harness.queue.enqueue(other, keyTTLSeconds: Self.ttl) == .created(jobId: other.jobId))
        }
    }

    @Test("a job whose entry was trimmed while waiting or pending is put back once; others are left alone")
    func restoreLost() async throws {
        try await Self.withQueue { harness in
            let waiting = Fixtures.job(transactionId: Fixtures.transactionId())
            let pending = Fixtures.job(transactionId: Fixtures.transactionId())
            let healthy = Fixtures.job(transactionId: Fixtures.transactionId())
            let finished = Fixtures.job(transactionId: Fixtures.transactionId())
            for job in [waiting, pending, healthy, finished] { _ = try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) }
            let delivered = try await harness.read("worker-a", count: 4)
            let pendingDelivery = try #require(delivered.first { $0.jobId == pending.jobId })
            let finishedDelivery = try #require(delivered.first { $0.jobId == finished.jobId })
            _ = try await harness.queue.start(pendingDelivery, now: WallClock.nowMilliseconds(), maxStarts: 100)
            _ = try await harness.queue.start(finishedDelivery, now: WallClock.nowMilliseconds(), maxStarts: 100)
            try await harness.queue.finish(
                finishedDelivery, job: finished, status: .granted, reason: nil, environment: "Production", expiresAt: nil,
                now: WallClock.nowMilliseconds(), retentionSeconds: Self.retention
            )
            // An operator trims two entries: one never delivered (re-added for the test), one held by a worker.
            let waitingEntry = try #require(try await harness.field(waiting.jobId, "entry"))
            try await harness.redis.send("XDEL", harness.keys.stream, waitingEntry, pendingDelivery.entryId)
            #expect(Set(try await harness.streamJobIds()) == [healthy.jobId])

            let now = WallClock.nowMilliseconds()
            #expect(try await harness.queue.restoreLost(olderThan: now + 1, now: now) == 2)
            #expect(Set(try await harness.streamJobIds()) == [waiting.jobId, pending.jobId, healthy.jobId])
            // Nothing is put back twice, and a finished job has left the in-flight set.
            #expect(try await harness.queue.restoreLost(olderThan: now + 2, now: now + 2) == 0)
            #expect(try await harness.streamJobIds().count == 3)
            #expect(try await harness.redis.send("ZSCORE", harness.keys.inflight, finished.jobId) == .null)
            // Recently seen jobs are not even checked.
            try await harness.redis.send("XDEL", harness.keys.stream, try #require(try await harness.field(waiting.jobId, "entry")))
            #expect(try await harness.queue.restoreLost(olderThan: now - 60_000, now: now) == 0)
        }
    }

    @Test("readOwnPending returns exactly what a consumer holds")
    func readOwnPending() async throws {
        try await Self.withQueue { harness in
            let jobs = (0..<3).map { _ in Fixtures.job(transactionId: Fixtures.transactionId()) }
            for job in jobs { _ = try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) }
            let a = try await harness.read("worker-a", count: 2)
            let c = try await harness.read("worker-c", count: 10)
            #expect(a.map(\.jobId) == jobs.prefix(2).map(\.jobId))
            #expect(c.map(\.jobId) == [jobs[2].jobId])
            #expect(try await harness.queue.readOwnPending(consumer: "worker-a", count: 10) == a)
            #expect(try await harness.queue.readOwnPending(consumer: "worker-c", count: 10) == c)
            #expect(try await harness.queue.readOwnPending(consumer: "worker-z", count: 10).isEmpty)
            // Acknowledged entries are no longer held.
            try await harness.queue.acknowledge(a[0])
            #expect(try await harness.queue.readOwnPending(consumer: "worker-a", count: 10) == [a[1]])
            // And a blocking read with nothing new returns empty.
            #expect(try await harness.read("worker-a").isEmpty)
        }
    }

    @Test("counts() tells queued, processing, retrying and dead apart")
    func counts() async throws {
        try await Self.withQueue { harness in
            #expect(try await harness.queue.counts() == QueueCounts(queued: 0, processing: 0, retrying: 0, dead: 0))
            let jobs = (0..<6).map { _ in Fixtures.job(transactionId: Fixtures.transactionId()) }
            for job in jobs { _ = try await harness.queue.enqueue(job, keyTTLSeconds: Self.ttl) }
            #expect(try await harness.queue.counts() == QueueCounts(queued: 6, processing: 0, retrying: 0, dead: 0))
            let held = try await harness.read("worker-a", count: 4)
            try #require(held.count == 4)
            #expect(try await harness.queue.counts() == QueueCounts(queued: 2, processing: 4, retrying: 0, dead: 0))
            let now = WallClock.nowMilliseconds()
            let byId = Dictionary(uniqueKeysWithValues: jobs.map { ($0.jobId, $0) })
            try await harness.queue.retry(held[0], jobId: held[0].jobId, dueAt: now + 60_000, reason: .appleUnavailable, now: now)
            try await harness.queue.deadLetter(held[1], job: try #require(byId[held[1].jobId]), reason: .internal, detail: "boom", now: now, retentionSeconds: Self.retention)
            try await harness.queue.finish(
                held[2], job: try #require(byId[held[2].jobId]), status: .granted, reason: nil, environment: "Sandbox", expiresAt: nil,
                now: now, retentionSeconds: Self.retention
            )
            #expect(try await harness.queue.counts() == QueueCounts(queued: 2, processing: 1, retrying: 1, dead: 1))
        }
    }
}
