import Foundation

/// A job's grant as its ledger row records it (``GrantStore/committedGrant(_:)``).
public struct CommittedGrant: Sendable, Equatable {
    /// `Production` or `Sandbox`.
    public var environment: String
    /// The transaction the grant was for.
    public var transactionId: String
    /// Its original transaction.
    public var originalTransactionId: String
    /// When the access it gave ends (nil: no end, or coins).
    public var grantedUntil: Date?
    /// The kind of product granted.
    public var kind: ProductKind

    /// The transaction ids the grant made the customer's: the purchase, and for a kind claimed by its
    /// original transaction, the original too.
    public var claimed: [String] {
        self.kind.claimsByOriginalTransaction && self.originalTransactionId != self.transactionId
            ? [self.transactionId, self.originalTransactionId] : [self.transactionId]
    }
}
