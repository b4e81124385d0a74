import Foundation
import Shared

/// A TCP listener on 127.0.0.1 that takes connections and never answers: a dependency that hangs rather
/// than refuses (a stalled Redis, a black-holed route).
public final class SilentListener: @unchecked Sendable {
    // @unchecked Sendable: the descriptors are touched only through `lock`.
    private let lock = NSLock()
    private let socket: Int32
    private var accepted: [Int32] = []
    private var received = 0
    /// The port it listens on.
    public let port: Int

    /// Runs `body` with a listener that stays open, holding every connection it took, until `body`
    /// returns (a local one could be closed right after its last use).
    public static func with<T>(_ body: (SilentListener) async throws -> T) async throws -> T {
        let listener = try SilentListener()
        defer { withExtendedLifetime(listener) {} }
        return try await body(listener)
    }

    /// Listens on a free port.
    public init() throws {
        let listener = try LoopbackListener()
        guard fcntl(listener.descriptor, F_SETFL, fcntl(listener.descriptor, F_GETFL) | O_NONBLOCK) == 0 else {
            close(listener.descriptor)
            throw ManagedProcess.Failure("cannot make the listener non-blocking: errno \(errno)")
        }
        self.socket = listener.descriptor
        self.port = listener.port
    }

    /// A Redis configuration pointing at it, whose every wait (connect, reply) ends after `timeoutMilliseconds`.
    public func redisConfiguration(timeoutMilliseconds: Int) throws -> RedisConfiguration {
        var configuration = try RedisConfiguration(url: "redis://127.0.0.1:\(self.port)/0")
        configuration.timeoutMilliseconds = timeoutMilliseconds
        return configuration
    }

    /// Takes the connections waiting and keeps them open; returns how many bytes all of them have sent
    /// so far (read and dropped): more than 0 once a client has sent a command and waits for its reply.
    public func bytesReceived() -> Int {
        self.lock.withLock {
            while case let connection = accept(self.socket, nil, nil), connection >= 0 {
                _ = fcntl(connection, F_SETFL, fcntl(connection, F_GETFL) | O_NONBLOCK)
                self.accepted.append(connection)
            }
            var buffer = [UInt8](repeating: 0, count: 4096)
            for connection in self.accepted {
                while case let count = read(connection, &buffer, buffer.count), count > 0 { self.received += count }
            }
            return self.received
        }
    }

    deinit {
        for connection in self.accepted { close(connection) }
        close(self.socket)
    }
}
