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
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw ManagedProcess.Failure("socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(socket, pointer, length) == 0 && listen(socket, 64) == 0 && getsockname(socket, pointer, &length) == 0
            }
        }
        guard bound, fcntl(socket, F_SETFL, fcntl(socket, F_GETFL) | O_NONBLOCK) == 0 else {
            close(socket)
            throw ManagedProcess.Failure("cannot listen on 127.0.0.1: errno \(errno)")
        }
        self.socket = socket
        self.port = Int(UInt16(bigEndian: address.sin_port))
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
