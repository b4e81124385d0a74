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

    static func classify(_ status: Int, isRetryable: Bool? = nil) -> AppleVerdict {
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

    @Test("21003, 21010 reject as invalid_receipt", arguments: [21003, 21010])
    func invalidReceipt(status: Int) {
        let verdict = Self.classify(status)
        #expect(Self.shape(verdict) == .reject(.invalidReceipt))
        #expect(Self.detail(verdict)?.contains(String(status)) == true)
    }

    @Test("21000 blames the request, not the receipt: it fails at once as internal, to be requeued", arguments: [21000])
    func requestNotRead(status: Int) {
        let verdict = Self.classify(status)
        #expect(Self.shape(verdict) == .fail(.internal))
        #expect(verdict.appleStatus == 21000)
    }

    @Test("21002 retries at most 3 attempts, then rejects as invalid_receipt", arguments: [21002])
    func malformedRetriesThenRejects(status: Int) {
        let verdict = Self.classify(status)
        #expect(Self.shape(verdict) == .retry(attemptLimit: 3, exhausted: .rejected(.invalidReceipt, unlessIncidentIn: .production)))
        // Weighed against what Apple's environment that answered does for other receipts.
        let sandbox = AppleVerdict.classify(AppleAnswer(status: status), environment: .sandbox)
        #expect(Self.shape(sandbox) == .retry(attemptLimit: 3, exhausted: .rejected(.invalidReceipt, unlessIncidentIn: .sandbox)))
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
        "21100-21199 retry unless is-retryable says not to (absent, Apple's \"try again later\" holds), then fail as apple_unavailable",
        arguments: [21100, 21101, 21150, 21199], [true, false, nil]
    )
    func internalDataAccessErrors(status: Int, isRetryable: Bool?) {
        let verdict = Self.classify(status, isRetryable: isRetryable)
        if isRetryable != false {
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
        for isRetryable: Bool? in [false, true, nil] {
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

    @Test("an answer of more values than any real one holds is not read (a transport failure, tried again), so it cannot parse into hundreds of MB")
    func valueLimit() throws {
        // The answer, its status and its array: three values, then the array's zeros.
        func answer(zeros: Int) -> String {
            #"{"status":21004,"pad":["# + Array(repeating: "0", count: zeros).joined(separator: ",") + "]}"
        }
        let read = try #require(Self.classify(body: answer(zeros: AppleVerdict.maxAnswerValues - 3)))
        #expect(Self.shape(read) == .fail(.sharedSecretMismatch))
        #expect(Self.classify(body: answer(zeros: AppleVerdict.maxAnswerValues - 2)) == nil)
    }

    static func classify(body: String) -> AppleVerdict? {
        Array(body.utf8).withUnsafeBytes { AppleVerdict.classify(body: $0) }
    }

    /// Apple's iOS 6-style answer to a transaction receipt (the fields at the top of `receipt`, `bid` for the
    /// bundle, `latest_receipt_info` an object), as Apple documented it for those receipts.
    static let iOS6Answer = """
        {"receipt": {"original_purchase_date_pst": "2013-01-10 05:39:04 America/Los_Angeles", "purchase_date_ms": "1357825144000",
          "original_transaction_id": "1000000061051565", "original_purchase_date_ms": "1357825144000", "transaction_id": "1000000061051565",
          "quantity": "1", "bvrs": "1.0", "item_id": "580190813", "product_id": "com.example.sub", "bid": "com.example.app",
          "expires_date": "1357825444000", "purchase_date": "2013-01-10 13:39:04 Etc/GMT"},
         "latest_receipt_info": {"transaction_id": "1000000061051566", "product_id": "com.example.sub", "bid": "com.example.app",
          "expires_date": "1357825744000", "original_transaction_id": "1000000061051565"},
         "latest_receipt": "ewoJInNpZ25hdHVyZSIgPSAi", "status": STATUS}
        """

    @Test("an answer whose status reads but whose rest does not is classified on its status alone, never as Apple being down")
    func unreadableShape() throws {
        // A status 0 Tollgate cannot check: failed at once for an operator (requeue after a fix), not hours of retries.
        let valid = try #require(Self.classify(body: Self.iOS6Answer.replacingOccurrences(of: "STATUS", with: "0")))
        #expect(Self.shape(valid) == .fail(.internal))
        #expect(valid.appleStatus == 0)
        #expect(Self.detail(valid)?.contains("iOS 6") == true)
        // 21006 is Apple's word that the subscription expired, whatever shape the rest has.
        let expired = try #require(Self.classify(body: Self.iOS6Answer.replacingOccurrences(of: "STATUS", with: "21006")))
        #expect(Self.shape(expired) == .reject(.expired))
        #expect(expired.appleStatus == 21006)
        // Error statuses need nothing else: a broken receipt beside them changes nothing.
        let secret = try #require(Self.classify(body: #"{"status": 21004, "receipt": "junk"}"#))
        #expect(Self.shape(secret) == .fail(.sharedSecretMismatch))
        let sandbox = try #require(Self.classify(body: #"{"status": "21007", "latest_receipt_info": {"a": 1}}"#))
        #expect(sandbox == .askSandbox)
        let busy = try #require(Self.classify(body: #"{"status": 21150, "receipt": 7}"#))
        #expect(Self.shape(busy) == .retry(attemptLimit: nil, exhausted: .failed(.appleUnavailable)))
        let refused = try #require(Self.classify(body: #"{"status": 21150, "is-retryable": 0, "receipt": 7}"#))
        #expect(Self.shape(refused) == .fail(.appleUnavailable))
    }

    @Test("a body that is not verifyReceipt JSON (no object, no status) is not classified: the call failed", arguments: [
        "", "<html>busy</html>", "[0]", #"{"receipt": {"bundle_id": "b"}}"#, #"{"status": "zero"}"#, #"{"status": 0"#,
    ])
    func notAnAnswer(body: String) {
        #expect(Self.classify(body: body) == nil)
    }

    @Test("a well-formed answer is classified as the table says")
    func readableBody() throws {
        let verdict = try #require(Self.classify(body: #"{"status": 0, "receipt": {"bundle_id": "b", "in_app": []}}"#))
        #expect(verdict == .valid(AppleAnswer(status: 0, receipt: AppleReceipt(bundleId: "b", inApp: []))))
    }
}
