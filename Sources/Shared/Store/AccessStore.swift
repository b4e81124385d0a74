import Foundation

/// Reads what customers hold: access to offers and coin balances.
public struct AccessStore: Sendable {
    private let database: PostgresClient

    /// Creates a store over a client.
    public init(database: PostgresClient) {
        self.database = database
    }

    /// Whether the customer holds access to the offer now, and until when (`nil` expiry: forever).
    public func access(publisherId: UUID, customerEmail: String, offerId: String) async throws -> (granted: Bool, expiresAt: Date?) {
        guard let row = try await self.database.query(
            """
            SELECT expires_at, revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) AS active
            FROM entitlements WHERE publisher_id = $1 AND customer_email = $2 AND offer_id = $3
            """,
            [publisherId, customerEmail, offerId]
        ).first else { return (false, nil) }
        let active = try row.decode(Bool.self, "active")
        return (active, active ? try row.decode(Date?.self, "expires_at") : nil)
    }

    /// The customer's coin balance: credits minus reversals.
    public func coinBalance(publisherId: UUID, customerEmail: String) async throws -> Int {
        try await self.database.query(
            "SELECT COALESCE(SUM(coins), 0)::bigint AS balance FROM wallet_entries WHERE publisher_id = $1 AND customer_email = $2",
            [publisherId, customerEmail]
        ).first?.decode(Int.self, "balance") ?? 0
    }

    /// A finished job's outcome from the ledger, for when its Redis status has expired (retention).
    /// A job that granted stays `granted` after a later refund (a final status never changes; the refund
    /// shows in the access status); one whose own check found nothing to grant is `rejected`. A job that
    /// granted a purchase another job brought in is found through `granted_jobs`.
    public func jobOutcome(jobId: String, publisherId: UUID) async throws -> JobRecord? {
        guard let row = try await self.database.query(
            """
            SELECT 0 AS source, true AS fulfilled, NULL AS last_error, t.environment, t.customer_email, g.offer_id, g.granted_until
            FROM granted_jobs g JOIN transactions t ON t.id = g.transaction_ref
            WHERE g.job_id = $1 AND t.publisher_id = $2
            UNION ALL
            SELECT * FROM (
                SELECT 1, fulfilled_at IS NOT NULL, last_error, environment, customer_email, offer_id, granted_until
                FROM transactions
                WHERE job_id = $1 AND publisher_id = $2 AND state IN ('fulfilled', 'invalidated')
                ORDER BY fulfilled_at IS NULL, id LIMIT 1
            ) own
            ORDER BY source LIMIT 1
            """,
            [jobId, publisherId]
        ).first else { return nil }
        let fulfilled = try row.decode(Bool.self, "fulfilled")
        return JobRecord(
            jobId: jobId, publisherId: publisherId, status: fulfilled ? .granted : .rejected,
            // The ledger keeps no attempt count; a job with a ledger row was verified at least once.
            attempts: 1, reason: fulfilled ? nil : try row.decode(String?.self, "last_error"),
            customerEmail: try row.decode(String.self, "customer_email"), offerId: try row.decode(String.self, "offer_id"),
            environment: try row.decode(String?.self, "environment"),
            expiresAt: try row.decode(Date?.self, "granted_until").map { Int($0.timeIntervalSince1970) }
        )
    }
}
