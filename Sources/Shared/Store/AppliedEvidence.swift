/// What ``GrantStore/applyEvidence(_:)`` did, and whose access the evidence bears on.
public struct AppliedEvidence: Sendable, Equatable {
    /// Ledger rows revoked by this run.
    public var revoked: Int
    /// Entitlements extended by this run.
    public var extended: Int
    /// Every customer and offer the evidence bears on (a refunded purchase of theirs, a subscription they
    /// own renewed), whether this run or an earlier one of the same evidence changed it; sorted, no repeats.
    public var bearsOn: [CustomerOffer]

    /// Creates a result.
    public init(revoked: Int, extended: Int, bearsOn: [CustomerOffer]) {
        self.revoked = revoked
        self.extended = extended
        self.bearsOn = bearsOn
    }
}

/// One customer's access to one offer: what an access status answers, and what a grant locks.
public struct CustomerOffer: Sendable, Hashable, Comparable {
    /// The customer's email, lower-cased.
    public var customerEmail: String
    /// The publisher's offer.
    public var offerId: String

    /// Creates a pair.
    public init(customerEmail: String, offerId: String) {
        self.customerEmail = customerEmail
        self.offerId = offerId
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.customerEmail, lhs.offerId) < (rhs.customerEmail, rhs.offerId)
    }
}
