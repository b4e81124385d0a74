import Synchronization

/// Runs a script written for a list of items once for many concurrent callers: each caller gives its
/// item's keys and arguments and gets back its own element of the script's array reply.
///
/// At most `maxCalls` calls are in flight. Items that arrive while they run wait, and leave together in
/// the next call as soon as one returns (up to `maxItems` per call). There is no timer: a lone caller
/// calls at once, from its own task, and under load the script's and the round trip's fixed costs are
/// shared by everything that arrived meanwhile. A call runs its items in order, atomically. Two calls
/// rather than one keep Redis busy while the API reads one reply and writes the next call.
///
/// A failed call (connection lost, timeout) fails every item in it. A script error in a call of several
/// items (one item's key of the wrong type, say) runs each item again alone, so that only the item that
/// fails gets the error: the script must make a retried item harmless.
public final class RedisBatcher: Sendable {
    /// One caller's part of a call.
    public struct Item: Sendable {
        let keys: [String]
        let arguments: [String]

        /// Creates an item from its keys and arguments, in the order the script reads them.
        public init(keys: [String], arguments: [String]) {
            self.keys = keys
            self.arguments = arguments
        }
    }

    private struct Waiting {
        let item: Item
        let continuation: CheckedContinuation<RedisValue, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        var running = 0
    }

    /// One call of the script with every item's keys and arguments.
    typealias Call = @Sendable (_ keys: [String], _ arguments: [String]) async throws -> RedisValue

    private let call: Call
    private let name: String
    private let keys: [String]
    private let arguments: [String]
    private let maxItems: Int
    private let maxCalls: Int
    private let state = Mutex(State())

    /// Creates a batcher for `script`, which receives `keys` then every item's keys as KEYS, and
    /// `arguments` then every item's arguments as ARGV, and answers an array with one reply per item.
    /// `maxItems` bounds how long one call holds Redis (each item is a few tens of microseconds).
    public convenience init(redis: RedisClient, script: RedisScript, keys: [String], arguments: [String], maxItems: Int = 32, maxCalls: Int = 2) {
        self.init(name: script.name, keys: keys, arguments: arguments, maxItems: maxItems, maxCalls: maxCalls) { keys, arguments in
            try await redis.run(script, keys: keys, arguments: arguments)
        }
    }

    /// A batcher over any call: tests hold a call back to see what gathers behind it.
    init(name: String, keys: [String], arguments: [String], maxItems: Int, maxCalls: Int, call: @escaping Call) {
        self.name = name
        self.call = call
        self.keys = keys
        self.arguments = arguments
        self.maxItems = max(1, maxItems)
        self.maxCalls = max(1, maxCalls)
    }

    /// How many items wait for a call.
    var waitingCount: Int { self.state.withLock { $0.waiting.count } }

    /// Runs `item` in the next call and returns its reply.
    public func run(_ item: Item) async throws -> RedisValue {
        let leads = self.state.withLock { state in
            guard state.running < self.maxCalls, state.waiting.isEmpty else { return false }
            state.running += 1
            return true
        }
        guard leads else { return try await self.wait(item) }
        // Nothing waits: call from this task, with no hop to another, and hand on what gathered meanwhile.
        let replies: Result<[RedisValue], any Error>
        do { replies = .success(try await self.execute([item])) } catch { replies = .failure(error) }
        let gathered = self.state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.running -= 1
                return false
            }
            return true
        }
        if gathered { Task { await self.drain() } }
        return try replies.get()[0]
    }

    /// Queues `item` behind the calls in flight; starts a drain when fewer than `maxCalls` run.
    private func wait(_ item: Item) async throws -> RedisValue {
        try await withCheckedThrowingContinuation { continuation in
            let start = self.state.withLock { state in
                state.waiting.append(Waiting(item: item, continuation: continuation))
                guard state.running < self.maxCalls else { return false }
                state.running += 1
                return true
            }
            if start { Task { await self.drain() } }
        }
    }

    /// Calls the script until nothing waits.
    private func drain() async {
        while let batch = self.next() {
            do {
                let replies = try await self.execute(batch.map(\.item))
                for (waiting, reply) in zip(batch, replies) { waiting.continuation.resume(returning: reply) }
            } catch let error as RedisError where batch.count > 1 && error.code == .server && !error.isUnavailable {
                for waiting in batch {
                    do {
                        waiting.continuation.resume(returning: try await self.execute([waiting.item])[0])
                    } catch {
                        waiting.continuation.resume(throwing: error)
                    }
                }
            } catch {
                for waiting in batch { waiting.continuation.resume(throwing: error) }
            }
        }
    }

    /// One call for `items`: their replies, in order.
    private func execute(_ items: [Item]) async throws -> [RedisValue] {
        var keys = self.keys
        var arguments = self.arguments
        for item in items {
            keys += item.keys
            arguments += item.arguments
        }
        let reply = try await self.call(keys, arguments)
        guard let replies = reply.array, replies.count == items.count else {
            throw RedisError(.protocolViolation, "\(self.name) returned \(reply.array?.count ?? 0) replies for \(items.count) items")
        }
        return replies
    }

    /// The next call's items, oldest first; nil (and no call running) when nothing waits.
    private func next() -> [Waiting]? {
        self.state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.running -= 1
                return nil
            }
            let count = min(self.maxItems, state.waiting.count)
            let batch = Array(state.waiting.prefix(count))
            state.waiting.removeFirst(count)
            return batch
        }
    }
}
