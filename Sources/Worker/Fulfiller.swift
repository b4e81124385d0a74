import Foundation
import Logging
import Shared
import Synchronization

/// Fulfils one job: asks Apple (production first, sandbox on 21007), checks the answer against the
/// publisher's catalog, and commits the grant. Only Apple's answer is trusted: never the receipt's bytes,
/// never the client's `transactionId` until it is found in the answer.
struct Fulfiller: Sendable {
    let catalog: CatalogStore
    let grants: GrantStore
    /// Announces the changes to access that a receipt's evidence bears on (a job's own status is announced when it finishes).
    let queue: ReceiptQueue
    let apple: VerifyReceiptClient
    /// Tells every worker that Apple verifies receipts (JobProcessor weighs 21002 answers by it).
    let beacon = AppleVerifiedBeacon()
    /// Tells the consumer when PostgreSQL is away, so it starts no new job meanwhile.
    let database = DatabaseWatch()
    let products: ExpiringCache<UUID, [Product]> = Fulfiller.catalogCache()
    let apps: ExpiringCache<UUID, [App]> = Fulfiller.catalogCache()

    /// A cache of the publishers' catalog, 5 s per entry. An expired entry is refreshed by one job while the
    /// others go on with it for up to 5 s more: without that, every job in flight that found it expired asked
    /// PostgreSQL, 1,150 to 1,950 queries in a drain of 20,000 receipts at 512 in flight (40 to 380 since,
    /// most of them at the start, when there is no entry yet and each job loads), each taking a pooled
    /// connection from the grants. A decision that the cached catalog makes (a product or app it lacks, a
    /// secret or sandbox setting) is taken again on a fresh one (``run(_:logger:)``). Past those 5 s, a
    /// PostgreSQL that does not answer fails the look-up, as before.
    static func catalogCache<Value: Sendable>() -> ExpiringCache<UUID, Value> {
        ExpiringCache(lifetime: 5, staleFor: 5)
    }

    /// Runs the job to an outcome; database and network failures come back as retries (PostgreSQL away as
    /// an outage), not throws.
    func fulfil(_ job: ReceiptJob, logger: Logger) async -> FulfilmentOutcome {
        do {
            return try await self.run(job, logger: logger)
        } catch {
            logger.warning("fulfilment interrupted", metadata: ["error": "\(LoggableError.describe(error))"])
            if self.database.note(error) || Self.isContention(error) { return .outage(detail: LoggableError.describe(error)) }
            return .retry(.internal, detail: LoggableError.describe(error), attemptLimit: nil, exhausted: .failed(.internal))
        }
    }

    /// The outcome an earlier attempt of the job committed in PostgreSQL, if any; nil when there is none
    /// (the attempt then runs as usual). When PostgreSQL cannot tell now, a retry (an outage when it is
    /// away): asking Apple instead could end the job on an answer that needs no database (a shared-secret
    /// mismatch, say) while PostgreSQL holds its grant.
    func committed(_ job: ReceiptJob, logger: Logger) async -> FulfilmentOutcome? {
        do {
            guard let grant = try await self.grants.committedGrant(job) else { return nil }
            return .granted(
                environment: grant.environment, expiresAt: grant.grantedUntil.map { Int($0.timeIntervalSince1970) }, claimed: grant.claimed
            )
        } catch {
            logger.warning("cannot look up an earlier attempt's grant", metadata: ["error": "\(error)"])
            let detail = "looking up an earlier attempt's grant: \(LoggableError.describe(error))"
            if self.database.note(error) || Self.isContention(error) { return .outage(detail: detail) }
            return .retry(.internal, detail: detail, attemptLimit: nil, exhausted: .failed(.internal))
        }
    }

    /// Every connection of the pool busy past the acquire timeout, PostgreSQL answering (jobs queued behind
    /// one purchase's lock, a pool small for the concurrency): no outage, but no fault of the job's either.
    private static func isContention(_ error: any Error) -> Bool {
        (error as? PostgresError)?.code == .busy
    }

    private func run(_ job: ReceiptJob, logger: Logger) async throws -> FulfilmentOutcome {
        var catalog = try await self.catalog(job.publisherId, fresh: false)
        var fresh = false
        if !catalog.products.contains(where: { $0.offerId == job.offerId }) || catalog.apps.isEmpty {
            catalog = try await self.catalog(job.publisherId, fresh: true)
            fresh = true
        }
        var verification = await self.verify(job, catalog: catalog)
        if !fresh, case .outcome(let outcome) = verification, Self.decidedByOfferApps(outcome) {
            // Final, and decided by the offer's apps as cached (none allows the sandbox, or none of their
            // secrets matched): when they changed since (an app added seconds ago may be the receipt's), Apple
            // is asked again with them.
            let cached = Self.offerApps(of: job, in: catalog)
            catalog = try await self.catalog(job.publisherId, fresh: true)
            fresh = true
            if Self.offerApps(of: job, in: catalog) != cached { verification = await self.verify(job, catalog: catalog) }
        }
        let verified: Verified
        switch verification {
        case .answer(let answer, let environment, let expired): verified = Verified(answer: answer, environment: environment, expired: expired)
        case .outcome(let outcome): return outcome
        }
        let outcome = try await self.decide(job, verified, catalog: catalog, logger: logger)
        // Every rejection the catalog decides is final, so one decided on the cached catalog is decided
        // again, on the same answer, with a fresh one: an app or product created seconds ago must not be
        // mistaken for none.
        if !fresh, case .rejected(let reason, _, _) = outcome, reason == .offerMismatch || reason == .bundleMismatch {
            return try await self.decide(job, verified, catalog: try await self.catalog(job.publisherId, fresh: true), logger: logger)
        }
        return outcome
    }

    /// Whether a verification's final outcome came from the offer's apps rather than from Apple's answer alone.
    private static func decidedByOfferApps(_ outcome: FulfilmentOutcome) -> Bool {
        switch outcome {
        case .rejected(.sandboxNotAllowed, _, _), .failed(.sharedSecretMismatch, _): true
        default: false
        }
    }

    /// The publisher's products and apps, from the cache unless `fresh`.
    private func catalog(_ publisherId: UUID, fresh: Bool) async throws -> (products: [Product], apps: [App]) {
        if fresh {
            self.products.remove(publisherId)
            self.apps.remove(publisherId)
        }
        let products = try await self.products.value(for: publisherId) {
            let found = try await self.catalog.products(publisherId: publisherId)
            return found.isEmpty ? nil : found
        } ?? []
        let apps = try await self.apps.value(for: publisherId) {
            let found = try await self.catalog.apps(publisherId: publisherId)
            return found.isEmpty ? nil : found
        } ?? []
        return (products, apps)
    }

    /// Apple's answer, read.
    private struct Verified {
        let answer: AppleAnswer
        let environment: String
        let expired: Bool
    }

    /// What Apple's answer means for the job, against the publisher's catalog: a rejection, or the grant.
    private func decide(
        _ job: ReceiptJob, _ verified: Verified, catalog: (products: [Product], apps: [App]), logger: Logger
    ) async throws -> FulfilmentOutcome {
        let (products, apps) = catalog
        let offerProducts = products.filter { $0.offerId == job.offerId }
        let environment = verified.environment
        guard let receipt = verified.answer.receipt else {
            return verified.expired
                ? .rejected(.expired, environment: environment)
                : .retry(.appleUnavailable, detail: "status 0 without a receipt", attemptLimit: nil, exhausted: .failed(.appleUnavailable))
        }
        // Apple holds bundle IDs case-insensitive: an app registered as `com.Example.App` is the receipt's
        // `com.example.app` (an exact match first, should both be registered).
        guard let app = apps.first(where: { $0.bundleId == receipt.bundleId })
            ?? apps.first(where: { $0.bundleId.lowercased() == receipt.bundleId.lowercased() })
        else {
            return .rejected(.bundleMismatch, environment: environment)
        }
        if environment == VerifyReceiptClient.Environment.sandbox.rawValue, !app.allowSandbox {
            return .rejected(.sandboxNotAllowed, environment: environment)
        }
        let appProducts = Dictionary(products.filter { $0.appId == app.id }.map { ($0.productId, $0) }) { first, _ in first }
        let verifiedAt = Date()
        let evidence = Evidence(
            publisherId: job.publisherId, appId: app.id, products: appProducts, answer: verified.answer, environment: environment,
            job: job, verifiedAt: verifiedAt
        )
        let applied = try await self.grants.applyEvidence(evidence)
        if applied.revoked + applied.extended > 0 {
            logger.info("applied evidence", metadata: ["revoked": "\(applied.revoked)", "extended": "\(applied.extended)"])
        }
        // Committed: API caches must forget the answers the evidence bears on. Announced on every run, not
        // only when it changed something, so a run that died between its commit and here is made good by
        // the replay. An announcement that fails (this worker's connection, not the caches') makes the job
        // retry: the evidence is idempotent, and the next attempt announces again.
        if !applied.bearsOn.isEmpty {
            do { try await self.queue.announceAccessChanged(publisherId: job.publisherId, applied.bearsOn) } catch {
                logger.warning("could not announce an access change", metadata: ["error": "\(error)"])
                return .retry(.internal, detail: "could not announce an access change", attemptLimit: nil, exhausted: .failed(.internal))
            }
        }

        // A disabled product sells nothing new: the API refuses an offer all of whose products are disabled,
        // but one sold in several apps stays on sale through the others. A job accepted before the product
        // was disabled is still granted: that customer paid while it was on sale. (A product disabled by a
        // binary from before migration 9, during a rolling upgrade, has no disabled_at: its last change counts.)
        let acceptedAt = Date(timeIntervalSince1970: Double(job.acceptedAtMilliseconds) / 1000)
        let offerProductIds = Set(
            offerProducts.filter { $0.appId == app.id && ($0.enabled || ($0.disabledAt ?? $0.updatedAt) > acceptedAt) }.map(\.productId)
        )
        let transactions = evidence.transactions
        var matched: AppleTransaction
        if let transactionId = job.transactionId {
            guard let found = transactions.first(where: { $0.transactionId == transactionId }) else {
                return .rejected(.transactionNotFound, environment: environment)
            }
            matched = found
        } else {
            // The newest purchase of the offer that was not refunded: a refunded one grants nothing, while an
            // older one still paid for may never have been granted. (The newest refunded one, when all are.)
            let candidates = transactions.filter { offerProductIds.contains($0.productId) }
            let paid = candidates.filter { !$0.isCancelled }
            guard let newest = (paid.isEmpty ? candidates : paid).max(by: { ($0.purchaseDateMilliseconds ?? 0) < ($1.purchaseDateMilliseconds ?? 0) }) else {
                return .rejected(transactions.isEmpty ? .transactionNotFound : .offerMismatch, environment: environment)
            }
            matched = newest
        }
        guard offerProductIds.contains(matched.productId), let product = appProducts[matched.productId] else {
            return .rejected(.offerMismatch, environment: environment)
        }
        let subscription = evidence.subscription(matched.originalTransactionId, offerId: product.offerId)
        let renewals = subscription.periods
        if verified.expired {
            let end = renewals.compactMap(\.expiresDateMilliseconds).max().map { Int($0 / 1000) }
            return .rejected(.expired, environment: environment, expiresAt: end)
        }
        // A refunded period of a subscription the customer still pays for (a period refunded alone, or the
        // subscription bought again after a refund): the submission names the refund, the customer is owed
        // the period paid for. Middleware often keeps naming the first transaction it saw.
        if product.kind == .autoRenewable, matched.isCancelled,
            let paid = AppleTransaction.latestPaid(renewals, graceEnd: subscription.graceEnd, at: verifiedAt)
        {
            matched = paid
        }

        if product.kind == .consumable {
            let credit = GrantStore.credit(coins: product.coins, quantity: matched.quantity)
            guard credit <= GrantStore.maxCredit else {
                // Apple's quantity times the product's coins: no wallet entry holds it, and no retry changes that.
                return .failed(.internal, detail: "a credit of \(credit) coins (quantity \(matched.quantity)) is more than a wallet entry holds")
            }
        }
        let granting = ContinuousClock.now
        let outcome = try await self.grants.grant(GrantRequest(
            job: job, app: app, product: product, transaction: matched, renewals: renewals,
            gracePeriodEndMilliseconds: subscription.graceEnd, environment: environment,
            verifiedAt: verifiedAt
        ))
        WorkerMetrics.step(.grant, ContinuousClock.now - granting)
        // Every outcome but another customer's claim committed writes (the ledger row, the entitlement).
        if outcome != .alreadyClaimed { self.database.noteWrote() }
        switch outcome {
        case .granted(let expiresAt):
            // The purchase is the customer's: for a kind claimed by its original transaction, every transaction
            // of it the answer lists (renewals, restores, other products of its subscription group) and the original.
            var claimed = [matched.transactionId]
            if product.kind.claimsByOriginalTransaction {
                let lineage = transactions.filter { $0.originalTransactionId == matched.originalTransactionId }.map(\.transactionId)
                for id in lineage + [matched.originalTransactionId] where !claimed.contains(id) { claimed.append(id) }
            }
            return .granted(environment: environment, expiresAt: expiresAt.map { Int($0.timeIntervalSince1970) }, claimed: claimed)
        case .alreadyClaimed:
            return .rejected(.alreadyClaimed, environment: environment)
        case .refunded:
            return .rejected(.refunded, environment: environment)
        case .expired(let expiresAt):
            return .rejected(.expired, environment: environment, expiresAt: expiresAt.map { Int($0.timeIntervalSince1970) })
        }
    }


    /// What asking Apple gave: an answer to check (status 0, or 21006 with its receipt), or an outcome already.
    private enum Verification {
        case answer(AppleAnswer, environment: String, expired: Bool)
        case outcome(FulfilmentOutcome)
    }

    /// Verifies against the offer's products and apps in `catalog`; `offer_mismatch` when it has none.
    private func verify(_ job: ReceiptJob, catalog: (products: [Product], apps: [App])) async -> Verification {
        let offerProducts = catalog.products.filter { $0.offerId == job.offerId }
        guard !offerProducts.isEmpty, !catalog.apps.isEmpty else { return .outcome(.rejected(.offerMismatch, environment: nil)) }
        return await self.verify(job, offerProducts: offerProducts, offerApps: Self.offerApps(of: job, in: catalog))
    }

    /// The apps that sell the job's offer in `catalog`: what ``verify(_:offerProducts:offerApps:)`` asks Apple with.
    private static func offerApps(of job: ReceiptJob, in catalog: (products: [Product], apps: [App])) -> [App] {
        let appIds = Set(catalog.products.filter { $0.offerId == job.offerId }.map(\.appId))
        return catalog.apps.filter { appIds.contains($0.id) }
    }

    /// Production first; the sandbox on 21007 (when one of the offer's apps allows it); production again on 21008.
    ///
    /// The offer's apps may each have their own shared secret, and which app the receipt is from is known
    /// only from Apple's answer: on 21004 (the secret does not match) the next distinct secret is tried.
    private func verify(_ job: ReceiptJob, offerProducts: [Product], offerApps: [App]) async -> Verification {
        var secrets: [String] = []
        for secret in offerApps.compactMap(\.sharedSecret) where !secrets.contains(secret) { secrets.append(secret) }
        var secret = 0
        let excludeOld = offerProducts.contains { $0.kind == .autoRenewable }
        var environment = VerifyReceiptClient.Environment.production
        for _ in 0..<(3 + max(0, secrets.count - 1)) {
            let started = ContinuousClock.now
            let verdict = await self.apple.verify(
                receiptData: job.receiptData, password: secrets.isEmpty ? nil : secrets[secret], excludeOldTransactions: excludeOld,
                environment: environment
            )
            WorkerMetrics.appleCall(environment: environment.rawValue, verdict: verdict, duration: ContinuousClock.now - started)
            switch verdict {
            case .valid(let answer):
                await self.beacon.verified(environment, queue: self.queue)
                return .answer(answer, environment: Self.environment(of: answer, asked: environment), expired: false)
            case .expired(let answer):
                await self.beacon.verified(environment, queue: self.queue)
                return .answer(answer, environment: Self.environment(of: answer, asked: environment), expired: true)
            case .askSandbox:
                guard offerApps.contains(where: \.allowSandbox) else {
                    return .outcome(.rejected(.sandboxNotAllowed, environment: VerifyReceiptClient.Environment.sandbox.rawValue))
                }
                environment = .sandbox
            case .askProduction:
                environment = .production
            case .reject(let reason, _):
                return .outcome(.rejected(reason, environment: environment.rawValue))
            case .fail(.sharedSecretMismatch, _) where secret + 1 < secrets.count:
                secret += 1
            case .fail(let reason, let detail):
                return .outcome(.failed(reason, detail: detail))
            case .retry(let detail, let limit, let exhausted):
                return .outcome(.retry(.appleUnavailable, detail: detail, attemptLimit: limit, exhausted: exhausted))
            }
        }
        return .outcome(.retry(.appleUnavailable, detail: "Apple bounced between environments", attemptLimit: nil, exhausted: .failed(.appleUnavailable)))
    }

    /// The environment Apple says it answered from, else the one asked.
    private static func environment(of answer: AppleAnswer, asked: VerifyReceiptClient.Environment) -> String {
        answer.environment.flatMap(VerifyReceiptClient.Environment.init(rawValue:))?.rawValue ?? asked.rawValue
    }
}

/// Counts in Redis, for every worker, the receipts Apple verifies: at most once a second per environment
/// from one process (with what it verified meanwhile), so a busy worker does not add a Redis call per job.
/// Best effort: a count lost or late only makes a 21002 look a little more like an incident, which costs
/// that job more tries, never a wrong refusal.
final class AppleVerifiedBeacon: Sendable {
    private struct Tally {
        var recordedAt = 0
        var unrecorded = 0
    }

    private let tallies = Mutex<[VerifyReceiptClient.Environment: Tally]>([:])
    /// How long a count lives: longer than any window a policy looks back (RetryPolicy.incidentWindow).
    private static let lifetimeMilliseconds = 3_600_000

    func verified(_ environment: VerifyReceiptClient.Environment, queue: ReceiptQueue) async {
        let now = queue.clock.nowMilliseconds()
        let count = self.tallies.withLock { tallies in
            var tally = tallies[environment, default: Tally()]
            tally.unrecorded += 1
            var due = 0
            if now - tally.recordedAt >= 1000 {
                due = tally.unrecorded
                tally = Tally(recordedAt: now, unrecorded: 0)
            }
            tallies[environment] = tally
            return due
        }
        guard count > 0 else { return }
        try? await queue.recordAppleVerified(environment, count: count, now: now, lifetimeMilliseconds: Self.lifetimeMilliseconds)
    }
}
