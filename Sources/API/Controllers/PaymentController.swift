import Foundation
import Hummingbird
import Shared

/// `POST /apple/payment`: validate, enqueue atomically, answer at once.
struct PaymentController {
    let services: APIServices

    func register(on group: RouterGroup<TollgateRequestContext>) {
        group.post("/apple/payment", use: self.submit)
    }

    @Sendable func submit(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let publisher = try context.requirePublisher()
        let submission = try PaymentSubmission(json: try await JSONObject.read(request))

        let products = try await self.services.offerProducts(publisherId: publisher.id, offerId: submission.offerId)
        let job = ReceiptJob(
            jobId: ReceiptJob.newJobId(), publisherId: publisher.id, customerEmail: submission.customerEmail,
            offerId: submission.offerId, transactionId: submission.transactionId, receiptData: submission.receiptData,
            appType: submission.appType, ipAddress: submission.ipAddress, acceptedAtMilliseconds: self.services.queue.clock.nowMilliseconds()
        )
        guard products.contains(where: \.enabled) else {
            // A resubmission (a retry after a lost answer) of a receipt accepted before the offer was
            // disabled still gets its job id, as CONTRACT.md promises for as long as the job is retained.
            guard let existing = try await self.services.queue.existing(job) else {
                throw APIError.invalid("offerId", code: "offer_disabled", "offerId is disabled")
            }
            return Self.resubmitted(jobId: existing.jobId, status: existing.status, context: context)
        }
        let pending = self.services.queue.keys.pending(for: job)
        switch try await self.enqueue(job, pendingKey: pending, context: context) {
        case .created(let jobId):
            // Before answering: this process' next poll for the customer must already say `pending`.
            self.services.accessCache.invalidate(pending)
            context.logger.info("receipt accepted", metadata: ["job": .string(jobId), "offer": .string(job.offerId)])
            return JSONBody.response(.ok, Self.accepted(jobId: jobId))
        case .duplicate(let jobId, let status):
            return Self.resubmitted(jobId: jobId, status: status, context: context)
        case .alreadyClaimed:
            throw APIError(.conflict, code: "already_claimed", "this transaction is already claimed by another customer", field: "receipt.transactionId")
        }
    }

    /// Enqueues the job. A call whose connection broke after it went out may have run in Redis and lost only
    /// its answer (a Redis restart, a proxy or `CLIENT KILL` cutting the connection, an answer later than the
    /// client's timeout): the job is then looked up once before the request is refused, so that a 503 means
    /// nothing was stored (CONTRACT.md). When the lookup cannot tell either, Redis' error stands. A call
    /// that never went out (no connection, or waiting behind a call that failed) is refused at once, without
    /// the lookup's wait.
    private func enqueue(_ job: ReceiptJob, pendingKey: String, context: TollgateRequestContext) async throws -> EnqueueOutcome {
        do {
            return try await self.services.queue.enqueue(job, keyTTLSeconds: self.services.keyTTLSeconds, pendingKey: pendingKey)
        } catch let error as RedisError where error.code == .connection && error.mayHaveRun {
            guard let stored = try? await self.services.queue.existing(job) else { throw error }
            context.logger.warning(
                "the enqueue's answer was lost; the job is stored", metadata: ["job": .string(stored.jobId), "error": .string(error.message)]
            )
            return stored.jobId == job.jobId ? .created(jobId: job.jobId) : .duplicate(jobId: stored.jobId, status: stored.status)
        }
    }

    /// The answer to the same submission again: CONTRACT.md's answer is `queued` whatever the job's status
    /// by now (`GET /v1/receipts/{jobId}` tells).
    static func resubmitted(jobId: String, status: JobStatus, context: TollgateRequestContext) -> Response {
        context.logger.info("receipt resubmitted", metadata: ["job": "\(jobId)", "status": "\(status.rawValue)"])
        return JSONBody.response(.ok, Self.accepted(jobId: jobId))
    }

    /// `{"jobId":…,"message":"OK","status":"queued"}`.
    static func accepted(jobId: String) -> JSONObjectWriter {
        var object = JSONObjectWriter()
        object.add("jobId", jobId)
        object.add("message", "OK")
        object.add("status", JobStatus.queued.rawValue)
        return object
    }
}
