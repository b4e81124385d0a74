import Foundation
import Logging
import Synchronization

/// A swift-log handler that writes one line per event to standard error, in either format:
///
/// - `json`: one JSON object, `{"ts":"…","level":"info","label":"tollgate.worker","msg":"…", …metadata}`;
/// - `text`, for people: `2026-11-21T18:04:40.573Z info tollgate.worker: message key=value …`.
///
/// Callers put only identifiers in metadata (job ids, publisher ids, statuses), never receipt data,
/// tokens, passwords or shared secrets.
///
/// Lines of both formats go through ``LogOutput``, so the thread that logs never writes: info and below
/// within 20 ms, a warning or error wakes its writer thread at once (and goes out after everything
/// before it).
public struct LineLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    private let label: String
    private let format: Configuration.LogFormat
    private let output: LogOutput

    /// Creates a handler for a logger label.
    public init(label: String, level: Logger.Level, format: Configuration.LogFormat = .json) {
        self.init(label: label, level: level, format: format, output: .standardError)
    }

    init(label: String, level: Logger.Level, format: Configuration.LogFormat, output: LogOutput) {
        self.label = label
        self.logLevel = level
        self.format = format
        self.output = output
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        self.output.write(
            self.line(level: event.level, message: event.message.description, metadata: event.metadata),
            immediately: event.level >= .warning
        )
    }

    /// One log line in the handler's format, newline included: the same parts in the same order in both
    /// formats, which differ only in what separates them and how text is written.
    func line(level: Logger.Level, message: String, metadata: Logger.Metadata?) -> [UInt8] {
        // Built by hand, not with JSONSerialization or string interpolation: this runs for every accepted
        // receipt and every job, and Foundation's bridging cost more than the request's own work.
        let shape = self.format == .json ? LineShape.json : LineShape.text
        var line = JSONText(capacity: 256)
        line.append(shape.start)
        Self.appendTimestamp(to: &line)
        line.append(shape.afterTimestamp)
        line.append(level.rawValue)
        line.append(shape.afterLevel)
        shape.appendText(self.label, to: &line)
        line.append(shape.afterLabel)
        shape.appendText(message, to: &line)
        self.forEachMetadata(metadata) { key, value in
            line.append(shape.beforeKey)
            shape.appendText(key, to: &line)
            line.append(shape.afterKey)
            switch value {
            case .string(let text): shape.appendText(text, to: &line)
            case .stringConvertible(let convertible): shape.appendText(convertible.description, to: &line)
            case .array, .dictionary: Self.append(value, to: &line)
            }
        }
        line.append(shape.end)
        return line.bytes
    }

    /// What surrounds a line's parts in one format. JSON quotes and escapes its text; a text line escapes
    /// only what could break the line (arrays and dictionaries are written as JSON in both).
    private struct LineShape {
        let start, afterTimestamp, afterLevel, afterLabel, beforeKey, afterKey, end: String
        let quoted: Bool

        static let json = LineShape(
            start: "{\"ts\":\"", afterTimestamp: "\",\"level\":\"", afterLevel: "\",\"label\":", afterLabel: ",\"msg\":",
            beforeKey: ",", afterKey: ":", end: "}\n", quoted: true
        )
        static let text = LineShape(
            start: "", afterTimestamp: " ", afterLevel: " ", afterLabel: ": ", beforeKey: " ", afterKey: "=", end: "\n", quoted: false
        )

        func appendText(_ text: String, to line: inout JSONText) {
            if self.quoted { line.appendString(text) } else { line.appendText(text) }
        }
    }

    /// The handler's metadata and the event's (which wins), in key order, without merging dictionaries;
    /// the keys a JSON line starts with are left out.
    private func forEachMetadata(_ metadata: Logger.Metadata?, _ body: (String, Logger.Metadata.Value) -> Void) {
        guard !self.metadata.isEmpty || !(metadata?.isEmpty ?? true) else { return }
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
            body(key, value)
        }
    }

    static func append(_ value: Logger.Metadata.Value, to line: inout JSONText) {
        switch value {
        case .string(let text):
            line.appendString(text)
        case .stringConvertible(let convertible):
            line.appendString(convertible.description)
        case .array(let values):
            line.append("[")
            for (index, element) in values.enumerated() {
                if index > 0 { line.append(",") }
                Self.append(element, to: &line)
            }
            line.append("]")
        case .dictionary(let values):
            line.append("{")
            for (index, key) in values.keys.sorted().enumerated() {
                if index > 0 { line.append(",") }
                line.appendString(key)
                line.append(":")
                Self.append(values[key]!, to: &line)
            }
            line.append("}")
        }
    }

    /// `2026-11-21T18:04:40.573Z`.
    static func appendTimestamp(to line: inout JSONText) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        line.appendDigits(Int(parts.tm_year) + 1900, width: 4)
        line.append("-")
        line.appendDigits(Int(parts.tm_mon) + 1, width: 2)
        line.append("-")
        line.appendDigits(Int(parts.tm_mday), width: 2)
        line.append("T")
        line.appendDigits(Int(parts.tm_hour), width: 2)
        line.append(":")
        line.appendDigits(Int(parts.tm_min), width: 2)
        line.append(":")
        line.appendDigits(Int(parts.tm_sec), width: 2)
        line.append(".")
        line.appendDigits(now.tv_nsec / 1_000_000, width: 3)
        line.append("Z")
    }
}

/// JSON text built as UTF-8 bytes: log lines, hand-written answers and job payloads.
public struct JSONText: Sendable {
    /// The text so far.
    public private(set) var bytes: [UInt8] = []

    /// Creates empty text with room for `capacity` bytes.
    public init(capacity: Int) {
        self.bytes.reserveCapacity(capacity)
    }

    /// Appends text as is (punctuation, numbers, already-escaped JSON).
    public mutating func append(_ text: String) {
        self.bytes.append(contentsOf: text.utf8)
    }

    /// Appends a non-negative number in decimal, zero-padded to `width` digits.
    mutating func appendDigits(_ value: Int, width: Int) {
        let digits = String(value)
        for _ in digits.utf8.count..<max(width, digits.utf8.count) { self.bytes.append(UInt8(ascii: "0")) }
        self.bytes.append(contentsOf: digits.utf8)
    }

    /// Appends a JSON string literal (RFC 8259 escaping; `/` is left as is; DEL, U+2028 and U+2029 are
    /// escaped too, so a line is safe to embed in HTML and JavaScript).
    public mutating func appendString(_ text: String) {
        self.bytes.append(UInt8(ascii: "\""))
        self.appendEscaped(text, quoted: true)
        self.bytes.append(UInt8(ascii: "\""))
    }

    /// Appends text for a plain-text line: as is, except that control characters, DEL, U+2028 and
    /// U+2029 are escaped as JSON would, so a message can never break its line or forge another.
    mutating func appendText(_ text: String) {
        self.appendEscaped(text, quoted: false)
    }

    /// `text` escaped as inside a JSON string; `"` and `\` too when `quoted`.
    private mutating func appendEscaped(_ text: String, quoted: Bool) {
        var text = text
        text.withUTF8 { utf8 in
            var clean = 0
            var index = 0
            while index < utf8.count {
                let byte = utf8[index]
                let escape: StaticString?
                switch byte {
                case UInt8(ascii: "\"") where quoted: escape = "\\\""
                case UInt8(ascii: "\\") where quoted: escape = "\\\\"
                case UInt8(ascii: "\n"): escape = "\\n"
                case UInt8(ascii: "\r"): escape = "\\r"
                case UInt8(ascii: "\t"): escape = "\\t"
                case 0..<0x20, 0x7f: escape = nil
                case 0xe2 where index + 2 < utf8.count && utf8[index + 1] == 0x80 && (utf8[index + 2] == 0xa8 || utf8[index + 2] == 0xa9):
                    escape = nil
                default:
                    index += 1
                    continue
                }
                self.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[clean..<index]))
                if let escape {
                    self.bytes.append(contentsOf: UnsafeBufferPointer(start: escape.utf8Start, count: escape.utf8CodeUnitCount))
                    index += 1
                } else if byte == 0xe2 {
                    self.bytes.append(contentsOf: utf8[index + 2] == 0xa8 ? Array("\\u2028".utf8) : Array("\\u2029".utf8))
                    index += 3
                } else {
                    self.bytes.append(contentsOf: "\\u00".utf8)
                    self.bytes.append(Hex.digits[Int(byte >> 4)])
                    self.bytes.append(Hex.digits[Int(byte & 0x0f)])
                    index += 1
                }
                clean = index
            }
            self.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[clean..<utf8.count]))
        }
    }
}

/// Logging setup shared by every executable.
public enum LoggingSetup {
    /// Whether the process logs plain text (`TOLLGATE_LOG_FORMAT=text`), for the lines ``LogOutput`` writes itself.
    private static let text = Atomic<Bool>(false)

    /// The format the process logs in: JSON until ``bootstrap(format:level:)`` says otherwise.
    static var format: Configuration.LogFormat {
        Self.text.load(ordering: .relaxed) ? .text : .json
    }

    /// Bootstraps swift-log once for the process with the configured format and level.
    ///
    /// It also ignores SIGPIPE for the process, before anything is written: a log reader that went away, or a Redis
    /// connection reset under hiredis (which writes without `MSG_NOSIGNAL`), must fail that write with EPIPE, not
    /// end the process. SwiftNIO does the same once it opens its first socket; this does not wait for that.
    public static func bootstrap(format: Configuration.LogFormat, level: Configuration.LogLevel) {
        signal(SIGPIPE, SIG_IGN)
        let level = Logger.Level(rawValue: level.rawValue) ?? .info
        Self.text.store(format == .text, ordering: .relaxed)
        LoggingSystem.bootstrap { LineLogHandler(label: $0, level: level, format: format) }
    }
}
