import Logging

/// Everything the emulator process is configured with at start.
///
/// Values come from `APPSTORE_EMULATOR_*` environment variables; a flag given on the command line
/// overrides its variable. Parsing is a pure function of both, so the exit-code-2 path is testable
/// without starting a process.
struct EmulatorConfiguration: Equatable, Sendable {
    /// Interface to bind.
    var host: String = "127.0.0.1"
    /// Port to bind; 0 asks the system for a free one.
    var port: Int = 9090
    /// Where to write the bound port once listening, if anywhere.
    var portFile: String?
    /// The fault injection the process starts with.
    var faults: FaultSettings = .defaults
    /// Log level of the process.
    var logLevel: Logger.Level = .info

    /// Raw values given as flags; `nil` means "not given, use the environment".
    ///
    /// Flags are taken as strings on purpose: ArgumentParser's own conversion errors would exit with a
    /// different code and wording than the contract's one line naming the variable.
    struct Overrides: Equatable, Sendable {
        var host: String?
        var port: String?
        var portFile: String?
        var latencyMs: String?
        var failRate: String?
        var failMode: String?
        var timeoutHoldMs: String?
        var logLevel: String?
    }

    /// Builds the configuration from the process environment and the flags.
    ///
    /// - Throws: `ConfigurationError` for the first value that cannot be used.
    static func resolve(environment: [String: String], overrides: Overrides = Overrides()) throws(ConfigurationError) -> EmulatorConfiguration {
        var configuration = EmulatorConfiguration()

        func raw(_ variable: String, _ flag: String?) -> String? {
            flag ?? environment[variable]
        }

        if let host = raw("APPSTORE_EMULATOR_HOST", overrides.host) {
            guard !host.isEmpty, !host.contains(where: \.isWhitespace) else {
                throw ConfigurationError(variable: "APPSTORE_EMULATOR_HOST", flag: "--host", value: host, expected: "a host name or IP address")
            }
            configuration.host = host
        }
        if let port = raw("APPSTORE_EMULATOR_PORT", overrides.port) {
            guard let number = Int(port), (0...65_535).contains(number) else {
                throw ConfigurationError(variable: "APPSTORE_EMULATOR_PORT", flag: "--port", value: port, expected: "an integer from 0 to 65535")
            }
            configuration.port = number
        }
        if let portFile = raw("APPSTORE_EMULATOR_PORT_FILE", overrides.portFile) {
            guard !portFile.isEmpty else {
                throw ConfigurationError(variable: "APPSTORE_EMULATOR_PORT_FILE", flag: "--port-file", value: portFile, expected: "a file path")
            }
            configuration.portFile = portFile
        }
        /// A duration in milliseconds within FaultSettings' bounds, when set.
        func duration(_ variable: String, _ flag: String, _ override: String?) throws(ConfigurationError) -> Int? {
            guard let text = raw(variable, override) else { return nil }
            guard let number = Int(text), FaultSettings.isValidDuration(number) else {
                throw ConfigurationError(variable: variable, flag: flag, value: text, expected: "milliseconds from 0 to 3600000")
            }
            return number
        }
        if let latency = try duration("APPSTORE_EMULATOR_LATENCY_MS", "--latency-ms", overrides.latencyMs) {
            configuration.faults.latencyMs = latency
        }
        if let rate = raw("APPSTORE_EMULATOR_FAIL_RATE", overrides.failRate) {
            guard let number = Double(rate), FaultSettings.isValidRate(number) else {
                throw ConfigurationError(variable: "APPSTORE_EMULATOR_FAIL_RATE", flag: "--fail-rate", value: rate, expected: "a number from 0 to 1")
            }
            configuration.faults.failRate = number
        }
        if let mode = raw("APPSTORE_EMULATOR_FAIL_MODE", overrides.failMode) {
            guard let failMode = FailMode(rawValue: mode) else {
                throw ConfigurationError(variable: "APPSTORE_EMULATOR_FAIL_MODE", flag: "--fail-mode", value: mode, expected: "one of \(FailMode.acceptedValues)")
            }
            configuration.faults.failMode = failMode
        }
        if let hold = try duration("APPSTORE_EMULATOR_TIMEOUT_HOLD_MS", "--timeout-hold-ms", overrides.timeoutHoldMs) {
            configuration.faults.timeoutHoldMs = hold
        }
        if let level = raw("APPSTORE_EMULATOR_LOG_LEVEL", overrides.logLevel) {
            guard let logLevel = Logger.Level(rawValue: level.lowercased()) else {
                throw ConfigurationError(variable: "APPSTORE_EMULATOR_LOG_LEVEL", flag: "--log-level", value: level, expected: "one of trace, debug, info, notice, warning, error, critical")
            }
            configuration.logLevel = logLevel
        }
        return configuration
    }
}
