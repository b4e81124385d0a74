/// What every worker saw lately of one of Apple's environments, to tell an answer about one receipt (21002,
/// "malformed") from an incident at Apple that answers it for good receipts too, as on 7-8 February 2023,
/// whether it answers it for every receipt or for some of them.
public struct AppleEvidence: Sendable, Equatable {
    /// Receipts Apple verified there (status 0 or 21006) within the window, as the workers counted them.
    public var verifications: Int
    /// Other jobs that got 21002 there within the window.
    public var otherMalformed: Int

    /// Other jobs that must have got 21002 within the window, besides Apple verifying receipts, for the
    /// share of 21002s to be weighed: with fewer, two unreadable receipts side by side are not an incident.
    public static let leastOthersWeighed = 3
    /// The share of 21002s among the window's answers (the job's own counted) from which they are taken for
    /// an incident although Apple verifies receipts: one in twenty. Unreadable receipts are far rarer than
    /// that from publishers' middleware; an Apple that answers 21002 to a twentieth of good receipts would
    /// reject one in 8,000 of them for good on three tries.
    public static let incidentShareDenominator = 20

    public init(verifications: Int, otherMalformed: Int) {
        self.verifications = verifications
        self.otherMalformed = otherMalformed
    }

    /// Apple verified a receipt there within the window.
    public var verifiedLately: Bool { self.verifications > 0 }

    /// An incident: other receipts got the same answer, and Apple verified none, or so few against them
    /// that the 21002s are at least one answer in twenty (with at least ``leastOthersWeighed`` other jobs).
    public var looksLikeIncident: Bool {
        guard self.otherMalformed > 0 else { return false }
        guard self.verifiedLately else { return true }
        let malformed = self.otherMalformed + 1
        return self.otherMalformed >= Self.leastOthersWeighed
            && malformed * Self.incidentShareDenominator >= malformed + self.verifications
    }
}
