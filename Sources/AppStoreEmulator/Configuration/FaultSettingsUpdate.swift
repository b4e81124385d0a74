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

    fileprivate enum CodingKeys: String, CodingKey, CaseIterable {
        case latencyMs, failRate, failMode, timeoutHoldMs
    }

    /// A key the update does not know: a typo (`failrate`) must not answer 200 and change nothing.
    struct UnknownField: Error {
        let name: String

        var controlError: ControlError {
            .invalidField(self.name, "unknown field \"\(self.name)\"; the fields are \(CodingKeys.allCases.map(\.stringValue).joined(separator: ", "))")
        }
    }

    /// A field whose value is not of its type, or does not fit it (`"latencyMs": 1e30`, `"timeoutHoldMs": 1.5`).
    struct IllTypedField: Error {
        fileprivate let key: CodingKeys

        var controlError: ControlError {
            let expected = switch self.key {
            case .failRate: "a number between 0 and 1"
            case .failMode: "one of \(FailMode.acceptedValues)"
            case .latencyMs, .timeoutHoldMs: "a whole number between 0 and 3600000"
            }
            return .invalidField(self.key.stringValue, "\(self.key.stringValue) must be \(expected)")
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
        // Field by field, so a value that does not decode names its field (Foundation's error may not).
        func field<T: Decodable>(_ key: CodingKeys) throws -> T? {
            do { return try container.decodeIfPresent(T.self, forKey: key) } catch { throw IllTypedField(key: key) }
        }
        self.latencyMs = try field(.latencyMs)
        self.failRate = try field(.failRate)
        self.failMode = try field(.failMode)
        self.timeoutHoldMs = try field(.timeoutHoldMs)
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
