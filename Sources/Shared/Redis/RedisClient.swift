import Logging
import NIOCore
import NIOPosix
import Synchronization

/// An `async` Redis client: a small pool of pipelined, non-blocking connections on SwiftNIO event loops,
/// with replies parsed by hiredis' reader. No socket call ever blocks Swift's cooperative thread pool.
///
/// Connections open lazily and reopen after a failure; a command that was in flight when a connection
/// broke fails with a ``RedisError`` of code `.connection`, and the next command reconnects.
public final class RedisClient: Sendable {
    private let pipelines: [RedisPipeline]
    private let next = Atomic<Int>(0)

    /// The configuration the client connects with.
    public let configuration: RedisConfiguration

    /// Creates a client with `connections` pipelined connections, spread over the group's event loops.
    ///
    /// A command that blocks the server side (`XREADGROUP … BLOCK`) holds its whole connection: give
    /// such commands a client of their own.
    public init(
        configuration: RedisConfiguration,
        connections: Int = 4,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        let count = max(1, connections)
        self.configuration = configuration
        self.pipelines = (0..<count).map { _ in RedisPipeline(configuration: configuration, eventLoop: eventLoopGroup.next()) }
    }

    /// Sends one command, given as its argument vector (`["SET", key, value]`).
    @discardableResult
    public func send(_ command: [String]) async throws -> RedisValue {
        let index = self.next.wrappingAdd(1, ordering: .relaxed).oldValue
        return try await self.pipelines[index % self.pipelines.count].send(command)
    }

    /// Sends one command, given as its arguments.
    @discardableResult
    public func send(_ command: String...) async throws -> RedisValue {
        try await self.send(command)
    }

    /// Runs a script by SHA; loads it when Redis does not know it (first use, restart, `SCRIPT FLUSH`).
    @discardableResult
    public func run(_ script: RedisScript, keys: [String], arguments: [String]) async throws -> RedisValue {
        let command = ["EVALSHA", script.sha, String(keys.count)] + keys + arguments
        do {
            return try await self.send(command)
        } catch let error as RedisError where error.isNoScript {
            // The script has not run: a load cut in flight is no call that may have run.
            do { try await self.load(script) } catch let error as RedisError { throw error.notSent() }
            return try await self.send(command)
        }
    }

    /// Loads scripts ahead of their first use, so the first request pays no extra round trip.
    public func load(_ scripts: RedisScript...) async throws {
        for script in scripts {
            let reply = try await self.send("SCRIPT", "LOAD", script.source)
            guard reply.string == script.sha else {
                throw RedisError(.protocolViolation, "SCRIPT LOAD for \(script.name) returned an unexpected SHA")
            }
        }
    }

    /// Whether Redis answers `PING`.
    public func ping() async -> Bool {
        (try? await self.send("PING"))?.string == "PONG"
    }

    /// Fails queued commands, refuses new ones and closes the connections.
    public func shutdown() async {
        for pipeline in self.pipelines { await pipeline.close() }
    }
}
