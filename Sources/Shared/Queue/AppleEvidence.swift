/// What every worker saw lately of one of Apple's environments, to tell an answer about one receipt (21002,
/// "malformed") from an incident at Apple that answers it for good receipts too, as on 7-8 February 2023.
public struct AppleEvidence: Sendable, Equatable {
    /// Apple verified a receipt there (status 0 or 21006) within the window.
    public var verifiedLately: Bool
    /// Other jobs that got 21002 there within the window.
    public var otherMalformed: Int

    /// An incident: other receipts got the same answer and none was verified.
    public var looksLikeIncident: Bool { !self.verifiedLately && self.otherMalformed > 0 }
}
