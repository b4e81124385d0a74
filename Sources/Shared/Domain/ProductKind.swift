/// What buying a product grants (CONTRACT.md, "What a grant means").
public enum ProductKind: String, Sendable, Codable, CaseIterable {
    /// Coins credited to the wallet, once per Apple `transaction_id`.
    case consumable
    /// Access to the offer with no expiry.
    case nonConsumable = "non_consumable"
    /// Access until the latest expiry Apple reports for the subscription.
    case autoRenewable = "auto_renewable"
    /// Access for `durationDays`, stacked after access still active.
    case nonRenewing = "non_renewing"

    /// Whether one purchase is identified by its `original_transaction_id` (else by `transaction_id`).
    public var claimsByOriginalTransaction: Bool { self == .nonConsumable || self == .autoRenewable }
}
