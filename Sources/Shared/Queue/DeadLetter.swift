/// One dead-lettered job (`GET /admin/v1/dead-letters`).
public struct DeadLetter: Sendable, Equatable, Codable {
    /// The job.
    public var jobId: String
    /// Why it failed.
    public var reason: String
    /// The last error in more detail (Apple's status, an HTTP status…); never receipt data.
    public var detail: String
    /// When it was dead-lettered (Unix ms).
    public var failedAt: Int

    /// Creates a dead letter.
    public init(jobId: String, reason: String, detail: String, failedAt: Int) {
        self.jobId = jobId
        self.reason = reason
        self.detail = detail
        self.failedAt = failedAt
    }
}

/// Dead letters oldest first, one page at a time (`GET /admin/v1/dead-letters`).
public struct DeadLetterPage: Sendable, Equatable, Encodable {
    /// The page's dead letters.
    public var deadLetters: [DeadLetter]
    /// Where the next page starts (`after`) when there is one; absent on the last page.
    public var next: String?

    /// Creates a page.
    public init(deadLetters: [DeadLetter], next: String?) {
        self.deadLetters = deadLetters
        self.next = next
    }

    /// Whether `text` can be a page's `next`: a dead-letter entry's id, `<ms>-<sequence>`, each a 64-bit
    /// unsigned number in decimal digits (what Redis reads as a stream id).
    public static func isCursor(_ text: Substring) -> Bool { Self.cursor(text) != nil }

    /// `text` as a page's `next` is written (`007-1` is `7-1`), or nil when it cannot be one: leading zeros would
    /// hide the last id from a comparison, and Redis refuses an id of more than 127 characters.
    static func cursor(_ text: Substring) -> String? {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let numbers = parts.compactMap { $0.utf8.allSatisfy { (0x30...0x39).contains($0) } ? UInt64($0) : nil }
        return numbers.count == 2 ? "\(numbers[0])-\(numbers[1])" : nil
    }

    /// The last stream id there is: nothing can follow it.
    static let lastCursor = "\(UInt64.max)-\(UInt64.max)"
}
