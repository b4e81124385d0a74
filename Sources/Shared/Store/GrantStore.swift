import Foundation

/// Commits verified purchases: ledger rows, claims, entitlements and wallet entries, exactly once.
///
/// Each grant is one short PostgreSQL transaction keyed by Apple's identifiers, so a replayed delivery
/// (after a crash between commit and acknowledgement) finds its own work done and changes nothing.
public struct GrantStore: Sendable {
    /// The most coins one wallet entry holds (its column is a PostgreSQL `integer`).
    public static let maxCredit = Int(Int32.max)

    /// What a consumable's purchase credits: the product's coins for each unit Apple says was bought.
    /// Not bounded here: a credit above `maxCredit` is refused before the grant (Fulfiller).
    public static func credit(coins: Int?, quantity: Int) -> Int {
        (coins ?? 0) * max(1, quantity)
    }

    private let database: PostgresClient

    /// Creates a store over a client.
    public init(database: PostgresClient) {
        self.database = database
    }

    /// Grants (or refuses) one purchase; see ``GrantOutcome``.
    ///
    /// One transaction in two round trips on the usual path, since every round trip costs PostgreSQL and
    /// the worker a context switch each (ops/bench). First, pipelined: BEGIN, the purchase's lock, the
    /// customer-and-offer lock, the claim, and the ledger upsert, which writes only if the claim is this
    /// customer's and reads the current entitlement in the same statement (after the locks, so nothing
    /// stale). Then, pipelined: the entitlement or wallet write, the ledger update and COMMIT.
    public func grant(_ request: GrantRequest) async throws -> GrantOutcome {
        try await self.database.withConnection { session in
            do {
                return try await Self.grant(request, session: session)
            } catch {
                await session.rollback()
                throw error
            }
        }
    }

    /// The body of ``grant(_:)``: opens the transaction and commits it on every path that returns.
    private static func grant(_ request: GrantRequest, session: PostgresSession) async throws -> GrantOutcome {
        var request = request
        let job = request.job
        let named = request.transaction
        let claimKey = Self.claimKey(named, byOriginal: request.product.kind.claimsByOriginalTransaction)
        // Hashed once for every ledger row this grant writes (a receipt is some kilobytes).
        let digest = ReceiptDigest.hex(of: job.receiptData)
        // The subscription's other periods the answer says are paid for, as the ledger knows them after the
        // lock: an answer taken just before Apple refunded one of them may reach here after the refund did.
        let paidPeriods = request.product.kind == .autoRenewable
            ? request.renewals.filter { !$0.isCancelled && $0.transactionId != named.transactionId }.map(\.transactionId) : []
        let refundedPeriods = paidPeriods.isEmpty ? [] : [Self.refundedStatement(appId: request.app.id, paidPeriods)]
        // The purchase's lock before the customer's, as evidence takes them: a refund another receipt brings
        // in while this grant runs waits for its commit and finds the ledger row to revoke, or committed
        // before it and is found by the ledger upsert.
        let opened = try await session.pipeline([
            ("BEGIN", []),
            Self.purchaseLockStatement(publisherId: job.publisherId, claimKey: claimKey),
            Self.lockStatement(publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId),
            (
                """
                WITH attempt AS (
                    INSERT INTO claims (publisher_id, claim_key, customer_email) VALUES ($1, $2, $3)
                    ON CONFLICT DO NOTHING RETURNING customer_email
                )
                SELECT customer_email, true AS created FROM attempt
                UNION ALL SELECT customer_email, false FROM claims WHERE publisher_id = $1 AND claim_key = $2
                """,
                [job.publisherId, claimKey, job.customerEmail]
            ),
            Self.recordVerifiedStatement(request, claimKey: claimKey, receiptDigest: digest),
        ] + refundedPeriods)
        var refunded = refundedPeriods.isEmpty ? [] : Set(try opened[5].rows.map { try $0.decode(String.self, "transaction_id") })
        var owner = try opened[3].first?.decode(String.self, "customer_email")
        let claimCreated = try opened[3].first?.decode(Bool.self, "created") ?? false
        // A purchase belongs to the first customer it was *granted* to: a claim this attempt took is given
        // back, in the same transaction, when it grants nothing (a refund, an expired subscription). Else a
        // lapsed subscription checked by one customer would refuse everyone who buys it again later.
        let releaseClaim: [(String, [any PostgresEncodable])] = claimCreated
            ? [("DELETE FROM claims WHERE publisher_id = $1 AND claim_key = $2", [job.publisherId, claimKey])] : []
        if owner == nil {
            // The insert waited for a concurrent grant of the same claim (another offer's lock) and did
            // nothing; the statement's snapshot predates that commit. A new statement sees it.
            owner = try await session.query(
                "SELECT customer_email FROM claims WHERE publisher_id = $1 AND claim_key = $2", [job.publisherId, claimKey]
            ).first?.decode(String.self, "customer_email")
        }
        guard owner == job.customerEmail else {
            // The ledger upsert wrote nothing: the claim is another customer's.
            try await session.query("COMMIT")
            return .alreadyClaimed
        }
        guard let ledgerRow = opened[4].first else { throw PostgresError(.decoding, "the ledger upsert returned no row") }
        var ledger = try Self.ledger(ledgerRow)
        // A refund PostgreSQL knows of stands: such a period counts as cancelled, as a fresher answer has it.
        if ledger.cancelled, !named.isCancelled { refunded.insert(named.transactionId) }
        for index in request.renewals.indices where refunded.contains(request.renewals[index].transactionId) {
            request.renewals[index].cancellationDateMilliseconds = Int64(request.verifiedAt.timeIntervalSince1970 * 1000)
        }
        if refunded.contains(named.transactionId), request.product.kind == .autoRenewable,
            let paid = AppleTransaction.latestPaid(request.renewals, graceEnd: request.gracePeriodEndMilliseconds, at: request.verifiedAt)
        {
            // The answer predates the refund of the period it names, while a later period is still paid for:
            // that period grants, as for an answer that names the refund (Fulfiller); the named one's row
            // grants nothing.
            request.transaction = paid
            let switched = try await session.pipeline([
                Self.invalidateStatement(ledgerId: ledger.id, reason: JobReason.refunded.rawValue),
                Self.recordVerifiedStatement(request, claimKey: claimKey, receiptDigest: digest),
            ])
            guard let row = switched[1].first else { throw PostgresError(.decoding, "the ledger upsert returned no row") }
            ledger = try Self.ledger(row)
        }
        let transaction = request.transaction
        // The ledger keeps a cancellation once seen: a stale answer that predates the refund grants nothing.
        if transaction.isCancelled || ledger.cancelled {
            let cancelledAt = ledger.cancelledAt ?? transaction.cancellationDateMilliseconds.map(Self.date) ?? request.verifiedAt
            try await Self.revoke(ledgerId: ledger.id, cancelledAt: cancelledAt, session: session)
            try await session.pipeline(releaseClaim + [("COMMIT", [])])
            return .refunded
        }
        // Done before: unless it is a subscription's period whose access was since revoked (a refund) while
        // the answer lists a period still paid for (the customer subscribed again): that period grants now,
        // whichever of the subscription's transaction ids the submission names.
        let resubscribed = request.product.kind == .autoRenewable && ledger.entitlement?.active != true
            && Self.newExpiry(request: request, current: ledger.entitlement) != nil
        if ledger.state == "fulfilled", !resubscribed {
            // The access as it stands (no end: the offer is the customer's for life, bought in another app),
            // or what this row granted when the customer holds none.
            let expiresAt = ledger.entitlement.map(\.expiresAt) ?? ledger.grantedUntil
            if ledger.jobId != job.jobId, request.product.kind == .autoRenewable || request.product.kind == .nonRenewing,
                let entitlement = ledger.entitlement, !entitlement.active,
                try await session.query("SELECT 1 FROM granted_jobs WHERE job_id = $1", [job.jobId]).first == nil
            {
                // Another job granted the subscription or pass, and the access has ended since: lapsed, or
                // revoked by the refund of another period or pass (the revoked entitlement keeps its old
                // end). This job finds nothing to grant, as a first check of it would, and reports when what
                // it names ended. (Not when this job granted it itself, before a requeue.)
                let named = request.product.kind == .autoRenewable ? Self.subscriptionEnd(request).map(Self.date) : ledger.grantedUntil
                try await session.query("COMMIT")
                return .expired(expiresAt: [entitlement.expiresAt, named].compactMap { $0 }.min())
            }
            try await session.pipeline(Self.grantedJob(request, ledger: ledger, expiresAt: expiresAt) + [("COMMIT", [])])
            return .granted(expiresAt: expiresAt)
        }
        let expiresAt: Date?
        let write: (String, [any PostgresEncodable])
        switch request.product.kind {
        case .consumable:
            let coins = Self.credit(coins: request.product.coins, quantity: transaction.quantity)
            write = (
                """
                INSERT INTO wallet_entries (publisher_id, customer_email, transaction_ref, kind, coins)
                VALUES ($1, $2, $3, 'credit', $4) ON CONFLICT DO NOTHING
                """,
                [job.publisherId, job.customerEmail, ledger.id, coins]
            )
            expiresAt = nil
        case .nonConsumable, .nonRenewing, .autoRenewable:
            guard var end = Self.newExpiry(request: request, current: ledger.entitlement) else {
                try await session.pipeline([Self.invalidateStatement(ledgerId: ledger.id, reason: JobReason.expired.rawValue)] + releaseClaim + [("COMMIT", [])])
                return .expired(expiresAt: Self.subscriptionEnd(request).map { Date(timeIntervalSince1970: Double($0) / 1000) })
            }
            if request.product.kind == .nonRenewing, end.date != nil {
                // Stacked as a refund recomputes it, whenever the job runs: a pass granted late (after a
                // retry, or submitted after the access before it ended) takes the place its purchase gives it,
                // after the passes bought before it and a subscription to the offer as it stood at the
                // purchase. The access running now is never shortened.
                let passes = try await Self.passes(
                    publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId, without: nil,
                    with: (ledger.id, request.product.durationDays), session: session
                )
                let periods = try await Self.subscriptionPeriods(
                    publisherId: job.publisherId, customerEmail: job.customerEmail, offerId: job.offerId, session: session
                )
                let running = ledger.entitlement.flatMap { $0.active ? $0.expiresAt : nil } ?? .distantPast
                end = Expiry(date: max(Self.stack(passes, after: periods)?.end ?? running, running))
            }
            write = (
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
        // The other periods the expiry counted become ledger rows too (after the write, so `fulfilled`):
        // a later refund of one of them then finds what it has to take back.
        let counted = request.product.kind == .autoRenewable
            ? request.renewals.filter { !$0.isCancelled && $0.transactionId != transaction.transactionId } : []
        let renewals = counted.isEmpty ? [] : [
            Self.renewalsStatement(
                counted, owner: job.customerEmail, product: request.product, publisherId: job.publisherId, appId: request.app.id,
                environment: request.environment, receiptDigest: digest, verifiedAt: request.verifiedAt
            ),
        ]
        try await session.pipeline([write] + renewals + [
            (
                """
                UPDATE transactions SET state = 'fulfilled', fulfilled_at = now(), granted_until = $2, duration_days = $3, last_error = NULL
                WHERE id = $1
                """,
                [ledger.id, expiresAt, request.product.kind == .nonRenewing ? request.product.durationDays : nil]
            ),
        ] + Self.grantedJob(request, ledger: ledger, expiresAt: expiresAt) + [("COMMIT", [])])
        return .granted(expiresAt: expiresAt)
    }

    /// Records a job that grants on a ledger row another job brought in (`granted_jobs`, migration 7); nothing
    /// for the row's own job, which the row names.
    private static func grantedJob(_ request: GrantRequest, ledger: LedgerRow, expiresAt: Date?) -> [(String, [any PostgresEncodable])] {
        guard ledger.jobId != request.job.jobId else { return [] }
        return [(
            "INSERT INTO granted_jobs (job_id, transaction_ref, offer_id, granted_until) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            [request.job.jobId, ledger.id, request.job.offerId, expiresAt]
        )]
    }

    /// The grant an earlier attempt of this job committed, if its ledger row is still fulfilled: what a
    /// replay finishes with (the attempt died, or Redis failed, before the outcome was recorded), without
    /// asking Apple again. Apple failing since, or a subscription lapsed since, must not end such a job
    /// `failed` or `rejected` while PostgreSQL holds its grant.
    /// The job's grant is found through the ledger row it brought in, or, when another job or another
    /// receipt's evidence brought that row in, through `granted_jobs`.
    public func committedGrant(_ job: ReceiptJob) async throws -> CommittedGrant? {
        guard let row = try await self.database.query(
            """
            SELECT t.id, t.environment, t.transaction_id, t.original_transaction_id, t.granted_until, p.kind
            FROM transactions t JOIN products p ON p.id = t.product_ref
            WHERE t.job_id = $1 AND t.publisher_id = $2 AND t.customer_email = $3 AND t.offer_id = $4 AND t.state = 'fulfilled'
            UNION ALL
            SELECT t.id, t.environment, t.transaction_id, t.original_transaction_id, g.granted_until, p.kind
            FROM granted_jobs g JOIN transactions t ON t.id = g.transaction_ref JOIN products p ON p.id = t.product_ref
            WHERE g.job_id = $1 AND t.publisher_id = $2 AND t.customer_email = $3 AND g.offer_id = $4 AND t.state = 'fulfilled'
            ORDER BY id DESC LIMIT 1
            """,
            [job.jobId, job.publisherId, job.customerEmail, job.offerId]
        ).first else { return nil }
        return CommittedGrant(
            environment: try row.decode(String.self, "environment"), transactionId: try row.decode(String.self, "transaction_id"),
            originalTransactionId: try row.decode(String.self, "original_transaction_id"), grantedUntil: try row.decode(Date?.self, "granted_until"),
            kind: ProductKind(rawValue: try row.decode(String.self, "kind")) ?? .consumable
        )
    }

    /// Applies what an answer says about every transaction it lists: refunds revoke what they granted,
    /// renewals extend the subscription of the customer who owns it. Idempotent: a second run of the same
    /// evidence changes nothing, and reports the same customers and offers it bears on.
    @discardableResult
    public func applyEvidence(_ evidence: Evidence) async throws -> AppliedEvidence {
        let cancelled = evidence.transactions.filter(\.isCancelled)
        var periods: [String: [AppleTransaction]] = [:]
        for transaction in evidence.transactions where !transaction.isCancelled && transaction.expiresDateMilliseconds != nil {
            guard evidence.products[transaction.productId]?.kind == .autoRenewable else { continue }
            periods[transaction.originalTransactionId, default: []].append(transaction)
        }
        guard !cancelled.isEmpty || !periods.isEmpty else { return AppliedEvidence(revoked: 0, extended: 0, bearsOn: []) }
        return try await self.database.withTransaction { session in
            // The locks of the purchases refunded or renewed, then the refunds recorded: a grant, or another
            // answer's renewal, of one of them that is in flight commits before the ledger is read below, and
            // one that starts later finds the refund.
            try await session.pipeline(Self.purchaseKeys(cancelled, renewed: periods, evidence: evidence).map {
                Self.purchaseLockStatement(publisherId: evidence.publisherId, claimKey: $0)
            } + (cancelled.isEmpty ? [] : [Self.recordCancellationsStatement(cancelled, appId: evidence.appId)]))
            let refunds = try await Self.refunds(cancelled, evidence: evidence, session: session)
            let owners = try await Self.owners(periods, evidence: evidence, session: session)
            let open = refunds.filter(\.open)
            // Every lock this evidence may need, taken before anything it decides on is read and in one
            // order: two workers applying crossed evidence (each revoking what the other extends) never wait
            // on each other in a cycle, and a refund committed while this one waited is seen below.
            let locks = Set(open.map(\.holder) + owners.flatMap(\.holders)).sorted()
            if !locks.isEmpty {
                try await session.pipeline(locks.map {
                    Self.lockStatement(publisherId: evidence.publisherId, customerEmail: $0.customerEmail, offerId: $0.offerId)
                })
            }
            let renewals = try await Self.renewals(periods, owners: owners, evidence: evidence, session: session)
            // Renewals first: a refunded period keeps the access when a period still paid for ends later,
            // and the periods this same answer brings must be in the ledger when the refund looks for them.
            // Revoked first, they would find the access gone and neither extend it nor count as granted.
            // A refund that keeps the access keeps it until the latest period's end: the access is then
            // extended again, to a grace period's end (billing retry) that no period records.
            var extended = 0
            let digest = renewals.isEmpty ? "" : ReceiptDigest.hex(of: evidence.job.receiptData)
            for renewal in renewals {
                extended += try await Self.extend(renewal, evidence: evidence, receiptDigest: digest, session: session)
            }
            for refund in open {
                try await Self.revoke(ledgerId: refund.ledgerId, cancelledAt: refund.cancelledAt, session: session)
            }
            if !open.isEmpty, !renewals.isEmpty {
                try await session.pipeline(renewals.map { Self.extendStatement($0, publisherId: evidence.publisherId) })
            }
            return AppliedEvidence(
                revoked: open.count, extended: extended, bearsOn: Set(refunds.map(\.holder) + renewals.map(\.holder)).sorted()
            )
        }
    }

    /// A ledger row of a transaction the answer lists as refunded.
    private struct Refund {
        let ledgerId: Int64
        let holder: CustomerOffer
        let cancelledAt: Date
        /// Not yet revoked (an earlier run of the same evidence revoked the others).
        let open: Bool
    }

    /// The ledger rows the answer's refunds cancel: each refunded transaction's, and for a non-consumable
    /// every restore of the purchase (the same original transaction in the same app).
    /// The publisher is named though the app implies it: it leads the index on `original_transaction_id`,
    /// which without it is read end to end (32 ms against 0.07 ms in a ledger of a million rows).
    private static func refunds(_ cancelled: [AppleTransaction], evidence: Evidence, session: PostgresSession) async throws -> [Refund] {
        guard !cancelled.isEmpty else { return [] }
        let cancelledAt = Dictionary(cancelled.map { ($0.transactionId, $0.cancellationDateMilliseconds ?? 0) }) { first, _ in first }
        let purchases = cancelled.filter { evidence.products[$0.productId]?.kind == .nonConsumable }
        let purchaseCancelledAt = Dictionary(purchases.map { ($0.originalTransactionId, $0.cancellationDateMilliseconds ?? 0) }, uniquingKeysWith: min)
        return try await session.query(
            """
            SELECT t.id, t.transaction_id, t.original_transaction_id, t.customer_email, t.offer_id, t.cancellation_date IS NULL AS open
            FROM transactions t JOIN products p ON p.id = t.product_ref
            WHERE t.publisher_id = $4 AND t.app_id = $1
              AND (t.transaction_id = ANY($2) OR (p.kind = 'non_consumable' AND t.original_transaction_id = ANY($3)))
            ORDER BY t.id
            """,
            [
                evidence.appId, PostgresTextArray(cancelled.map(\.transactionId)), PostgresTextArray(Array(purchaseCancelledAt.keys)),
                evidence.publisherId,
            ]
        ).rows.map { row in
            let transactionId = try row.decode(String.self, "transaction_id")
            let originalId = try row.decode(String.self, "original_transaction_id")
            let at = cancelledAt[transactionId] ?? purchaseCancelledAt[originalId] ?? 0
            return Refund(
                ledgerId: try row.decode(Int64.self, "id"),
                holder: CustomerOffer(customerEmail: try row.decode(String.self, "customer_email"), offerId: try row.decode(String.self, "offer_id")),
                cancelledAt: Self.date(at), open: try row.decode(Bool.self, "open")
            )
        }
    }

    /// The periods of one subscription the answer lists for one offer, and the customer who owns it.
    private struct Renewal {
        let holder: CustomerOffer
        let product: Product
        let entries: [AppleTransaction]
        /// The latest period's end, or its grace period's.
        let end: Date
    }

    /// The customer who owns a subscription the answer lists periods of (its claim), and every offer those
    /// periods would extend (an upgrade or a downgrade keeps the original transaction: each product's
    /// periods extend its own offer).
    private struct Owner {
        let original: String
        let customerEmail: String
        let offerIds: [String]

        var holders: [CustomerOffer] { self.offerIds.map { CustomerOffer(customerEmail: self.customerEmail, offerId: $0) } }
    }

    private static func owners(_ periods: [String: [AppleTransaction]], evidence: Evidence, session: PostgresSession) async throws -> [Owner] {
        guard !periods.isEmpty else { return [] }
        return try await session.query(
            "SELECT claim_key, customer_email FROM claims WHERE publisher_id = $1 AND claim_key = ANY($2) ORDER BY customer_email, claim_key",
            [evidence.publisherId, PostgresTextArray(periods.keys.map(Self.claimKey(original:)))]
        ).rows.compactMap { row in
            let original = String(try row.decode(String.self, "claim_key").dropFirst("original:".count))
            guard let entries = periods[original] else { return nil }
            return Owner(
                original: original, customerEmail: try row.decode(String.self, "customer_email"),
                offerIds: Set(entries.compactMap { evidence.products[$0.productId]?.offerId }).sorted()
            )
        }
    }

    /// What the owners' periods extend, read under the owners' locks.
    private static func renewals(
        _ periods: [String: [AppleTransaction]], owners: [Owner], evidence: Evidence, session: PostgresSession
    ) async throws -> [Renewal] {
        guard !owners.isEmpty else { return [] }
        // A refund the ledger holds stands, as in a grant: a stale answer that still lists the period as paid
        // extends nothing with it.
        let (sql, parameters) = Self.refundedStatement(appId: evidence.appId, periods.values.flatMap { $0.map(\.transactionId) })
        let refunded = Set(try await session.query(sql, parameters).rows.map { try $0.decode(String.self, "transaction_id") })
        return owners.flatMap { owner -> [Renewal] in
            let ids = Set(periods[owner.original, default: []].map(\.transactionId).filter { !refunded.contains($0) })
            return owner.offerIds.compactMap { offerId in
                let subscription = evidence.subscription(owner.original, offerId: offerId)
                let counted = subscription.periods.filter { ids.contains($0.transactionId) }
                guard let product = counted.lazy.compactMap({ evidence.products[$0.productId] }).first,
                    let latest = counted.compactMap(\.expiresDateMilliseconds).max()
                else { return nil }
                return Renewal(
                    holder: CustomerOffer(customerEmail: owner.customerEmail, offerId: offerId), product: product, entries: counted,
                    end: Self.date(max(latest, subscription.graceEnd ?? latest))
                )
            }
        }
    }

    /// Records a subscription's periods for its owner and extends the owner's access to the latest one's end:
    /// two statements in one round trip, however many periods a years-old subscription lists; returns how many
    /// entitlements were extended.
    private static func extend(_ renewal: Renewal, evidence: Evidence, receiptDigest: String, session: PostgresSession) async throws -> Int {
        let periods = Self.renewalsStatement(
            renewal.entries, owner: renewal.holder.customerEmail, product: renewal.product, publisherId: evidence.publisherId,
            appId: evidence.appId, environment: evidence.environment, receiptDigest: receiptDigest, verifiedAt: evidence.verifiedAt
        )
        let results = try await session.pipeline([periods, Self.extendStatement(renewal, publisherId: evidence.publisherId)])
        return results[1].affectedRows
    }

    /// Moves the owner's unrevoked access to the renewal's end, if that is later.
    private static func extendStatement(_ renewal: Renewal, publisherId: UUID) -> (String, [any PostgresEncodable]) {
        (
            """
            UPDATE entitlements SET expires_at = $4, updated_at = now()
            WHERE publisher_id = $1 AND customer_email = $2 AND offer_id = $3 AND revoked_at IS NULL
              AND expires_at IS NOT NULL AND expires_at < $4
            """,
            [publisherId, renewal.holder.customerEmail, renewal.holder.offerId, renewal.end]
        )
    }

    /// Which of `transactionIds` Apple is known to have refunded: in the ledger, or seen in any answer.
    private static func refundedStatement(appId: UUID, _ transactionIds: [String]) -> (String, [any PostgresEncodable]) {
        (
            """
            SELECT transaction_id FROM transactions WHERE app_id = $1 AND transaction_id = ANY($2) AND cancellation_date IS NOT NULL
            UNION SELECT transaction_id FROM cancellations WHERE app_id = $1 AND transaction_id = ANY($2)
            """,
            [appId, PostgresTextArray(transactionIds)]
        )
    }

    /// The purchases the refunded transactions and the renewed subscriptions belong to, as their grants lock
    /// them (the claim key), sorted so every taker takes them in one order. A refunded product the catalog
    /// does not know (yet) locks both keys.
    private static func purchaseKeys(
        _ cancelled: [AppleTransaction], renewed periods: [String: [AppleTransaction]], evidence: Evidence
    ) -> [String] {
        let refunded = cancelled.flatMap { transaction -> [String] in
            let kinds = evidence.products[transaction.productId].map { [$0.kind.claimsByOriginalTransaction] } ?? [false, true]
            return kinds.map { Self.claimKey(transaction, byOriginal: $0) }
        }
        return Set(refunded + periods.keys.map(Self.claimKey(original:))).sorted()
    }

    /// Records the refunds an answer lists (`cancellations`), once each.
    private static func recordCancellationsStatement(_ cancelled: [AppleTransaction], appId: UUID) -> (String, [any PostgresEncodable]) {
        (
            """
            INSERT INTO cancellations (app_id, transaction_id, original_transaction_id, cancellation_date)
            SELECT $1, refund.id, refund.original, to_timestamp(refund.at::bigint / 1000.0)
            FROM unnest($2::text[], $3::text[], $4::text[]) AS refund (id, original, at)
            ON CONFLICT DO NOTHING
            """,
            [
                appId, PostgresTextArray(cancelled.map(\.transactionId)), PostgresTextArray(cancelled.map(\.originalTransactionId)),
                PostgresTextArray(cancelled.map { String($0.cancellationDateMilliseconds ?? 0) }),
            ]
        )
    }

    /// Serialises the grants of one purchase (its claim key) with the evidence that refunds it. Taken before
    /// any customer's lock (``lockStatement(publisherId:customerEmail:offerId:)``), by grants and evidence alike.
    static func purchaseLockStatement(publisherId: UUID, claimKey: String) -> (String, [any PostgresEncodable]) {
        Self.advisoryLock("purchase|\(publisherId.lowercasedString)|\(claimKey)")
    }

    /// Serialises work on one customer and offer, so stacking and extending read and write one state.
    static func lockStatement(publisherId: UUID, customerEmail: String, offerId: String) -> (String, [any PostgresEncodable]) {
        Self.advisoryLock("\(publisherId.lowercasedString)|\(customerEmail)|\(offerId)")
    }

    /// A lock held until the transaction ends.
    private static func advisoryLock(_ key: String) -> (String, [any PostgresEncodable]) {
        ("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [key])
    }

    /// Who a purchase belongs to is recorded under this key (`claims`): its original transaction, for the
    /// kinds whose renewals and restores are one purchase, else the transaction itself.
    private static func claimKey(_ transaction: AppleTransaction, byOriginal: Bool) -> String {
        byOriginal ? Self.claimKey(original: transaction.originalTransactionId) : "transaction:\(transaction.transactionId)"
    }

    private static func claimKey(original: String) -> String { "original:\(original)" }

    /// The renewal periods seen in an answer become ledger rows of the subscription's owner, in one statement
    /// (one statement timeout, however many periods); they carry no job id, because the job that brought them
    /// in may be another customer's. They are `fulfilled` when the owner holds an unrevoked entitlement to the
    /// offer (which the extension below carries forward), and only `verified` otherwise (a subscription that
    /// lapsed, or was refunded, and was bought again): the owner's own job for one then grants it in full,
    /// instead of finding it done. Dates travel as Unix milliseconds ('' for none), exactly.
    private static func renewalsStatement(
        _ entries: [AppleTransaction], owner: String, product: Product, publisherId: UUID, appId: UUID, environment: String,
        receiptDigest: String, verifiedAt: Date
    ) -> (String, [any PostgresEncodable]) {
        func milliseconds(_ value: Int64?) -> String { value.map(String.init) ?? "" }
        return (
            """
            INSERT INTO transactions (
                publisher_id, app_id, product_ref, transaction_id, original_transaction_id, product_id, customer_email,
                offer_id, environment, job_id, receipt_digest, state, purchase_date, expires_date, received_at, verified_at,
                fulfilled_at, granted_until
            )
            SELECT $1::uuid, $2::uuid, $3::uuid, period.id, period.original, period.product, $4::text, $5::text, $6::text, NULL,
                $7::text, CASE WHEN held THEN 'fulfilled' ELSE 'verified' END, period.purchased, period.expires, $8::timestamptz,
                $8::timestamptz, CASE WHEN held THEN $8::timestamptz END, CASE WHEN held THEN period.expires END
            FROM (
                SELECT id, original, product,
                    CASE WHEN purchased = '' THEN NULL ELSE 'epoch'::timestamptz + purchased::bigint * interval '1 millisecond' END AS purchased,
                    CASE WHEN expires = '' THEN NULL ELSE 'epoch'::timestamptz + expires::bigint * interval '1 millisecond' END AS expires
                FROM unnest($9::text[], $10::text[], $11::text[], $12::text[], $13::text[]) AS given (id, original, product, purchased, expires)
            ) period, (
                SELECT EXISTS (
                    SELECT 1 FROM entitlements WHERE publisher_id = $1 AND customer_email = $4 AND offer_id = $5 AND revoked_at IS NULL
                ) AS held
            ) owner
            ON CONFLICT (app_id, transaction_id) DO NOTHING
            """,
            [
                publisherId, appId, product.id, owner, product.offerId, environment, receiptDigest, verifiedAt,
                PostgresTextArray(entries.map(\.transactionId)), PostgresTextArray(entries.map(\.originalTransactionId)),
                PostgresTextArray(entries.map(\.productId)), PostgresTextArray(entries.map { milliseconds($0.purchaseDateMilliseconds) }),
                PostgresTextArray(entries.map { milliseconds($0.expiresDateMilliseconds) }),
            ]
        )
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
        /// The job that brought the transaction in (or took it over from another customer).
        let jobId: String?
        let grantedUntil: Date?
        let cancelledAt: Date?
        /// The customer's entitlement to the offer as it stood before this grant, if any.
        let entitlement: (expiresAt: Date?, active: Bool)?

        var cancelled: Bool { self.cancelledAt != nil }
    }

    private static func date(_ milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    /// Upserts the ledger row, only if `claimKey` is this customer's (the claim precedes it in the same
    /// transaction), and in the same statement reads the customer's current entitlement (the lock is held,
    /// so it is the state this grant builds on).
    private static func recordVerifiedStatement(_ request: GrantRequest, claimKey: String, receiptDigest: String) -> (String, [any PostgresEncodable]) {
        let transaction = request.transaction
        let job = request.job
        func date(_ milliseconds: Int64?) -> Date? { milliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) } }
        // The insert runs only for the claim's owner. A row of another customer that granted nothing (a
        // check of a lapsed subscription, whose claim was given back) becomes the owner's, as a fresh
        // check: else its grant, and a later refund of it, would count for the customer it never granted.
        let handedOver = "transactions.state <> 'fulfilled' AND transactions.customer_email <> EXCLUDED.customer_email"
        // A refund any answer listed stands (`cancellations`), whether or not the ledger held the transaction
        // then. A non-consumable is one purchase however often it is restored (each restore a transaction id
        // of its own, under the purchase's original): a refund of any of them cancels this one too, so a
        // receipt taken before the refund cannot grant it again through a restore. (The restores are looked
        // up under the publisher too, which leads the index on the original transaction.)
        let owner = ["customer_email", "offer_id", "product_ref", "job_id", "environment", "receipt_digest", "received_at"].map {
            "\($0) = CASE WHEN \(handedOver) THEN EXCLUDED.\($0) ELSE transactions.\($0) END,"
        }.joined(separator: "\n")
        return (
            """
            WITH ledger AS (
                INSERT INTO transactions (
                    publisher_id, app_id, product_ref, transaction_id, original_transaction_id, product_id, customer_email,
                    offer_id, environment, job_id, receipt_digest, state, purchase_date, expires_date, cancellation_date,
                    received_at, verified_at
                )
                SELECT $1::uuid, $2::uuid, $3::uuid, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text, $10::text,
                    $11::text, 'verified', $12::timestamptz, $13::timestamptz,
                    COALESCE($14::timestamptz, (
                        SELECT min(seen.cancellation_date) FROM cancellations seen
                        WHERE seen.app_id = $2 AND (seen.transaction_id = $4 OR ($18::boolean AND seen.original_transaction_id = $5))
                    ), CASE WHEN $18::boolean THEN (
                        SELECT min(restored.cancellation_date) FROM transactions restored
                        WHERE restored.publisher_id = $1 AND restored.app_id = $2 AND restored.original_transaction_id = $5
                    ) END),
                    $15::timestamptz, $16::timestamptz
                WHERE EXISTS (SELECT 1 FROM claims WHERE publisher_id = $1 AND claim_key = $17 AND customer_email = $7)
                ON CONFLICT (app_id, transaction_id) DO UPDATE SET
                    \(owner)
                    state = CASE WHEN \(handedOver) THEN 'verified' ELSE transactions.state END,
                    invalidated_at = CASE WHEN \(handedOver) THEN NULL ELSE transactions.invalidated_at END,
                    last_error = CASE WHEN \(handedOver) THEN NULL ELSE transactions.last_error END,
                    expires_date = EXCLUDED.expires_date,
                    cancellation_date = COALESCE(transactions.cancellation_date, EXCLUDED.cancellation_date),
                    verified_at = CASE WHEN \(handedOver) THEN EXCLUDED.verified_at ELSE COALESCE(transactions.verified_at, EXCLUDED.verified_at) END
                RETURNING id, state, job_id, granted_until, cancellation_date
            )
            SELECT ledger.id, ledger.state, ledger.job_id, ledger.granted_until, ledger.cancellation_date,
                e.publisher_id IS NOT NULL AS has_entitlement, e.expires_at AS entitlement_expires_at,
                COALESCE(e.revoked_at IS NULL AND (e.expires_at IS NULL OR e.expires_at > now()), false) AS entitlement_active
            FROM ledger LEFT JOIN entitlements e ON e.publisher_id = $1 AND e.customer_email = $7 AND e.offer_id = $8
            """,
            [
                job.publisherId, request.app.id, request.product.id, transaction.transactionId, transaction.originalTransactionId,
                transaction.productId, job.customerEmail, job.offerId, request.environment, job.jobId,
                receiptDigest, date(transaction.purchaseDateMilliseconds),
                date(transaction.expiresDateMilliseconds), date(transaction.cancellationDateMilliseconds),
                Date(timeIntervalSince1970: Double(job.acceptedAtMilliseconds) / 1000), request.verifiedAt, claimKey,
                request.product.kind == .nonConsumable,
            ]
        )
    }

    private static func ledger(_ row: PostgresRow) throws -> LedgerRow {
        let entitlement: (expiresAt: Date?, active: Bool)? = try row.decode(Bool.self, "has_entitlement")
            ? (try row.decode(Date?.self, "entitlement_expires_at"), try row.decode(Bool.self, "entitlement_active")) : nil
        return LedgerRow(
            id: try row.decode(Int64.self, "id"), state: try row.decode(String.self, "state"), jobId: try row.decode(String?.self, "job_id"),
            grantedUntil: try row.decode(Date?.self, "granted_until"), cancelledAt: try row.decode(Date?.self, "cancellation_date"),
            entitlement: entitlement
        )
    }

    /// Withdraws what a refunded transaction gave: when it, or another period of its subscription, was
    /// granted, the customer's access to its offer is recomputed from what the ledger still holds
    /// (``recomputeAccess``); its coins are reversed; its ledger row is invalidated, and so are a
    /// non-consumable's restores (the same original transaction).
    private static func revoke(ledgerId: Int64, cancelledAt: Date, session: PostgresSession) async throws {
        let cancelled = try await session.query(
            """
            SELECT t.customer_email, t.offer_id, t.publisher_id, EXISTS (
                SELECT 1 FROM transactions g WHERE g.publisher_id = t.publisher_id AND g.app_id = t.app_id
                  AND g.original_transaction_id = t.original_transaction_id
                  AND g.customer_email = t.customer_email AND g.offer_id = t.offer_id AND g.state = 'fulfilled'
            ) AS granted, p.kind = 'non_consumable' AS lifetime
            FROM transactions t JOIN products p ON p.id = t.product_ref WHERE t.id = $1
            """,
            [ledgerId]
        ).first
        if let cancelled, try cancelled.decode(Bool.self, "lifetime") {
            // A non-consumable's restores (new transaction ids, one original) are the same purchase, as its
            // claim is: refunded with it, so none of them keeps the access.
            try await session.query(
                """
                UPDATE transactions o SET cancellation_date = COALESCE(o.cancellation_date, $2), state = 'invalidated',
                    invalidated_at = COALESCE(o.invalidated_at, now()), last_error = 'refunded'
                FROM transactions t
                WHERE t.id = $1 AND o.publisher_id = t.publisher_id AND o.app_id = t.app_id
                  AND o.original_transaction_id = t.original_transaction_id AND o.id <> t.id
                """,
                [ledgerId, cancelledAt]
            )
        }
        if let cancelled, try cancelled.decode(Bool.self, "granted") {
            try await Self.recomputeAccess(
                publisherId: try cancelled.decode(UUID.self, "publisher_id"), customerEmail: try cancelled.decode(String.self, "customer_email"),
                offerId: try cancelled.decode(String.self, "offer_id"), without: ledgerId, cancelledAt: cancelledAt, session: session
            )
        }
        try await session.query(
            """
            INSERT INTO wallet_entries (publisher_id, customer_email, transaction_ref, kind, coins)
            SELECT publisher_id, customer_email, transaction_ref, 'reversal', -coins FROM wallet_entries
            WHERE transaction_ref = $1 AND kind = 'credit'
            ON CONFLICT DO NOTHING
            """,
            [ledgerId]
        )
        try await session.query(
            """
            UPDATE transactions SET cancellation_date = COALESCE(cancellation_date, $2), state = 'invalidated',
                invalidated_at = COALESCE(invalidated_at, now()), last_error = 'refunded'
            WHERE id = $1
            """,
            [ledgerId, cancelledAt]
        )
    }

    /// A non-renewing pass of the ledger: its row, when it was bought, and the days it was sold with.
    private struct Pass {
        let id: Int64
        let purchased: Date
        let days: Int
    }

    /// The customer's non-renewing passes for an offer that are granted and not refunded, but `without`
    /// and with the pass being granted, in the order they were bought. The pass being granted counts with the
    /// days it is recorded with, those of the worker's catalog, though PostgreSQL's may have changed since.
    private static func passes(
        publisherId: UUID, customerEmail: String, offerId: String, without: Int64?, with granting: (id: Int64, days: Int?)?,
        session: PostgresSession
    ) async throws -> [Pass] {
        try await session.query(
            """
            SELECT t.id, COALESCE(t.purchase_date, t.verified_at) AS purchased,
                COALESCE(CASE WHEN t.id = $5 THEN $6::integer END, t.duration_days, p.duration_days) AS duration_days
            FROM transactions t
            JOIN products p ON p.id = t.product_ref
            WHERE t.publisher_id = $1 AND t.customer_email = $2 AND t.offer_id = $3 AND p.kind = 'non_renewing'
              AND (t.id = $5 OR (t.id IS DISTINCT FROM $4 AND t.state = 'fulfilled' AND t.cancellation_date IS NULL))
            ORDER BY purchased, t.id
            """,
            [publisherId, customerEmail, offerId, without, granting?.id, granting?.days]
        ).rows.map {
            Pass(id: try $0.decode(Int64.self, "id"), purchased: try $0.decode(Date.self, "purchased"), days: try $0.decode(Int.self, "duration_days"))
        }
    }

    /// A paid period of a subscription: when it was bought (unknown for some old rows) and when it ends.
    private struct Period {
        let bought: Date?
        let ends: Date
    }

    /// The customer's granted periods of subscriptions to an offer that are not refunded.
    private static func subscriptionPeriods(
        publisherId: UUID, customerEmail: String, offerId: String, session: PostgresSession
    ) async throws -> [Period] {
        try await session.query(
            """
            SELECT t.purchase_date, t.expires_date FROM transactions t JOIN products p ON p.id = t.product_ref
            WHERE t.publisher_id = $1 AND t.customer_email = $2 AND t.offer_id = $3 AND p.kind = 'auto_renewable'
              AND t.state = 'fulfilled' AND t.cancellation_date IS NULL AND t.expires_date IS NOT NULL
            """,
            [publisherId, customerEmail, offerId]
        ).rows.map { Period(bought: try $0.decode(Date?.self, "purchase_date"), ends: try $0.decode(Date.self, "expires_date")) }
    }

    /// Passes stacked in the order they were bought, each from its purchase, the end of the one before, or
    /// the end of the subscription `periods` bought by its purchase, whichever is latest: a pass bought while
    /// a subscription ran follows the subscription as it stood then, once (renewals bought later do not move
    /// it again). The end and the last pass, or `nil` for none. Grants and refunds both stack with this, so
    /// a pass's days do not depend on when its job ran.
    private static func stack(_ passes: [Pass], after periods: [Period] = []) -> (end: Date, last: Int64)? {
        var stack: (end: Date, last: Int64)?
        for pass in passes {
            let subscribed = periods.filter { ($0.bought ?? $0.ends) <= pass.purchased }.map(\.ends).max()
            let start = max(pass.purchased, stack?.end ?? pass.purchased, subscribed ?? pass.purchased)
            stack = (start.addingTimeInterval(Double(pass.days) * 86_400), pass.id)
        }
        return stack
    }

    /// The customer's access to an offer, recomputed without a refunded ledger row from every grant of the
    /// offer the ledger still holds, in any of the publisher's apps (one offer may be sold in several):
    ///
    /// - forever, while a non-consumable of it stays granted;
    /// - else until the latest of the subscriptions' periods still paid for (the refunded period's own
    ///   subscription's, recorded or granted, and the other subscriptions' granted ones), and the passes
    ///   still granted, stacked in the order they were bought, the ones bought before that end after it;
    /// - revoked at the refund when that is no later than the refund.
    ///
    /// Only this customer and offer: after an upgrade or a downgrade, the other product's periods are another
    /// offer's access, neither kept by nor taken with this one. An unrevoked entitlement only: a revoked one
    /// has nothing left to take. A billing grace period is not in the ledger, so the access ends at the
    /// subscription's last paid period until its receipt is submitted again.
    private static func recomputeAccess(
        publisherId: UUID, customerEmail: String, offerId: String, without refunded: Int64, cancelledAt: Date, session: PostgresSession
    ) async throws {
        let held = try await session.query(
            """
            SELECT other.id, p.kind, other.purchase_date, other.expires_date FROM transactions other
            JOIN products p ON p.id = other.product_ref, transactions refunded
            WHERE refunded.id = $4 AND other.publisher_id = $1 AND other.customer_email = $2 AND other.offer_id = $3
              AND other.id <> refunded.id AND other.cancellation_date IS NULL AND p.kind IN ('non_consumable', 'auto_renewable')
              AND (other.state = 'fulfilled' OR (p.kind = 'auto_renewable' AND other.app_id = refunded.app_id
                AND other.original_transaction_id = refunded.original_transaction_id))
            ORDER BY other.id
            """,
            [publisherId, customerEmail, offerId, refunded]
        ).rows.map {
            (
                id: try $0.decode(Int64.self, "id"), kind: try $0.decode(String.self, "kind"),
                bought: try $0.decode(Date?.self, "purchase_date"), ends: try $0.decode(Date?.self, "expires_date")
            )
        }
        // The access left: its end (`nil` for forever) and the ledger row it comes from, or nothing.
        var left: (end: Date?, by: Int64)?
        if let lifetime = held.first(where: { $0.kind == ProductKind.nonConsumable.rawValue }) {
            left = (nil, lifetime.id)
        } else {
            let periods = held.compactMap { row in row.ends.map { (period: Period(bought: row.bought, ends: $0), by: row.id) } }
            let subscribed = periods.max { $0.period.ends < $1.period.ends }.map { (ends: $0.period.ends, by: $0.by) }
            let passes = try await Self.passes(
                publisherId: publisherId, customerEmail: customerEmail, offerId: offerId, without: refunded, with: nil, session: session
            )
            let stacked = Self.stack(passes, after: periods.map(\.period))
            if let subscribed, subscribed.ends >= stacked?.end ?? .distantPast {
                left = (subscribed.ends, subscribed.by)
            } else if let stacked {
                left = (stacked.end, stacked.last)
            }
            if let end = left?.end, end <= cancelledAt { left = nil }
        }
        try await session.query(
            """
            UPDATE entitlements SET expires_at = CASE WHEN $6::boolean THEN $4::timestamptz ELSE expires_at END,
                granted_by = COALESCE($5::bigint, granted_by), revoked_at = CASE WHEN $6 THEN NULL ELSE $7::timestamptz END, updated_at = now()
            WHERE publisher_id = $1 AND customer_email = $2 AND offer_id = $3 AND revoked_at IS NULL
            """,
            [publisherId, customerEmail, offerId, left?.end, left?.by, left != nil, cancelledAt]
        )
    }

    private static func invalidateStatement(ledgerId: Int64, reason: String) -> (String, [any PostgresEncodable]) {
        ("UPDATE transactions SET state = 'invalidated', invalidated_at = COALESCE(invalidated_at, now()), last_error = $2 WHERE id = $1", [ledgerId, reason])
    }
}
