import Foundation

/// A configuration value that cannot be used; processes print it as one line and exit with code 2.
public struct ConfigurationError: Error, Equatable, CustomStringConvertible {
    /// The environment variable (or flag) at fault.
    public let variable: String
    /// What is wrong with it. Never contains the value when the variable may hold a secret.
    public let problem: String

    /// Creates an error naming `variable`.
    public init(variable: String, _ problem: String) {
        self.variable = variable
        self.problem = problem
    }

    public var description: String { "invalid \(self.variable): \(self.problem)" }

    /// Writes the contract's one line for it, `<program>: invalid VARIABLE: problem`, to standard error,
    /// after any log lines still held: the line that says why the process stops is the last.
    public func report(as program: String) {
        LogOutput.standardError.flush()
        FileHandle.standardError.write(Data("\(program): \(self)\n".utf8))
    }
}
