import Logging
import Synchronization

/// A log handler that keeps every message, for tests that check what a component says and how often.
public struct CapturedLines: LogHandler {
    private let messages = SharedMessages()
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]

    public init() {}

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        self.messages.lines.withLock { $0.append(event.message.description) }
        self.messages.metadata.withLock { $0.append(event.metadata ?? [:]) }
    }

    /// The metadata of every message so far, in order (what the call gave, not the handler's own).
    public var metadataOfLines: [Logger.Metadata] { self.messages.metadata.withLock { $0 } }

    /// How many messages were exactly `message`.
    public func count(_ message: String) -> Int { self.messages.lines.withLock { $0.filter { $0 == message }.count } }

    /// Every message so far, in order.
    public var lines: [String] { self.messages.lines.withLock { $0 } }

    private final class SharedMessages: Sendable {
        let lines = Mutex<[String]>([])
        let metadata = Mutex<[Logger.Metadata]>([])
    }
}
