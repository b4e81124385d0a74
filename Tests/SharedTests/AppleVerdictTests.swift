import Testing
@testable import Shared

/// One parameterized test per row of the classification table (issue #3).
@Suite("AppleVerdict.classify")
struct AppleVerdictTests {
    /// The verdict without its free-text detail, so the table is compared exactly but the wording may change.
    enum Shape: Equatable {
        case valid
        case askSandbox
        case askProduction
        case reject(JobReason)
        case fail(JobReason)
        case retry(attemptLimit: Int?, exhausted: AppleVerdict.Exhaustion)
    }

    static func shape(_ verdict: AppleVerdict) -> Shape {
        switch verdict {
        case .valid: .valid
        case .askSandbox: .askSandbox
        case .askProduction: .askProduction
        case .reject(let reason, _): .reject(reason)
        case .expired: .reject(.expired)
        case .fail(let reason, _): .fail(reason)
        case .retry(_, let limit, let exhausted): .retry(attemptLimit: limit, exhausted: exhausted)
        }
    }

    static func detail(_ verdict: AppleVerdict) -> String? {
        switch verdict {
        case .reject(_, let detail), .fail(_, let detail), .retry(let detail, _, _): detail
        case .valid, .askSandbox, .askProduction, .expired: nil
        }
    }

    static func classify(_ status: Int, isRetryable: Bool = false) -> AppleVerdict {
        AppleVerdict.classify(AppleAnswer(status: status, isRetryable: isRetryable))
    }

    @Test("0 is valid and carries the answer", arguments: [0])
    func valid(status: Int) {
        let answer = AppleAnswer(
            status: status, environment: "Production",
            receipt: AppleReceipt(bundleId: "com.example", inApp: [AppleTransaction(productId: "p", transactionId: "1")])
        )
        #expect(AppleVerdict.classify(answer) == .valid(answer))
    }

    @Test("21007 asks the sandbox", arguments: [21007])
    func askSandbox(status: Int) {
        #expect(Self.classify(status) == .askSandbox)
    }

    @Test("21008 asks production", arguments: [21008])
    func askProduction(status: Int) {
        #expect(Self.classify(status) == .askProduction)
    }

    @Test("21000, 21003, 21010 reject as invalid_receipt", arguments: [21000, 21003, 21010])
    func invalidReceipt(status: Int) {
        let verdict = Self.classify(status)
        #expect(Self.shape(verdict) == .reject(.invalidReceipt))
        #expect(Self.detail(verdict)?.contains(String(status)) == true)
    }

    @Test("21002 retries at most 3 attempts, then rejects as invalid_receipt", arguments: [21002])
    func malformedRetriesThenRejects(status: Int) {
        let verdict = Self.classify(status)
        #expect(Self.shape(verdict) == .retry(attemptLimit: 3, exhausted: .rejected(.invalidReceipt)))
        #expect(AppleVerdict.malformedReceiptAttempts == 3)
        #expect(Self.detail(verdict)?.contains(String(status)) == true)
    }

    @Test("21004 fails at once as shared_secret_mismatch", arguments: [21004])
    func sharedSecretMismatch(status: Int) {
        let verdict = Self.classify(status)
        #expect(Self.shape(verdict) == .fail(.sharedSecretMismatch))
    }

    @Test("21005 and 21009 retry within the policy's limit, then fail as apple_unavailable", arguments: [21005, 21009])
    func serverUnavailable(status: Int) {
        let verdict = Self.classify(status)
        #expect(Self.shape(verdict) == .retry(attemptLimit: nil, exhausted: .failed(.appleUnavailable)))
        #expect(Self.detail(verdict)?.contains(String(status)) == true)
    }

    @Test(
        "21100-21199 retry when is-retryable, else fail as apple_unavailable",
        arguments: [21100, 21101, 21150, 21199], [true, false]
    )
    func internalDataAccessErrors(status: Int, isRetryable: Bool) {
        let verdict = Self.classify(status, isRetryable: isRetryable)
        if isRetryable {
            #expect(Self.shape(verdict) == .retry(attemptLimit: nil, exhausted: .failed(.appleUnavailable)))
        } else {
            #expect(Self.shape(verdict) == .fail(.appleUnavailable))
        }
    }

    @Test("21006 rejects as expired", arguments: [21006])
    func expired(status: Int) {
        #expect(Self.shape(Self.classify(status)) == .reject(.expired))
    }

    @Test(
        "an unknown status retries at most 5 attempts, then fails as apple_unavailable",
        arguments: [21999, 12345, 21011, 21099, 21200, 1, -1]
    )
    func unknownStatus(status: Int) {
        // is-retryable only matters inside 21100-21199.
        for isRetryable in [false, true] {
            let verdict = Self.classify(status, isRetryable: isRetryable)
            #expect(Self.shape(verdict) == .retry(attemptLimit: 5, exhausted: .failed(.appleUnavailable)))
            #expect(Self.detail(verdict)?.contains(String(status)) == true)
        }
        #expect(AppleVerdict.unknownStatusAttempts == 5)
    }

    @Test(
        "a transport failure retries within the policy's limit, then fails as apple_unavailable",
        arguments: ["HTTP 503", "timed out", "connection reset by peer", "<html>"]
    )
    func transportFailure(detail: String) {
        let verdict = AppleVerdict.transportFailure(detail)
        #expect(verdict == .retry(detail: detail, attemptLimit: nil, exhausted: .failed(.appleUnavailable)))
    }
}
