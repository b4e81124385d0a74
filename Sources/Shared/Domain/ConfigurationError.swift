import Foundation
import NIOCore

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

extension ConfigurationError {
    /// What a failure to listen says about the configuration: a host that does not resolve, or is no address
    /// of this machine, and a port the process may not bind (below 1024 without the privilege) are values to
    /// correct (exit 2). A port another process holds is not: it may come free (a restart whose predecessor
    /// still drains), so that stays an ordinary failure (exit 1), which a supervisor retries.
    public static func refusedListen(
        _ error: any Error, host: String, port: Int, hostVariable: String, portVariable: String
    ) -> ConfigurationError? {
        if error is SocketAddressError {
            return ConfigurationError(variable: hostVariable, "cannot listen on \(host): the name does not resolve")
        }
        guard let error = error as? IOError else { return nil }
        switch error.errnoCode {
        case EADDRNOTAVAIL:
            return ConfigurationError(variable: hostVariable, "cannot listen on \(host): not an address of this machine")
        case EACCES:
            return ConfigurationError(variable: portVariable, "cannot listen on port \(port): it needs a privilege this process does not have")
        default:
            return nil
        }
    }
}
