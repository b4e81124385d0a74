/// How an injected failure is answered, chosen globally (`--fail-mode`) or per scenario (`fail.mode`).
///
/// The cases cover what a real verifyReceipt client meets in production: HTTP errors from Apple's
/// front ends, a hung connection or answer, a captive portal or proxy page, an empty, cut, ill-shaped or huge body, Apple's own
/// "try again" statuses delivered with HTTP 200, and its refusal of a receipt it verified before.
enum FailMode: String, CaseIterable, Codable, Sendable {
    /// HTTP 500 with an empty body.
    case http500
    /// HTTP 503 with an empty body and `Retry-After: 1`.
    case http503
    /// HTTP 429 with an empty body and `Retry-After: 1`.
    case http429
    /// Holds the request for the configured hold time, then answers HTTP 504, so a client's own timeout fires first.
    case timeout
    /// HTTP 307 to another URL of the same endpoint, as a moved endpoint or a misconfigured proxy would
    /// answer: a client that follows it sends the receipt and the shared secret wherever `Location` points.
    case redirect
    /// HTTP 200 whose body starts (`{"status":`) and then stalls for the hold time before it ends as 21005,
    /// as a front end whose back end froze mid-answer: a client must bound the whole call, not its head.
    case stall
    /// Like `stall`, but a space (JSON whitespace) every 100 ms meanwhile: never silent long enough for a
    /// read timeout, so only a deadline on the whole call ends it.
    case trickle
    /// HTTP 200 with an HTML page, as a proxy or captive portal would answer.
    case html
    /// HTTP 200 with an empty body.
    case empty
    /// HTTP 200 with a JSON body cut in half.
    case truncated
    /// HTTP 200 with JSON of the wrong shape: `status` a string, `receipt` an array.
    case malformed
    /// HTTP 200 with 20 MiB of JSON, more than any verifyReceipt client should read.
    case oversized
    /// HTTP 200 `{"status":21002}`: Apple's "malformed or temporary issue".
    case status21002
    /// HTTP 200 `{"status":21005}`: Apple's "receipt server unavailable".
    case status21005
    /// HTTP 200 `{"status":21010}`: Apple's "this receipt could not be authorized", for good (the account is
    /// gone), whatever it answered for the receipt before.
    case status21010
    /// HTTP 200 `{"status":21199,"is-retryable":true}`: Apple's "internal data access error".
    case status21199

    /// The accepted spellings, for error messages.
    static let acceptedValues = allCases.map(\.rawValue).joined(separator: ", ")
}
