import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Publishes the bound port in a file, for scripts that start the emulator with port 0.
enum PortFileWriter {
    /// A failure to publish the port.
    struct WriteError: Error, CustomStringConvertible {
        var description: String
    }

    /// Writes `port` and a newline to `path` atomically: a temporary file in the same directory, then
    /// `rename(2)`, so a script polling the file never reads a partial number.
    static func write(port: Int, to path: String) throws {
        let temporaryPath = "\(path).tmp.\(ProcessInfo.processInfo.processIdentifier)"
        try Data("\(port)\n".utf8).write(to: URL(fileURLWithPath: temporaryPath))
        guard rename(temporaryPath, path) == 0 else {
            let code = errno
            try? FileManager.default.removeItem(atPath: temporaryPath)
            throw WriteError(description: "cannot rename \(temporaryPath) to \(path): errno \(code)")
        }
    }

    /// Whether the file's directory exists and is writable, and the path is not a directory itself,
    /// checked at start so a bad path is a configuration error (exit code 2) instead of a script waiting
    /// forever for the file.
    static func canWrite(to path: String) -> Bool {
        var isDirectory: ObjCBool = false
        guard !path.hasSuffix("/"), !(FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue) else {
            return false
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        return FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory)
            && isDirectory.boolValue
            && FileManager.default.isWritableFile(atPath: directory)
    }
}
