import Testing
@testable import Shared

@Suite("AppleEvidence")
struct AppleEvidenceTests {
    @Test(
        "a 21002 is taken for an incident when other jobs got it and Apple verified none, or when at least three others got it and the 21002s are one answer in twenty",
        arguments: [
            // (verifications, other jobs with 21002, incident)
            (0, 0, false), (5, 0, false), (0, 1, true), (0, 3, true),
            // Verified lately: two or three unreadable receipts side by side are believed, however few the verifications.
            (1, 1, false), (1, 2, false), (1, 3, true),
            // Four 21002s (the job's own counted) against the verifications: one in twenty is 76 verifications.
            (76, 3, true), (77, 3, false), (40, 3, true), (1000, 3, false),
            // A storm of 21002s among many verifications.
            (1900, 99, true), (1901, 99, false),
        ]
    )
    func incident(verifications: Int, otherMalformed: Int, incident: Bool) {
        let evidence = AppleEvidence(verifications: verifications, otherMalformed: otherMalformed)
        #expect(evidence.looksLikeIncident == incident)
        #expect(evidence.verifiedLately == (verifications > 0))
    }
}
