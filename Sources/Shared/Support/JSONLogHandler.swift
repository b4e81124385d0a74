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
        var object: [String: Any] = [
            "ts": Self.timestamp(),
            "level": event.level.rawValue,
            "label": self.label,
            "msg": event.message.description,
        ]
        var merged = self.metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for (key, value) in merged { object[key] = Self.json(value) }
        guard var line = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        line.append(0x0a)
        Self.lock.withLock { _ in FileHandle.standardError.write(line) }
    }

    private static func json(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let text): text
        case .stringConvertible(let convertible): convertible.description
        case .array(let values): values.map(Self.json)
        case .dictionary(let values): values.mapValues(Self.json)
        }
    }

    private static func timestamp() -> String {
        let now = Date().timeIntervalSince1970
        let seconds = Int64(now)
        let millis = Int((now - Double(seconds)) * 1000)
        return PostgresTimestamp.format(unixSeconds: seconds).replacingOccurrences(of: " ", with: "T")
            + String(format: ".%03dZ", millis)
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
