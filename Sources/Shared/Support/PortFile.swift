import Foundation
import Logging

/// Writes the port a server actually bound (useful with port 0), atomically, for scripts and tests.
public enum PortFile {
    /// Writes the port file, or logs at error level why it cannot (the server goes on: only whoever waits for
    /// the file is stuck, and the line says why).
    public static func publish(_ port: Int, to path: String, logger: Logger) {
        do { try Self.write(port, to: path) } catch {
            logger.error("cannot write the port file", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    /// Why the port file could not be written.
    public struct WriteError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Writes `port` followed by a newline to `path` via a temporary file and a rename; a failure leaves no
    /// temporary file behind.
    public static func write(_ port: Int, to path: String) throws {
        let temporary = path + ".tmp.\(getpid())"
        do {
            try Data("\(port)\n".utf8).write(to: URL(fileURLWithPath: temporary))
        } catch {
            throw WriteError(description: "cannot write \(temporary): \(error.localizedDescription)")
        }
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw WriteError(description: "cannot rename \(temporary) to \(path): \(String(cString: strerror(code)))")
        }
    }
}
