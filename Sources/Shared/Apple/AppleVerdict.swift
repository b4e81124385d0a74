/// What one verifyReceipt call means for the job (issue #3's table, one row per case).
public enum AppleVerdict: Sendable, Equatable {
    /// Status 0: go on to the checks of the answer.
    case valid(AppleAnswer)
    /// 21007: the receipt is from the sandbox; ask the sandbox URL.
    case askSandbox
    /// 21008: the receipt is from production; ask the production URL.
    case askProduction
    /// Final refusal.
    case reject(JobReason, detail: String)
    /// 21006: a valid receipt whose subscription has expired; the answer says until when it ran.
    case expired(AppleAnswer)
    /// Final failure that an operator must look at (dead-lettered at once).
    case fail(JobReason, detail: String)
    /// Try again later: at most `attemptLimit` attempts that end with this same answer (attempts that
    /// ended otherwise, a timeout say, do not count), and within the policy's limit on all attempts; once
    /// exhausted the job ends as `exhausted`.
    case retry(detail: String, attemptLimit: Int?, exhausted: Exhaustion)

    /// How a job ends when its retries run out.
    public enum Exhaustion: Sendable, Equatable {
        /// Rejected, unless the answer looks like an incident at Apple in that environment (21002: no receipt
        /// verified there lately while other receipts got the same answer); then retried as unavailable.
        case rejected(JobReason, unlessIncidentIn: VerifyReceiptClient.Environment)
        case failed(JobReason)
    }

    /// Apple's `status` behind the verdict, or `nil` when no answer arrived (HTTP error, timeout, not JSON).
    public var appleStatus: Int? {
        switch self {
        case .valid: return 0
        case .askSandbox: return 21007
        case .askProduction: return 21008
        case .expired: return 21006
        case .reject(_, let detail), .fail(_, let detail), .retry(let detail, _, _):
            // classify(_:) writes "apple status N"; transport failures write something else.
            guard detail.hasPrefix(Self.statusDetailPrefix) else { return nil }
            return Int(detail.dropFirst(Self.statusDetailPrefix.count).prefix { $0.isNumber || $0 == "-" })
        }
    }

    static let statusDetailPrefix = "apple status "

    /// Attempts allowed for statuses Apple documents as passing (21002 in outages), and for unknown ones.
    public static let malformedReceiptAttempts = 3
    /// Attempts allowed for a status Apple does not document.
    public static let unknownStatusAttempts = 5

    /// Classifies an answer that arrived as well-formed JSON from `environment`.
    public static func classify(_ answer: AppleAnswer, environment: VerifyReceiptClient.Environment = .production) -> AppleVerdict {
        let detail = "\(Self.statusDetailPrefix)\(answer.status)"
        switch answer.status {
        case 0:
            return .valid(answer)
        case 21007:
            return .askSandbox
        case 21008:
            return .askProduction
        case 21000:
            // "The request to the App Store was not made using the HTTP POST request method" (formerly "could
            // not read the JSON object you provided"): it blames the request, not the receipt, so the job waits
            // for an operator (a proxy or URL in the way) and can be requeued, instead of being refused for good.
            return .fail(.internal, detail: detail)
        case 21003, 21010:
            return .reject(.invalidReceipt, detail: detail)
        case 21002:
            // Apple has answered 21002 for good receipts during outages: a few tries before believing it.
            return .retry(
                detail: detail, attemptLimit: Self.malformedReceiptAttempts, exhausted: .rejected(.invalidReceipt, unlessIncidentIn: environment)
            )
        case 21004:
            return .fail(.sharedSecretMismatch, detail: detail)
        case 21005, 21009:
            return .retry(detail: detail, attemptLimit: nil, exhausted: .failed(.appleUnavailable))
        case 21006:
            return .expired(answer)
        case 21100...21199:
            // "Internal data access error. Try again later": only an explicit `is-retryable: 0` says not to.
            return answer.isRetryable == false
                ? .fail(.appleUnavailable, detail: detail)
                : .retry(detail: detail, attemptLimit: nil, exhausted: .failed(.appleUnavailable))
        default:
            return .retry(detail: detail, attemptLimit: Self.unknownStatusAttempts, exhausted: .failed(.appleUnavailable))
        }
    }

    /// Most values read in an answer (a parsed value of an answer of tiny ones takes about 25 bytes).
    static let maxAnswerValues = 500_000

    /// Classifies the body of an HTTP 200 answer, or `nil` when it is not verifyReceipt JSON (not an
    /// object, or no status). An answer whose status reads but whose rest does not (Apple's iOS 6-style
    /// answers: `receipt` without `bundle_id`, `latest_receipt_info` an object) is classified on its status
    /// alone: an error status needs nothing else, 21006 is `expired` whatever the subscription, and a
    /// status 0 that cannot be checked ends the job `failed` `internal` at once, for an operator, instead of
    /// asking Apple again for hours as if it were down.
    public static func classify(body bytes: UnsafeRawBufferPointer, environment: VerifyReceiptClient.Environment = .production) -> AppleVerdict? {
        // Apple's answers nest four deep (answer, receipt, in_app, transaction), and hold a few dozen values per
        // transaction (some thousands for a subscription years old): the limits bound a hostile answer, whose
        // 16 MiB of tiny values would otherwise parse into about 200 MB.
        guard let object = JSONValue.object(bytes, maxDepth: 32, maxValues: Self.maxAnswerValues) else { return nil }
        if let answer = try? AppleAnswer(object: object) { return Self.classify(answer, environment: environment) }
        guard let status = try? AppleAnswer.status(object) else { return nil }
        let detail = "\(Self.statusDetailPrefix)\(status), in a shape Tollgate does not read (an iOS 6-style receipt?)"
        switch status {
        case 0:
            return .fail(.internal, detail: detail)
        case 21006:
            return .reject(.expired, detail: detail)
        default:
            return Self.classify(AppleAnswer(status: status, isRetryable: AppleAnswer.retryableFlag(object)), environment: environment)
        }
    }

    /// Classifies a call that produced no usable JSON: HTTP errors, timeouts, broken connections, HTML.
    public static func transportFailure(_ detail: String) -> AppleVerdict {
        .retry(detail: detail, attemptLimit: nil, exhausted: .failed(.appleUnavailable))
    }
}
