import Logging
import Shared

/// Takes one delivery from start to a recorded outcome. Safe to run twice for one job (a replay after a
/// crash or a claim): the grant is idempotent in PostgreSQL, and a final job is only acknowledged.
struct JobProcessor: Sendable {
    let queue: ReceiptQueue
    let fulfiller: Fulfiller
    let retry: RetryPolicy
    let retentionSeconds: Int
    /// How long a final outcome's record is tried again while Redis is away: the claim idle time, after which
    /// a peer's claim would replay the entry anyway.
    let recordPatience: Duration
    let logger: Logger

    /// Starts allowed before a job counts as poison: every recorded attempt, plus a margin for workers
    /// killed mid-job (each such crash costs one start that never recorded an outcome).
    var maxStarts: Int { self.retry.maxAttempts + 3 }

    /// Starts past ``maxStarts`` a poison job is left pending while PostgreSQL cannot tell whether its grant
    /// committed for a reason other than an outage (a timeout, a permission or a schema out of step), before
    /// it is dead-lettered anyway: a claim every claim idle time must not loop on it for good.
    static let poisonLookupPatience = 10

    /// Runs one delivery. `onTrial`: the consumer runs it alone to learn whether PostgreSQL takes grants
    /// again (``DatabaseWatch``); finding it away then spends the attempt like any failure.
    func process(_ delivery: QueueDelivery, onTrial: Bool = false) async {
        var logger = self.logger
        logger[metadataKey: "job"] = "\(delivery.jobId)"
        guard !delivery.jobId.isEmpty else {
            logger.warning("dropping a stream entry without a job id", metadata: ["entry": "\(delivery.entryId)"])
            try? await self.queue.acknowledge(delivery)
            return
        }
        let start: StartOutcome
        let began = self.queue.clock.nowMilliseconds()
        let starting = ContinuousClock.now
        do {
            start = try await self.queue.start(delivery, now: began, maxStarts: self.maxStarts)
            WorkerMetrics.step(.start, ContinuousClock.now - starting)
        } catch {
            // The entry stays pending; a claim brings it back once Redis answers again.
            logger.warning("cannot start job", metadata: ["error": "\(error)"])
            return
        }
        switch start {
        case .missing:
            // Its status is gone (expired), or has no receipt (written by another version, or edited by hand).
            await self.endWithoutPayload(
                delivery, detail: "its receipt is missing from its status in Redis (another version of Tollgate, or an edit by hand): it cannot be verified",
                logger: logger
            )
        case .poison(let job, let attempt, let acceptedAt):
            let committed = await self.fulfiller.committed(job, logger: logger)
            if let committed, case .granted = committed {
                // Its grant committed; only recording it never happened (the worker died after the commit each
                // time): granted, not failed.
                await self.record(committed, delivery: delivery, job: job, attempt: attempt, acceptedAt: acceptedAt, logger: logger)
                return
            }
            // A shutdown cut the lookup off: nothing was learnt, and a claim asks again.
            guard !Task.isCancelled else { return }
            var detail = "poison: started \(attempt) times without finishing"
            switch committed {
            case .outage?:
                // However many starts: PostgreSQL away (the watch now holds intake off until it is back), or
                // every connection busy.
                fallthrough
            case .retry? where attempt <= self.maxStarts + Self.poisonLookupPatience:
                // PostgreSQL cannot tell whether it granted (away; or a timeout): the entry stays pending, and a
                // claim asks again later, instead of failing a job that may be granted.
                logger.warning("poison job, but PostgreSQL cannot tell whether its grant committed; leaving it for a later claim")
                return
            case .retry(_, let lookup, _, _)?:
                // Still cannot tell, and not for an outage: dead-lettered all the same, for an operator to see.
                // A requeue is safe: the grant is idempotent.
                detail += "; whether its grant committed is unknown (\(lookup))"
            default:
                break
            }
            do {
                try await self.deadLetter(delivery, job: job, reason: .internal, detail: detail, now: self.queue.clock.nowMilliseconds(), logger: logger)
            } catch {
                logger.warning("cannot dead-letter a poison job", metadata: ["error": "\(error)"])
            }
        case .unreadable(let attempt):
            // Written by another version of Tollgate (a newer API ahead of this worker): dead-letter it, so an
            // operator can requeue it once the workers are upgraded, instead of dropping or looping on it.
            let detail = "unreadable payload (attempt \(attempt)): written by another version of Tollgate? requeue it once the workers are upgraded"
            await self.endWithoutPayload(delivery, detail: detail, logger: logger)
        case .final(let status):
            logger.debug("job already final; acknowledging replayed entry", metadata: ["status": "\(status.rawValue)"])
            try? await self.queue.acknowledge(delivery)
        case .ready(let job, let attempt, let acceptedAt, let startedBefore):
            logger[metadataKey: "attempt"] = "\(attempt)"
            // The API's reading of Redis' clock stamped acceptedAt: two readings may differ by a few ms.
            // Once per run from acceptance (or a requeue): an attempt taken back (an outage, a shutdown) starts as 1 again.
            if attempt == 1, !startedBefore { WorkerMetrics.step(.wait, milliseconds: max(0, began - acceptedAt)) }
            WorkerMetrics.attempts.increment()
            WorkerMetrics.inFlight.increment(by: 1)
            var outcome: FulfilmentOutcome
            // An attempt taken back for an outage may have committed its grant as PostgreSQL went away (its
            // COMMIT's answer lost). A requeued job counts its attempts afresh, and its acceptedAt restarts (the
            // payload keeps the submission's): an attempt before the requeue may have committed its grant too.
            let requeued = acceptedAt != job.acceptedAtMilliseconds
            if attempt > 1 || startedBefore || requeued, let committed = await self.fulfiller.committed(job, logger: logger) {
                // An earlier attempt's grant is in PostgreSQL, and only its outcome was never recorded; or
                // PostgreSQL cannot tell now (a retry).
                if case .granted = committed { logger.info("granted by an earlier attempt; recording it") }
                outcome = committed
            } else {
                outcome = await self.fulfiller.fulfil(job, logger: logger)
            }
            WorkerMetrics.inFlight.decrement(by: 1)
            if onTrial, case .outage(let detail) = outcome {
                outcome = .retry(.internal, detail: detail, attemptLimit: nil, exhausted: .failed(.internal))
            }
            if Task.isCancelled, !outcome.isDecided {
                await self.park(cutOff: outcome, delivery: delivery, job: job, logger: logger)
                return
            }
            await self.record(outcome, delivery: delivery, job: job, attempt: attempt, acceptedAt: acceptedAt, logger: logger)
        }
    }

    /// Ends a job whose receipt cannot be had: dead-lettered `internal` by its status record, so that an operator
    /// sees it (only acknowledging the entry left the job in the in-flight set, and the restore put it back on
    /// the stream every scan, for good). One whose status is gone, final by now (a peer's copy finished it),
    /// or unreadable to this version is only acknowledged: the restore drops a job without a status, and one
    /// that a newer version wrote is left for that version's workers.
    private func endWithoutPayload(_ delivery: QueueDelivery, detail: String, logger: Logger) async {
        do {
            guard let record = try await self.queue.record(jobId: delivery.jobId), !record.status.isFinal else {
                logger.warning("job status is gone, final or unreadable; acknowledging its entry")
                try await self.queue.acknowledge(delivery)
                return
            }
            let recorded = try await self.queue.deadLetter(
                delivery, record: record, reason: .internal, detail: detail, now: self.queue.clock.nowMilliseconds(), retentionSeconds: self.retentionSeconds
            )
            Self.deadLettered(recorded, reason: .internal, detail: detail, logger: logger)
        } catch {
            // The entry stays pending; a claim brings it back.
            logger.warning("cannot end a job without a readable payload", metadata: ["error": "\(error)"])
        }
    }

    /// Records the outcome in Redis. A final one (granted, rejected, failed) that Redis cannot take now is
    /// tried again with backoff for up to `recordPatience`, so the job reads final within about a second of
    /// Redis coming back, not a claim idle time later; running a finishing script twice changes nothing.
    /// Given up (or not final, or a shutdown came), the entry stays pending and is replayed by a claim; the
    /// grant, if any, is already durable.
    private func record(_ outcome: FulfilmentOutcome, delivery: QueueDelivery, job: ReceiptJob, attempt: Int, acceptedAt: Int, logger: Logger) async {
        let recording = ContinuousClock.now
        defer { WorkerMetrics.step(.finish, ContinuousClock.now - recording) }
        let isFinal: Bool
        switch outcome {
        case .granted, .rejected, .failed: isFinal = true
        case .retry, .outage: isFinal = false
        }
        var backoff = Duration.milliseconds(100)
        while true {
            do {
                try await self.recordOnce(outcome, delivery: delivery, job: job, attempt: attempt, acceptedAt: acceptedAt, logger: logger)
                return
            } catch {
                guard isFinal, (error as? RedisError)?.isUnavailable == true, ContinuousClock.now - recording + backoff < self.recordPatience else {
                    logger.warning("cannot record outcome", metadata: ["error": "\(error)"])
                    return
                }
                if backoff == .milliseconds(100) {
                    logger.warning("cannot record outcome yet; trying again until Redis answers", metadata: ["error": "\(error)"])
                }
                let waited = await untilGracefulShutdown { [backoff] in (try? await Task.sleep(for: backoff)) != nil }
                guard waited == true else {
                    logger.warning("cannot record outcome before shutdown", metadata: ["error": "\(error)"])
                    return
                }
                backoff = min(backoff * 2, .seconds(2))
            }
        }
    }

    private func recordOnce(_ outcome: FulfilmentOutcome, delivery: QueueDelivery, job: ReceiptJob, attempt: Int, acceptedAt: Int, logger: Logger) async throws {
        let now = self.queue.clock.nowMilliseconds()
        switch outcome {
        case .granted(let environment, let expiresAt, let claimed):
            let recorded = try await self.queue.finish(
                delivery, job: job, status: .granted, reason: nil, environment: environment, expiresAt: expiresAt, now: now,
                retentionSeconds: self.retentionSeconds, claimed: claimed
            )
            // A grant is never superseded (PostgreSQL's truth); a copy that finds a peer's grant recorded counts nothing.
            guard recorded == .recorded else {
                return logger.info("granted; already recorded by another copy of the job", metadata: ["environment": "\(environment)"])
            }
            WorkerMetrics.job(status: .granted, reason: nil)
            WorkerMetrics.grantLatency(milliseconds: now - acceptedAt)
            logger.info("granted", metadata: ["environment": "\(environment)"])
        case .rejected(let reason, let environment, let expiresAt):
            try await self.finishRejected(
                delivery, job: job, reason: reason, environment: environment, expiresAt: expiresAt, now: now, logger: logger
            )
        case .failed(let reason, let detail):
            try await self.deadLetter(delivery, job: job, reason: reason, detail: detail, now: now, logger: logger)
        case .outage(let detail):
            // PostgreSQL away, or its connections all busy, is no fault of the job's: the attempt is taken back, and
            // only the age limit ends it.
            guard self.retry.allowsAnotherAttempt(after: attempt - 1, ageMilliseconds: now - acceptedAt) else {
                return try await self.deadLetterUndecided(delivery, job: job, reason: .internal, detail: detail, attempt: attempt, acceptedAt: acceptedAt, logger: logger)
            }
            let due = self.retry.due(afterAttempt: attempt, now: now, acceptedAt: acceptedAt)
            let parking = try await self.queue.retry(delivery, jobId: job.jobId, dueAt: due, reason: .internal, now: now, counts: false)
            guard case .parked(let parked) = parking else { return Self.notParked(parking, logger: logger) }
            WorkerMetrics.job(status: .retrying, reason: .internal)
            logger.info("retrying once PostgreSQL can serve it; the attempt is not spent", metadata: ["detail": "\(detail)", "delay_ms": "\(max(0, parked - now))"])
        case .retry(let reason, let detail, let limit, let exhausted):
            // A verdict's own limit counts the attempts that ended with that same answer (21002 three
            // times), not every attempt: timeouts before it must not use it up.
            // Such an answer, once it came twice, is asked again minutes later (RetryPolicy.limitedAnswerDelay).
            // A 21002 is weighed against what every worker saw of Apple lately (RetryPolicy.incidentWindow).
            var evidence: AppleEvidence?
            if case .rejected(_, let environment) = exhausted {
                evidence = try await self.queue.appleMalformedAnswer(
                    environment, jobId: job.jobId, now: now, windowMilliseconds: self.retry.incidentWindow
                )
            }
            let due = self.retry.due(afterAttempt: attempt, now: now, acceptedAt: acceptedAt)
            let repeatDue = self.retry.due(afterAttempt: attempt, now: now, acceptedAt: acceptedAt, atLeast: self.retry.limitedAnswerDelay)
            let allowed = self.retry.allowsAnotherAttempt(after: attempt, ageMilliseconds: now - acceptedAt)
            let parking = allowed
                ? try await self.queue.retry(delivery, jobId: job.jobId, dueAt: due, reason: reason, now: now, limit: limit.map { (detail, $0, repeatDue) })
                : .limitReached
            switch parking {
            case .parked(let parked):
                WorkerMetrics.job(status: .retrying, reason: reason)
                logger.info("retrying", metadata: ["reason": "\(reason.rawValue)", "detail": "\(detail)", "delay_ms": "\(parked - now)"])
            case .notHeld, .alreadyFinal:
                Self.notParked(parking, logger: logger)
            case .limitReached:
                // Only the answer's own limit makes its end final (21002 three times: rejected). Out of the
                // policy's attempts or age first, the answer was never believed: failed, to be requeued.
                switch allowed ? exhausted : .failed(reason) {
                case .rejected(let final, _):
                    if evidence?.looksLikeIncident == true {
                        // Other receipts got 21002 too and Apple verified none lately: an incident, not this
                        // receipt. The job goes on as Apple being unavailable, within the policy: granted once
                        // Apple reads it, rejected if it still answers 21002 once Apple verifies others, or
                        // failed (requeueable) when the policy runs out.
                        try await self.retryDuringIncident(delivery, job: job, dueAt: repeatDue, reason: reason, detail: detail, now: now, logger: logger)
                        return
                    }
                    try await self.finishRejected(delivery, job: job, reason: final, environment: nil, expiresAt: nil, now: now, logger: logger)
                case .failed(let final) where reason == .internal:
                    try await self.deadLetterUndecided(delivery, job: job, reason: final, detail: detail, attempt: attempt, acceptedAt: acceptedAt, logger: logger)
                case .failed(let final):
                    try await self.deadLetter(delivery, job: job, reason: final, detail: detail, now: now, logger: logger)
                }
            }
        }
    }

    /// Dead-letters a job out of attempts or time on an outcome a database failure left undecided (PostgreSQL
    /// away, a timeout): the attempt may have committed its grant and lost only the COMMIT's answer, and no
    /// later attempt will look. So PostgreSQL is asked first, as for a poison job: its grant is recorded;
    /// while it cannot tell, the entry stays pending and a claim asks again.
    private func deadLetterUndecided(
        _ delivery: QueueDelivery, job: ReceiptJob, reason: JobReason, detail: String, attempt: Int, acceptedAt: Int, logger: Logger
    ) async throws {
        switch await self.fulfiller.committed(job, logger: logger) {
        case let committed?:
            guard case .granted = committed else {
                logger.warning("out of attempts, but PostgreSQL cannot tell whether the job's grant committed; leaving it for a later claim")
                return
            }
            logger.info("out of attempts, but its grant committed (the answer was lost); recording it")
            try await self.recordOnce(committed, delivery: delivery, job: job, attempt: attempt, acceptedAt: acceptedAt, logger: logger)
        case nil:
            try await self.deadLetter(delivery, job: job, reason: reason, detail: detail, now: self.queue.clock.nowMilliseconds(), logger: logger)
        }
    }

    /// Not parked: a peer took the entry over while this worker stalled past the claim idle time (or it was
    /// already acknowledged), and its copy of the job records the outcome; or another copy ended the job
    /// already, and the entry was only acknowledged. Either way this copy leaves the job alone.
    private static func notParked(_ outcome: ParkOutcome, logger: Logger) {
        if outcome == .alreadyFinal {
            logger.info("not retrying: another copy of this job ended it; entry acknowledged")
        } else {
            logger.warning("not retrying: another worker took this job over while this one stalled")
        }
    }

    /// Parks a job whose 21002 came for the last time allowed during what looks like an incident at Apple.
    private func retryDuringIncident(
        _ delivery: QueueDelivery, job: ReceiptJob, dueAt: Int, reason: JobReason, detail: String, now: Int, logger: Logger
    ) async throws {
        let parking = try await self.queue.retry(delivery, jobId: job.jobId, dueAt: dueAt, reason: reason, now: now)
        guard case .parked(let parked) = parking else { return Self.notParked(parking, logger: logger) }
        WorkerMetrics.job(status: .retrying, reason: reason)
        logger.warning("retrying: other receipts got this answer too and Apple verified none lately, so it is taken for an incident", metadata: [
            "reason": "\(reason.rawValue)", "detail": "\(detail)", "delay_ms": "\(max(0, parked - now))",
        ])
    }

    /// Cut off by a shutdown: the failure may be the cut itself, not Apple or the database, so it is not
    /// recorded as one, and the attempt does not count. The job is parked due at once: any worker's promoter puts it back on the stream
    /// within a second, where left pending it would wait for a peer's claim (the claim idle time, a minute).
    /// Redis unreachable, the entry stays pending and a peer claims it.
    private func park(cutOff outcome: FulfilmentOutcome, delivery: QueueDelivery, job: ReceiptJob, logger: Logger) async {
        let reason: JobReason
        switch outcome {
        case .retry(let cause, _, _, _), .failed(let cause, _): reason = cause
        case .outage: reason = .internal
        case .granted, .rejected: return
        }
        let now = self.queue.clock.nowMilliseconds()
        do {
            let parking = try await self.queue.retry(delivery, jobId: job.jobId, dueAt: now, reason: reason, now: now, counts: false)
            guard case .parked = parking else { return Self.notParked(parking, logger: logger) }
            logger.info("cut off by shutdown; parked for another worker at once")
        } catch {
            logger.info("cut off by shutdown; the entry stays pending for another worker", metadata: ["error": "\(error)"])
        }
    }

    private func finishRejected(
        _ delivery: QueueDelivery, job: ReceiptJob, reason: JobReason, environment: String?, expiresAt: Int?, now: Int, logger: Logger
    ) async throws {
        let recorded = try await self.queue.finish(
            delivery, job: job, status: .rejected, reason: reason, environment: environment, expiresAt: expiresAt, now: now,
            retentionSeconds: self.retentionSeconds
        )
        guard recorded == .recorded else { return Self.notRecorded(recorded, logger: logger) }
        WorkerMetrics.job(status: .rejected, reason: reason)
        logger.info("rejected", metadata: ["reason": "\(reason.rawValue)"])
    }

    private func deadLetter(_ delivery: QueueDelivery, job: ReceiptJob, reason: JobReason, detail: String, now: Int, logger: Logger) async throws {
        let recorded = try await self.queue.deadLetter(delivery, job: job, reason: reason, detail: detail, now: now, retentionSeconds: self.retentionSeconds)
        Self.deadLettered(recorded, reason: reason, detail: detail, logger: logger)
    }

    /// A copy's outcome that Redis did not record: the job runs on another entry by now (promoted, put back or
    /// requeued since), whose run decides, or another copy of it ended it already.
    private static func notRecorded(_ record: FinalRecord, logger: Logger) {
        if record == .alreadyFinal {
            logger.info("outcome not recorded: another copy of the job ended it already; entry acknowledged")
        } else {
            logger.info("outcome not recorded: the job runs again since (a later entry decides); entry acknowledged")
        }
    }

    private static func deadLettered(_ recorded: FinalRecord, reason: JobReason, detail: String, logger: Logger) {
        guard recorded == .recorded else { return Self.notRecorded(recorded, logger: logger) }
        WorkerMetrics.job(status: .failed, reason: reason)
        logger.warning("failed; dead-lettered", metadata: ["reason": "\(reason.rawValue)", "detail": "\(detail)"])
    }
}
