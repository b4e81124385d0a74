import NIOPosix
import Synchronization

/// One Redis connection shared by many concurrent callers through automatic pipelining.
///
/// Callers enqueue commands; a single drain job on the client's thread pool writes everything queued so
/// far in one batch and reads the replies in order. Under load, many commands share one round trip; when
/// idle, a command costs one round trip. The hiredis handle is only touched by the drain job, which runs
/// on a pool thread, never on Swift's cooperative pool.
final class RedisPipeline: Sendable {
    private struct Pending {
        let command: [String]
        let continuation: CheckedContinuation<RedisValue, any Error>
    }

    private struct State {
        var queue: [Pending] = []
        var draining = false
        var closed = false
    }

    /// Holds the connection. It is only accessed by the drain job, and `State.draining` guarantees that at
    /// most one drain job runs at a time, so the handle is never used from two threads at once.
    private final class ConnectionBox: @unchecked Sendable {
        var connection: RedisConnection?
    }

    private let state = Mutex(State())
    private let box = ConnectionBox()
    private let configuration: RedisConfiguration
    private let threadPool: NIOThreadPool
    private let maxBatch = 512

    init(configuration: RedisConfiguration, threadPool: NIOThreadPool) {
        self.configuration = configuration
        self.threadPool = threadPool
    }

    /// Sends one command and waits for its reply.
    func send(_ command: [String]) async throws -> RedisValue {
        try await withCheckedThrowingContinuation { continuation in
            let startDrain = self.state.withLock { state -> Bool? in
                if state.closed { return nil }
                state.queue.append(Pending(command: command, continuation: continuation))
                if state.draining { return false }
                state.draining = true
                return true
            }
            switch startDrain {
            case nil: continuation.resume(throwing: RedisError(.closed, "the Redis client is shut down"))
            case true?: self.threadPool.submit { _ in self.drain() }
            case false?: break
            }
        }
    }

    /// Fails every queued command and refuses new ones.
    func close() {
        let queued = self.state.withLock { state -> [Pending] in
            state.closed = true
            // A running drain job fails what is queued itself.
            if state.draining { return [] }
            defer { state.queue.removeAll() }
            return state.queue
        }
        for pending in queued {
            pending.continuation.resume(throwing: RedisError(.closed, "the Redis client is shut down"))
        }
    }

    private func drain() {
        while true {
            let batch = self.state.withLock { state -> [Pending] in
                if state.queue.isEmpty || state.closed {
                    state.draining = false
                    return []
                }
                let count = min(state.queue.count, self.maxBatch)
                let batch = Array(state.queue.prefix(count))
                state.queue.removeFirst(count)
                return batch
            }
            if batch.isEmpty {
                self.failLeftovers()
                return
            }
            self.run(batch)
        }
    }

    private func failLeftovers() {
        let leftovers = self.state.withLock { state -> [Pending] in
            guard state.closed else { return [] }
            defer { state.queue.removeAll() }
            return state.queue
        }
        for pending in leftovers {
            pending.continuation.resume(throwing: RedisError(.closed, "the Redis client is shut down"))
        }
    }

    private func run(_ batch: [Pending]) {
        let connection: RedisConnection
        if let existing = self.box.connection {
            connection = existing
        } else {
            do {
                connection = try RedisConnection(configuration: self.configuration)
                self.box.connection = connection
            } catch {
                for pending in batch { pending.continuation.resume(throwing: error) }
                return
            }
        }
        switch connection.execute(batch.map(\.command)) {
        case .failure(let error):
            // The socket broke: the next batch opens a new connection.
            self.box.connection = nil
            for pending in batch { pending.continuation.resume(throwing: error) }
        case .success(let replies):
            for (pending, reply) in zip(batch, replies) { pending.continuation.resume(with: reply) }
        }
    }
}
