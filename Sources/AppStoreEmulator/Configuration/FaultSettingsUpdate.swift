/// The body of `POST /emulator/config`: every field is optional and only the given ones change.
struct FaultSettingsUpdate: Decodable, Sendable {
    /// New `latencyMs`, when given.
    var latencyMs: Int?
    /// New `failRate`, when given.
    var failRate: Double?
    /// New `failMode`, when given; kept as a string so an unknown mode is reported by name.
    var failMode: String?
    /// New `timeoutHoldMs`, when given.
    var timeoutHoldMs: Int?

    private enum CodingKeys: String, CodingKey, CaseIterable {
        case latencyMs, failRate, failMode, timeoutHoldMs
    }

    /// A key the update does not know: a typo (`failrate`) must not answer 200 and change nothing.
    struct UnknownField: Error {
        let name: String

        var controlError: ControlError {
            .invalidField(self.name, "unknown field \"\(self.name)\"; the fields are \(CodingKeys.allCases.map(\.stringValue).joined(separator: ", "))")
        }
    }

    private struct AnyKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init() {}

    init(from decoder: any Decoder) throws {
        if let unknown = try decoder.container(keyedBy: AnyKey.self).allKeys.first(where: { CodingKeys(stringValue: $0.stringValue) == nil }) {
            throw UnknownField(name: unknown.stringValue)
        }
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.latencyMs = try container.decodeIfPresent(Int.self, forKey: .latencyMs)
        self.failRate = try container.decodeIfPresent(Double.self, forKey: .failRate)
        self.failMode = try container.decodeIfPresent(String.self, forKey: .failMode)
        self.timeoutHoldMs = try container.decodeIfPresent(Int.self, forKey: .timeoutHoldMs)
    }

    /// Applies the update to `settings`, or names the first field whose value is unacceptable.
    ///
    /// Nothing changes when any field is refused, so a script never leaves the emulator half-configured.
    func applied(to settings: FaultSettings) -> Result<FaultSettings, ControlError> {
        var updated = settings
        for (field, value, keyPath) in [("latencyMs", self.latencyMs, \FaultSettings.latencyMs), ("timeoutHoldMs", self.timeoutHoldMs, \FaultSettings.timeoutHoldMs)] {
            guard let value else { continue }
            guard FaultSettings.isValidDuration(value) else {
                return .failure(.invalidField(field, "\(field) must be between 0 and 3600000"))
            }
            updated[keyPath: keyPath] = value
        }
        if let failRate {
            guard FaultSettings.isValidRate(failRate) else {
                return .failure(.invalidField("failRate", "failRate must be between 0 and 1"))
            }
            updated.failRate = failRate
        }
        if let failMode {
            guard let mode = FailMode(rawValue: failMode) else {
                return .failure(.invalidField("failMode", "failMode must be one of \(FailMode.acceptedValues)"))
            }
            updated.failMode = mode
        }
        return .success(updated)
    }
}
