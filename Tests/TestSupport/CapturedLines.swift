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
        self.messages.entries.withLock { $0.append((event.message.description, event.metadata ?? [:])) }
    }

    /// The metadata of every message so far, in order (what the call gave, not the handler's own).
    public var metadataOfLines: [Logger.Metadata] { self.messages.entries.withLock { $0.map(\.metadata) } }

    /// The metadata of each message that was exactly `message`, in order.
    public func metadata(of message: String) -> [Logger.Metadata] {
        self.messages.entries.withLock { $0.filter { $0.message == message }.map(\.metadata) }
    }

    /// How many messages were exactly `message`.
    public func count(_ message: String) -> Int { self.messages.entries.withLock { $0.filter { $0.message == message }.count } }

    /// Every message so far, in order.
    public var lines: [String] { self.messages.entries.withLock { $0.map(\.message) } }

    private final class SharedMessages: Sendable {
        /// Each message with its metadata, under one lock, so a reader never pairs a message with another's metadata.
        let entries = Mutex<[(message: String, metadata: Logger.Metadata)]>([])
    }
}
