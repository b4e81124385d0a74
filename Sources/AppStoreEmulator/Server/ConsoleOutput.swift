import Foundation

/// Unbuffered writes to stdout and stderr.
///
/// `print` is block-buffered when stdout is a pipe, and a script waiting for the "listening" line would
/// wait for a buffer that never fills.
enum ConsoleOutput {
    /// Writes `line` and a newline to stdout at once.
    static func standardOutput(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// Writes `line` and a newline to stderr at once.
    static func standardError(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
