import Foundation
import Hummingbird
import Shared

/// What publishers read: one job, a customer's access to an offer, a customer's wallet.
struct AccessController {
    let services: APIServices

    func register(on group: RouterGroup<TollgateRequestContext>) {
        group.get("/v1/receipts/:jobId", use: self.job)
        group.get("/v1/access-status", use: self.accessStatus)
        group.get("/v1/customers/:customerEmail/wallet", use: self.wallet)
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
        guard let jobId = context.parameters.get("jobId"), jobId.utf8.count <= 64 else { throw APIError.notFound }
        // Redis knows jobs in flight and recent ones; after retention the ledger still knows the outcome.
        var record = try await self.services.queue.record(jobId: jobId)
        if record == nil {
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

    struct AccessView: Encodable {
        let offerId: String
        let accessGranted: Bool
        let expiresAt: Int?
        let grantType: String?
        let pending: Bool

        func encode(to encoder: any Encoder) throws {
            // expiresAt and grantType are part of the answer even when null (CONTRACT.md shows them).
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(self.offerId, forKey: .offerId)
            try container.encode(self.accessGranted, forKey: .accessGranted)
            try container.encode(self.expiresAt, forKey: .expiresAt)
            try container.encode(self.grantType, forKey: .grantType)
            try container.encode(self.pending, forKey: .pending)
        }

        enum CodingKeys: String, CodingKey { case offerId, accessGranted, expiresAt, grantType, pending }
    }

    @Sendable func accessStatus(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let publisher = try context.requirePublisher()
        let query = request.uri.queryParameters
        guard let rawEmail = query["customerEmail"].map(String.init), !rawEmail.isEmpty else { throw APIError.missingField("customerEmail") }
        guard let rawOffer = query["offerId"].map(String.init), !rawOffer.isEmpty else { throw APIError.missingField("offerId") }
        let email = try FieldRules.email(rawEmail)
        let offerId = try FieldRules.offerId(rawOffer)
        return try await self.accessAnswer(publisherId: publisher.id, customerEmail: email, offerId: offerId)
    }

    /// The access-status answer for one customer and offer, with `Retry-After: 5` while a job is pending.
    func accessAnswer(publisherId: UUID, customerEmail: String, offerId: String) async throws -> Response {
        async let pending = self.services.queue.hasPendingJob(publisherId: publisherId, customerEmail: customerEmail, offerId: offerId)
        let access = try await self.services.access.access(publisherId: publisherId, customerEmail: customerEmail, offerId: offerId)
        let isPending = try await pending
        let view = AccessView(
            offerId: offerId, accessGranted: access.granted,
            expiresAt: access.expiresAt.map { Int($0.timeIntervalSince1970) },
            grantType: access.granted ? "direct-purchase" : nil, pending: isPending
        )
        return JSONBody.response(.ok, view, headers: isPending ? [.retryAfter: "5"] : [:])
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
