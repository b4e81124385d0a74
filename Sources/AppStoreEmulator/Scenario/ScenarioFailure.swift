/// A scenario's `fail` object: the first `count` calls carrying this exact receipt fail with `mode`.
///
/// It lets a test script a transient outage for one receipt ("fail twice, then succeed") without touching
/// the global fault injection that other receipts share.
struct ScenarioFailure: Decodable, Equatable, Sendable {
    /// How many calls fail before the scenario answers normally.
    var count: Int
    /// How those calls fail; defaults to `http503`.
    var mode: FailMode

    private enum CodingKeys: String, CodingKey {
        case count, mode
    }

    init(count: Int, mode: FailMode = .http503) {
        self.count = count
        self.mode = mode
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let count = try container.decodeLenientIntIfPresent(forKey: .count) ?? 1
        guard count >= 0 else {
            throw DecodingError.dataCorruptedError(forKey: .count, in: container, debugDescription: "count must not be negative")
        }
        self.count = count
        mode = try container.decodeIfPresent(FailMode.self, forKey: .mode) ?? .http503
    }
}
