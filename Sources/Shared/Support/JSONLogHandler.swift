import Foundation
import Logging
import Synchronization

/// A swift-log handler that writes one JSON object per line to standard error:
/// `{"ts":"…","level":"info","label":"tollgate.worker","msg":"…", …metadata}`.
///
/// Callers put only identifiers in metadata (job ids, publisher ids, statuses), never receipt data,
/// tokens, passwords or shared secrets.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    private let label: String
    private static let lock = Mutex(())

    /// Creates a handler for a logger label.
    public init(label: String, level: Logger.Level) {
        self.label = label
        self.logLevel = level
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let line = self.line(level: event.level, message: event.message.description, metadata: event.metadata)
        Self.lock.withLock { _ in
            var line = line
            line.withUTF8 { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = write(2, bytes.baseAddress! + offset, bytes.count - offset)
                    if written <= 0 {
                        if written < 0, errno == EINTR { continue }
                        return
                    }
                    offset += written
                }
            }
        }
    }

    /// One log line, newline included.
    func line(level: Logger.Level, message: String, metadata: Logger.Metadata?) -> String {
        // Built by hand, not with JSONSerialization: this runs for every accepted receipt and every job,
        // and Foundation's bridging cost more than the request's own work.
        var line = "{\"ts\":\""
        line.reserveCapacity(256)
        Self.appendTimestamp(to: &line)
        line += "\",\"level\":\""
        line += level.rawValue
        line += "\",\"label\":"
        Self.appendString(self.label, to: &line)
        line += ",\"msg\":"
        Self.appendString(message, to: &line)
        // The handler's metadata and the event's (which wins), in key order, without merging dictionaries.
        var keys = Array(self.metadata.keys)
        if let metadata {
            for key in metadata.keys where self.metadata[key] == nil { keys.append(key) }
        }
        keys.sort()
        for key in keys {
            switch key {
            case "ts", "level", "label", "msg": continue
            default: break
            }
            guard let value = metadata?[key] ?? self.metadata[key] else { continue }
            line += ","
            Self.appendString(key, to: &line)
            line += ":"
            Self.append(value, to: &line)
        }
        line += "}\n"
        return line
    }

    static func append(_ value: Logger.Metadata.Value, to line: inout String) {
        switch value {
        case .string(let text):
            Self.appendString(text, to: &line)
        case .stringConvertible(let convertible):
            Self.appendString(convertible.description, to: &line)
        case .array(let values):
            line += "["
            for (index, element) in values.enumerated() {
                if index > 0 { line += "," }
                Self.append(element, to: &line)
            }
            line += "]"
        case .dictionary(let values):
            line += "{"
            for (index, key) in values.keys.sorted().enumerated() {
                if index > 0 { line += "," }
                Self.appendString(key, to: &line)
                line += ":"
                Self.append(values[key]!, to: &line)
            }
            line += "}"
        }
    }

    /// A JSON string literal (RFC 8259 escaping; `/` is left as is).
    static func appendString(_ text: String, to line: inout String) {
        line += "\""
        // Most strings need no escaping (no control character, quote, backslash, DEL, U+2028/9 = E2 80 A8/A9):
        // append them whole.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5c || $0 == 0x7f || $0 == 0xe2 }) {
            line += text
            line += "\""
            return
        }
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": line += "\\\""
            case "\\": line += "\\\\"
            case "\n": line += "\\n"
            case "\r": line += "\\r"
            case "\t": line += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f || scalar.value == 0x2028 || scalar.value == 0x2029:
                line += "\\u"
                let hex = String(scalar.value, radix: 16)
                line += String(repeating: "0", count: 4 - hex.count) + hex
            default: line.unicodeScalars.append(scalar)
            }
        }
        line += "\""
    }

    /// `2026-11-21T18:04:40.573Z`.
    static func appendTimestamp(to line: inout String) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) {
            let digits = String(value)
            if digits.count < width { line += String(repeating: "0", count: width - digits.count) }
            line += digits
        }
        pad(parts.tm_year + 1900, 4)
        line += "-"
        pad(parts.tm_mon + 1, 2)
        line += "-"
        pad(parts.tm_mday, 2)
        line += "T"
        pad(parts.tm_hour, 2)
        line += ":"
        pad(parts.tm_min, 2)
        line += ":"
        pad(parts.tm_sec, 2)
        line += "."
        pad(Int32(now.tv_nsec / 1_000_000), 3)
        line += "Z"
    }
}

/// Logging setup shared by every executable.
public enum LoggingSetup {
    /// Bootstraps swift-log once for the process with the configured format and level.
    public static func bootstrap(format: Configuration.LogFormat, level: Configuration.LogLevel) {
        let level = Logger.Level(rawValue: level.rawValue) ?? .info
        switch format {
        case .json:
            LoggingSystem.bootstrap { JSONLogHandler(label: $0, level: level) }
        case .text:
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        }
    }
}
