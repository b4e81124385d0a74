import Foundation

/// Writes the port a server actually bound (useful with port 0), atomically, for scripts and tests.
public enum PortFile {
    /// Writes `port` followed by a newline to `path` via a temporary file and a rename.
    public static func write(_ port: Int, to path: String) throws {
        let temporary = path + ".tmp.\(getpid())"
        try Data("\(port)\n".utf8).write(to: URL(fileURLWithPath: temporary))
        guard rename(temporary, path) == 0 else {
            throw CocoaError(.fileWriteUnknown)
        }
    }
}
