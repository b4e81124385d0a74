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
        // A customer token names its customer; a publisher names one in the query.
        let email: String
        if let customerEmail = context.customerEmail {
            email = customerEmail
        } else {
            guard let raw = query["customerEmail"].map(String.init), !raw.isEmpty else { throw APIError.missingField("customerEmail") }
            email = try FieldRules.email(raw)
        }
        guard let rawOffer = query["offerId"].map(String.init), !rawOffer.isEmpty else { throw APIError.missingField("offerId") }
        let view = try await self.access(publisherId: publisher.id, customerEmail: email, offerId: try FieldRules.offerId(rawOffer))
        return JSONBody.response(.ok, view, headers: view.pending ? [.retryAfter: "5"] : [:])
    }

    /// One customer's access to one offer, and whether a job for it is still pending.
    func access(publisherId: UUID, customerEmail: String, offerId: String) async throws -> AccessView {
        async let pending = self.services.queue.hasPendingJob(publisherId: publisherId, customerEmail: customerEmail, offerId: offerId)
        let access = try await self.services.access.access(publisherId: publisherId, customerEmail: customerEmail, offerId: offerId)
        return AccessView(
            offerId: offerId, accessGranted: access.granted,
            expiresAt: access.expiresAt.map { Int($0.timeIntervalSince1970) },
            grantType: access.granted ? "direct-purchase" : nil, pending: try await pending
        )
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
