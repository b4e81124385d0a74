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
/// A failed call fails every item in it; a failure of one item alone (its key of the wrong type, say) is
/// the script's to report in that item's reply. Redis does not undo what a failed script wrote, so
/// running items of a failed call again could answer an item "done" whose writes stopped halfway.
///
/// While Redis cannot be reached nothing piles up: a call that fails for that also fails every item
/// waiting then, and items beyond `maxWaitingBytes` of keys and arguments are refused at once.
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

        /// The bytes of its keys and arguments.
        var size: Int { self.keys.reduce(0) { $0 + $1.utf8.count } + self.arguments.reduce(0) { $0 + $1.utf8.count } }
    }

    private struct Waiting {
        let item: Item
        let size: Int
        let continuation: CheckedContinuation<RedisValue, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        var waitingBytes = 0
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
    private let maxWaitingBytes: Int
    private let state = Mutex(State())

    /// Creates a batcher for `script`, which receives `keys` then every item's keys as KEYS, and
    /// `arguments` then every item's arguments as ARGV, and answers an array with one reply per item.
    /// `maxItems` bounds how long one call holds Redis (each item is a few tens of microseconds);
    /// `maxWaitingBytes` the memory of the items waiting (64 MiB: thousands of real receipts).
    ///
    /// 24 items a call rather than 32: interleaved rounds under 64 connections did better with 24, though not
    /// clearly in a full ops/bench run (ops/bench-profile.md). Redis' cost per item hardly differs between
    /// calls of 16 and 32, and two calls of 32 can hold all 64 requests inside Redis at once.
    public convenience init(
        redis: RedisClient, script: RedisScript, keys: [String], arguments: [String], maxItems: Int = 24, maxCalls: Int = 2,
        maxWaitingBytes: Int = 64 << 20
    ) {
        self.init(name: script.name, keys: keys, arguments: arguments, maxItems: maxItems, maxCalls: maxCalls, maxWaitingBytes: maxWaitingBytes) {
            keys, arguments in try await redis.run(script, keys: keys, arguments: arguments)
        }
    }

    /// A batcher over any call: tests hold a call back to see what gathers behind it.
    init(name: String, keys: [String], arguments: [String], maxItems: Int, maxCalls: Int, maxWaitingBytes: Int = 64 << 20, call: @escaping Call) {
        self.name = name
        self.maxWaitingBytes = maxWaitingBytes
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
        do { replies = .success(try await self.execute([item])) } catch {
            replies = .failure(error)
            self.failWaiting(after: error)
        }
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
            let size = item.size
            let start = self.state.withLock { state -> Bool? in
                // Redis is slow or away and this much waits already: a 503 now, not one minutes later.
                guard state.waitingBytes + size <= self.maxWaitingBytes || state.waiting.isEmpty else { return nil }
                state.waiting.append(Waiting(item: item, size: size, continuation: continuation))
                state.waitingBytes += size
                guard state.running < self.maxCalls else { return false }
                state.running += 1
                return true
            }
            switch start {
            case nil: continuation.resume(throwing: RedisError(.connection, "too much waits for Redis (\(self.name))"))
            case true?: Task { await self.drain() }
            case false?: break
            }
        }
    }

    /// After a call failed because Redis is unavailable, fails every item waiting too: they would wait for
    /// a call to the same unreachable Redis, each of those up to its timeout, a call's worth at a time.
    /// They never went out, whatever the call's fate: their error says so.
    private func failWaiting(after error: any Error) {
        guard let error = error as? RedisError, error.isUnavailable else { return }
        let failed = self.state.withLock { state in
            let all = state.waiting
            state.waiting = []
            state.waitingBytes = 0
            return all
        }
        let unsent = error.notSent()
        for waiting in failed { waiting.continuation.resume(throwing: unsent) }
    }

    /// Calls the script until nothing waits.
    private func drain() async {
        while let batch = self.next() {
            do {
                let replies = try await self.execute(batch.map(\.item))
                for (waiting, reply) in zip(batch, replies) { waiting.continuation.resume(returning: reply) }
            } catch {
                for waiting in batch { waiting.continuation.resume(throwing: error) }
                self.failWaiting(after: error)
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
            state.waitingBytes -= batch.reduce(0) { $0 + $1.size }
            return batch
        }
    }
}
