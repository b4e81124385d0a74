import Foundation
import Hummingbird
import Shared

/// What publishers read: one job, a customer's access to an offer, a customer's wallet. Apps read the access
/// status too, with a customer token, here and through the Cleeng-style JSON-RPC `getAccessStatus`.
struct AccessController {
    let services: APIServices

    /// - Parameters:
    ///   - publisherRoutes: routes behind publisher credentials.
    ///   - accessRoutes: routes behind publisher credentials or a customer token.
    func register(publisherRoutes: RouterGroup<TollgateRequestContext>, accessRoutes: RouterGroup<TollgateRequestContext>) {
        publisherRoutes.get("/v1/receipts/:jobId", use: self.job)
        publisherRoutes.get("/v1/customers/:customerEmail/wallet", use: self.wallet)
        accessRoutes.get("/v1/access-status", use: self.accessStatus)
    }

    struct JobView: Encodable {
        let jobId: String
        let status: String
        let attempts: Int
        let reason: String?
        let nextAttemptAt: Int?
        let customerEmail: String
        let offerId: String
        let environment: String?
        let expiresAt: Int?
    }

    @Sendable func job(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let publisher = try context.requirePublisher()
        // Job ids are lower-case UUIDs; a client that upper-cased one (as `UUID.uuidString` does) means the same job.
        guard let jobId = context.parameters.get("jobId")?.lowercased(), jobId.utf8.count <= 64 else { throw APIError.notFound }
        // Redis knows jobs in flight and recent ones; after retention the ledger still knows the outcome.
        var record = try await self.services.queue.record(jobId: jobId)
        if record?.publisherId != publisher.id {
            // Another publisher's job is answered exactly as an unknown one, from the ledger (which has
            // none for this publisher; 503 while PostgreSQL is down).
            record = try await self.services.access.jobOutcome(jobId: jobId, publisherId: publisher.id)
        }
        guard let record, record.publisherId == publisher.id else { throw APIError.notFound }
        return JSONBody.response(.ok, JobView(
            jobId: record.jobId, status: record.status.rawValue, attempts: record.attempts, reason: record.reason,
            nextAttemptAt: record.status == .retrying ? record.nextAttemptAtMilliseconds.map { ($0 + 999) / 1000 } : nil,
            customerEmail: record.customerEmail, offerId: record.offerId, environment: record.environment,
            expiresAt: record.expiresAt
        ))
    }

    struct AccessView {
        let offerId: String
        let accessGranted: Bool
        let expiresAt: Int?
        let grantType: String?
        let pending: Bool

        /// The answer's body; `expiresAt` and `grantType` are there even when null (CONTRACT.md shows them).
        var json: JSONObjectWriter {
            var object = JSONObjectWriter()
            object.add("accessGranted", self.accessGranted)
            object.add("expiresAt", self.expiresAt)
            object.add("grantType", self.grantType)
            object.add("offerId", self.offerId)
            object.add("pending", self.pending)
            return object
        }

        /// The answer as of `now`: an access that has expired since it was read is no longer granted.
        /// `expiresAt` is shown in whole seconds, as every time in an answer is.
        init(offerId: String, answer: AccessCache.Answer, now: Date = Date()) {
            let granted = answer.granted && (answer.expiresAt.map { $0 > now } ?? true)
            self.offerId = offerId
            self.accessGranted = granted
            self.expiresAt = granted ? answer.expiresAt.map { Int($0.timeIntervalSince1970.rounded(.down)) } : nil
            self.grantType = granted ? "direct-purchase" : nil
            self.pending = answer.pending
        }
    }

    @Sendable func accessStatus(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let publisher = try context.requirePublisher()
        let query = request.uri.queryParameters
        // A customer token names its customer; a publisher names one in the query. Every field is read first
        // (400 for one missing), then judged (422), as a payment is.
        let rawEmail: String?
        if context.customerEmail == nil {
            guard let raw = query["customerEmail"].map(String.init), !raw.isEmpty else { throw APIError.missingField("customerEmail") }
            rawEmail = raw
        } else {
            rawEmail = nil
        }
        guard let rawOffer = query["offerId"].map(String.init), !rawOffer.isEmpty else { throw APIError.missingField("offerId") }
        let email = try context.customerEmail ?? FieldRules.email(rawEmail ?? "")
        let view = try await self.access(publisherId: publisher.id, customerEmail: email, offerId: try FieldRules.offerId(rawOffer))
        return JSONBody.response(.ok, view.json, headers: view.pending ? [.retryAfter: "5"] : [:])
    }

    /// One customer's access to one offer, and whether a job for it is still pending.
    ///
    /// Served from ``AccessCache`` when it holds the answer; otherwise read from Redis and PostgreSQL.
    /// An offer the publisher does not have is 422 `unknown_offer`, as for a submission; a disabled one
    /// still answers, since the customers who bought it keep their access.
    func access(publisherId: UUID, customerEmail: String, offerId: String, offerField: String = "offerId") async throws -> AccessView {
        _ = try await self.services.offerProducts(publisherId: publisherId, offerId: offerId, field: offerField)
        let key = self.services.queue.keys.pending(publisherId: publisherId, customerEmail: customerEmail, offerId: offerId)
        let cached = self.services.accessCache.lookup(key)
        if case .hit(let answer)? = cached { return AccessView(offerId: offerId, answer: answer) }
        // Redis first, then PostgreSQL: a worker commits a grant before it takes the job off the pending
        // set, so "not pending" read first means any grant is already visible to the read that follows.
        // Read together, a poll could see neither and answer a final-looking "no access, not pending".
        let pending = try await self.services.queue.hasPendingJob(pendingKey: key)
        let access = try await self.services.access.access(publisherId: publisherId, customerEmail: customerEmail, offerId: offerId)
        let answer = AccessCache.Answer(granted: access.granted, expiresAt: access.expiresAt, pending: pending)
        if case .miss(let ticket)? = cached { self.services.accessCache.store(answer, for: key, ticket: ticket) }
        return AccessView(offerId: offerId, answer: answer)
    }

    struct WalletView: Encodable {
        let customerEmail: String
        let balances: [String: Int]
    }

    @Sendable func wallet(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let publisher = try context.requirePublisher()
        guard let raw = context.parameters.get("customerEmail") else { throw APIError.notFound }
        let email = try FieldRules.email(raw.removingPercentEncoding ?? raw, field: "customerEmail")
        let coins = try await self.services.access.coinBalance(publisherId: publisher.id, customerEmail: email)
        return JSONBody.response(.ok, WalletView(customerEmail: email, balances: ["coins": coins]))
    }
}
