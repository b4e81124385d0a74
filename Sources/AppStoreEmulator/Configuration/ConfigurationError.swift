/// A configuration value the emulator refuses at start.
///
/// The process prints `line` to stderr and exits with `exitCode`, as every Tollgate process does for a
/// bad value: one line, naming the variable, so an operator sees at once what to fix.
struct ConfigurationError: Error, Equatable, Sendable {
    /// The environment variable at fault (its flag may have supplied the value).
    var variable: String
    /// The flag that overrides `variable`.
    var flag: String
    /// The refused value.
    var value: String
    /// What was expected instead.
    var expected: String

    /// The exit code for any configuration error, fixed by the project's contract.
    static let exitCode: Int32 = 2

    /// The single line printed to stderr.
    var line: String {
        "appstore-emulator: invalid \(variable) (\(flag)) value '\(value)': expected \(expected)"
    }
}
