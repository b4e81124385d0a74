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
