import Foundation

/// Commits verified purchases: ledger rows, claims, entitlements and wallet entries, exactly once.
///
/// Each grant is one short PostgreSQL transaction keyed by Apple's identifiers, so a replayed delivery
/// (after a crash between commit and acknowledgement) finds its own work done and changes nothing.
public struct GrantStore: Sendable {
    private let database: PostgresClient

    /// Creates a store over a client.
    public init(database: PostgresClient) {
        self.database = database
    }

    /// Grants (or refuses) one purchase; see ``GrantOutcome``.
    public func grant(_ request: GrantRequest) async throws -> GrantOutcome {
        let job = request.job
        let transaction = request.transaction
        return try await self.database.withTransaction { session in
            // Serialises grants for one customer and offer, so stacking reads and writes one state.
            try await session.query(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                ["\(job.publisherId.uuidString.lowercased())|\(job.customerEmail)|\(job.offerId)"]
            )
            let claimKey = request.product.kind.claimsByOriginalTransaction
                ? "original:\(transaction.originalTransactionId)" : "transaction:\(transaction.transactionId)"
            let owner = try await session.query(
                """
                WITH attempt AS (
                    INSERT INTO claims (publisher_id, claim_key, customer_email) VALUES ($1, $2, $3)
                    ON CONFLICT DO NOTHING RETURNING customer_email
                )
                SELECT customer_email FROM attempt UNION ALL SELECT customer_email FROM claims WHERE publisher_id = $1 AND claim_key = $2
                """,
                [job.publisherId, claimKey, job.customerEmail]
            ).first?.decode(String.self, "customer_email")
            guard owner == job.customerEmail else { return .alreadyClaimed }

            let ledger = try await self.recordVerified(request, session: session)
            // The ledger keeps a cancellation once seen: a stale answer that predates the refund grants nothing.
            if transaction.isCancelled || ledger.cancelled {
                try await self.revoke(ledgerId: ledger.id, request: request, session: session)
                return .refunded
            }
            if ledger.state == "fulfilled" {
                return .granted(expiresAt: try await Self.currentExpiry(job: job, session: session) ?? ledger.grantedUntil)
            }
            let expiresAt: Date?
            switch request.product.kind {
            case .consumable:
                let coins = (request.product.coins ?? 0) * max(1, transaction.quantity)
                try await session.query(
                    """
                    INSERT INTO wallet_entries (publisher_id, customer_email, transaction_ref, kind, coins)
                    VALUES ($1, $2, $3, 'credit', $4) ON CONFLICT DO NOTHING
                    """,
                    [job.publisherId, job.customerEmail, ledger.id, coins]
                )
                expiresAt = nil
            case .nonConsumable, .nonRenewing, .autoRenewable:
                let current = try await Self.entitlement(job: job, session: session)
                guard let end = Self.newExpiry(request: request, current: current) else {
                    try await self.invalidate(ledgerId: ledger.id, reason: JobReason.expired.rawValue, session: session)
                    return .expired(expiresAt: Self.subscriptionEnd(request).map { Date(timeIntervalSince1970: Double($0) / 1000) })
                }
                try await session.query(
                    """
                    INSERT INTO entitlements (publisher_id, customer_email, offer_id, product_ref, expires_at, granted_by)
                    VALUES ($1, $2, $3, $4, $5, $6)
                    ON CONFLICT (publisher_id, customer_email, offer_id) DO UPDATE SET
                        expires_at = EXCLUDED.expires_at, product_ref = EXCLUDED.product_ref,
                        granted_by = EXCLUDED.granted_by, revoked_at = NULL, updated_at = now()
                    """,
                    [job.publisherId, job.customerEmail, job.offerId, request.product.id, end.date, ledger.id]
                )
                expiresAt = end.date
            }
            try await session.query(
                "UPDATE transactions SET state = 'fulfilled', fulfilled_at = now(), granted_until = $2, last_error = NULL WHERE id = $1",
                [ledger.id, expiresAt]
            )
            return .granted(expiresAt: expiresAt)
        }
    }

    /// The end of the access a grant gives: `.some(nil)` means forever, `nil` means nothing (expired).
    private struct Expiry {
        let date: Date?
    }

    private static func newExpiry(request: GrantRequest, current: (expiresAt: Date?, active: Bool)?) -> Expiry? {
        let now = request.verifiedAt
        let activeForever = current.map { $0.active && $0.expiresAt == nil } ?? false
        switch request.product.kind {
        case .consumable:
            return Expiry(date: nil)
        case .nonConsumable:
            return Expiry(date: nil)
        case .nonRenewing:
            if activeForever { return Expiry(date: nil) }
            let purchase = request.transaction.purchaseDateMilliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) } ?? now
            var start = purchase
            if let current, current.active, let end = current.expiresAt, end > start { start = end }
            let days = Double(request.product.durationDays ?? 0)
            return Expiry(date: start.addingTimeInterval(days * 86_400))
        case .autoRenewable:
            if activeForever { return Expiry(date: nil) }
            guard let end = Self.subscriptionEnd(request) else { return nil }
            var date = Date(timeIntervalSince1970: Double(end) / 1000)
            if let current, current.active, let existing = current.expiresAt, existing > date { date = existing }
            return date > now ? Expiry(date: date) : nil
        }
    }

    /// The greatest expiry over every period of the subscription (Apple's arrays are not ordered), or the
    /// grace period's end when that is later; cancelled periods do not count.
    private static func subscriptionEnd(_ request: GrantRequest) -> Int64? {
        let periods = ([request.transaction] + request.renewals).filter { !$0.isCancelled }
        let latest = periods.compactMap(\.expiresDateMilliseconds).max()
        guard let latest else { return request.gracePeriodEndMilliseconds }
        return max(latest, request.gracePeriodEndMilliseconds ?? latest)
    }

    private struct LedgerRow {
        let id: Int64
        let state: String
        let grantedUntil: Date?
        let cancelled: Bool
    }

    private func recordVerified(_ request: GrantRequest, session: PostgresSession) async throws -> LedgerRow {
        let transaction = request.transaction
        let job = request.job
        func date(_ milliseconds: Int64?) -> Date? { milliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) } }
        let row = try await session.query(
            """
            INSERT INTO transactions (
                publisher_id, app_id, product_ref, transaction_id, original_transaction_id, product_id, customer_email,
                offer_id, environment, job_id, receipt_digest, state, purchase_date, expires_date, cancellation_date,
                received_at, verified_at
            ) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'verified', $12, $13, $14, $15, $16)
            ON CONFLICT (app_id, transaction_id) DO UPDATE SET
                expires_date = EXCLUDED.expires_date,
                cancellation_date = COALESCE(transactions.cancellation_date, EXCLUDED.cancellation_date),
                verified_at = COALESCE(transactions.verified_at, EXCLUDED.verified_at)
            RETURNING id, state, granted_until, cancellation_date IS NOT NULL AS cancelled
            """,
            [
                job.publisherId, request.app.id, request.product.id, transaction.transactionId, transaction.originalTransactionId,
                transaction.productId, job.customerEmail, job.offerId, request.environment, job.jobId,
                ReceiptDigest.hex(of: job.receiptData), date(transaction.purchaseDateMilliseconds),
                date(transaction.expiresDateMilliseconds), date(transaction.cancellationDateMilliseconds),
                Date(timeIntervalSince1970: Double(job.acceptedAtMilliseconds) / 1000), request.verifiedAt,
            ]
        ).first
        guard let row else { throw PostgresError(.decoding, "the ledger upsert returned no row") }
        return LedgerRow(
            id: try row.decode(Int64.self, "id"), state: try row.decode(String.self, "state"),
            grantedUntil: try row.decode(Date?.self, "granted_until"), cancelled: try row.decode(Bool.self, "cancelled")
        )
    }

    /// Withdraws what a refunded transaction gave: its entitlement ends at the cancellation, its coins are reversed.
    private func revoke(ledgerId: Int64, request: GrantRequest, session: PostgresSession) async throws {
        let cancelledAt = request.transaction.cancellationDateMilliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) }
            ?? request.verifiedAt
        try await session.query(
            "UPDATE entitlements SET revoked_at = $2, updated_at = now() WHERE granted_by = $1 AND revoked_at IS NULL",
            [ledgerId, cancelledAt]
        )
        try await session.query(
            """
            INSERT INTO wallet_entries (publisher_id, customer_email, transaction_ref, kind, coins)
            SELECT publisher_id, customer_email, transaction_ref, 'reversal', -coins FROM wallet_entries
            WHERE transaction_ref = $1 AND kind = 'credit'
            ON CONFLICT DO NOTHING
            """,
            [ledgerId]
        )
        try await self.invalidate(ledgerId: ledgerId, reason: JobReason.refunded.rawValue, session: session)
    }

    private func invalidate(ledgerId: Int64, reason: String, session: PostgresSession) async throws {
        try await session.query(
            "UPDATE transactions SET state = 'invalidated', invalidated_at = COALESCE(invalidated_at, now()), last_error = $2 WHERE id = $1",
            [ledgerId, reason]
        )
    }

    private static func entitlement(job: ReceiptJob, session: PostgresSession) async throws -> (expiresAt: Date?, active: Bool)? {
        guard let row = try await session.query(
            "SELECT expires_at, revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) AS active FROM entitlements WHERE publisher_id = $1 AND customer_email = $2 AND offer_id = $3",
            [job.publisherId, job.customerEmail, job.offerId]
        ).first else { return nil }
        return (try row.decode(Date?.self, "expires_at"), try row.decode(Bool.self, "active"))
    }

    private static func currentExpiry(job: ReceiptJob, session: PostgresSession) async throws -> Date? {
        try await Self.entitlement(job: job, session: session)?.expiresAt
    }
}
