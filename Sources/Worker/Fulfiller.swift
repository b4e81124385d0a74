import Foundation
import Logging
import Shared

/// Fulfils one job: asks Apple (production first, sandbox on 21007), checks the answer against the
/// publisher's catalog, and commits the grant. Only Apple's answer is trusted: never the receipt's bytes,
/// never the client's `transactionId` until it is found in the answer.
struct Fulfiller: Sendable {
    let catalog: CatalogStore
    let grants: GrantStore
    let apple: VerifyReceiptClient
    let products = ExpiringCache<String, [Product]>(lifetime: 5)
    let apps = ExpiringCache<UUID, [App]>(lifetime: 5)

    /// Runs the job to an outcome; database and network failures come back as retries, not throws.
    func fulfil(_ job: ReceiptJob, logger: Logger) async -> FulfilmentOutcome {
        do {
            return try await self.run(job, logger: logger)
        } catch {
            logger.warning("fulfilment interrupted", metadata: ["error": "\(error)"])
            return .retry(.internal, detail: Self.describe(error), attemptLimit: nil, exhausted: .failed(.internal))
        }
    }

    private func run(_ job: ReceiptJob, logger: Logger) async throws -> FulfilmentOutcome {
        let offerProducts = try await self.products.value(for: "\(job.publisherId)|\(job.offerId)") {
            let found = try await self.catalog.products(publisherId: job.publisherId, offerId: job.offerId)
            return found.isEmpty ? nil : found
        } ?? []
        let apps = try await self.apps.value(for: job.publisherId) {
            let found = try await self.catalog.apps(publisherId: job.publisherId)
            return found.isEmpty ? nil : found
        } ?? []
        guard !offerProducts.isEmpty, !apps.isEmpty else { return .rejected(.offerMismatch, environment: nil) }

        let offerApps = apps.filter { app in offerProducts.contains { $0.appId == app.id } }
        let password = offerApps.lazy.compactMap(\.sharedSecret).first
        let excludeOld = offerProducts.contains { $0.kind == .autoRenewable }
        let sandboxAllowed = offerApps.contains(where: \.allowSandbox)

        var environment = VerifyReceiptClient.Environment.production
        var answer: AppleAnswer?
        for _ in 0..<3 where answer == nil {
            let started = ContinuousClock.now
            let verdict = await self.apple.verify(
                receiptData: job.receiptData, password: password, excludeOldTransactions: excludeOld, environment: environment
            )
            WorkerMetrics.appleCall(environment: environment.rawValue, verdict: verdict, duration: ContinuousClock.now - started)
            switch verdict {
            case .valid(let valid):
                answer = valid
            case .askSandbox:
                guard sandboxAllowed else { return .rejected(.sandboxNotAllowed, environment: "Sandbox") }
                environment = .sandbox
            case .askProduction:
                environment = .production
            case .reject(let reason, _):
                return .rejected(reason, environment: environment.rawValue)
            case .fail(let reason, let detail):
                return .failed(reason, detail: detail)
            case .retry(let detail, let limit, let exhausted):
                return .retry(.appleUnavailable, detail: detail, attemptLimit: limit, exhausted: exhausted)
            }
        }
        guard let answer, let receipt = answer.receipt else {
            return .retry(.appleUnavailable, detail: "Apple bounced between environments", attemptLimit: nil, exhausted: .failed(.appleUnavailable))
        }
        let environmentName = answer.environment == "Sandbox" ? "Sandbox" : environment.rawValue

        guard let app = apps.first(where: { $0.bundleId == receipt.bundleId }) else {
            return .rejected(.bundleMismatch, environment: environmentName)
        }
        if environmentName == "Sandbox", !app.allowSandbox { return .rejected(.sandboxNotAllowed, environment: environmentName) }
        let appProducts = offerProducts.filter { $0.appId == app.id }
        let transactions = answer.allTransactions

        let matched: AppleTransaction
        if let transactionId = job.transactionId {
            guard let found = transactions.first(where: { $0.transactionId == transactionId }) else {
                return .rejected(.transactionNotFound, environment: environmentName)
            }
            matched = found
        } else {
            let candidates = transactions.filter { transaction in appProducts.contains { $0.productId == transaction.productId } }
            guard let newest = candidates.max(by: { ($0.purchaseDateMilliseconds ?? 0) < ($1.purchaseDateMilliseconds ?? 0) }) else {
                return .rejected(transactions.isEmpty ? .transactionNotFound : .offerMismatch, environment: environmentName)
            }
            matched = newest
        }
        guard let product = appProducts.first(where: { $0.productId == matched.productId }) else {
            return .rejected(.offerMismatch, environment: environmentName)
        }

        var seen = Set<String>()
        let renewals = transactions.filter { $0.originalTransactionId == matched.originalTransactionId && seen.insert($0.transactionId).inserted }
        let grace = answer.pendingRenewalInfo
            .filter { $0.originalTransactionId == matched.originalTransactionId }
            .compactMap(\.gracePeriodExpiresDateMilliseconds).max()

        let outcome = try await self.grants.grant(GrantRequest(
            job: job, app: app, product: product, transaction: matched, renewals: renewals, gracePeriodEndMilliseconds: grace,
            environment: environmentName, verifiedAt: Date()
        ))
        switch outcome {
        case .granted(let expiresAt):
            return .granted(environment: environmentName, expiresAt: expiresAt.map { Int($0.timeIntervalSince1970) })
        case .alreadyClaimed:
            return .rejected(.alreadyClaimed, environment: environmentName)
        case .refunded:
            return .rejected(.refunded, environment: environmentName)
        case .expired:
            return .rejected(.expired, environment: environmentName)
        }
    }

    /// Error text for logs and dead letters: the error's own description, which carries no request data.
    static func describe(_ error: any Error) -> String {
        switch error {
        case let error as PostgresError: "\(error)"
        case let error as RedisError: "\(error)"
        default: String(describing: type(of: error))
        }
    }
}
