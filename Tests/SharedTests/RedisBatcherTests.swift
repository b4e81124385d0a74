import Synchronization
import Testing
import TestSupport
@testable import Shared

@Suite("RedisBatcher against a real Redis")
struct RedisBatcherTests {
    /// Counts its calls in KEYS[1] and answers {call number, item} per item; an item `boom` fails the call.
    static let echo = RedisScript(name: "echo", source: """
        local call = redis.call('INCR', KEYS[1])
        local replies = {}
        for i = 1, #ARGV do
          if ARGV[i] == 'boom' then return redis.error_reply('boom in call ' .. call) end
          replies[i] = {call, ARGV[i]}
        end
        return replies
        """)

    /// Holds the batcher's first call back until the test opens it, so items gather behind it.
    final class FirstCallGate: Sendable {
        private let stream: AsyncStream<Void>
        private let opener: AsyncStream<Void>.Continuation
        /// The item count of every call, in order.
        let sizes = Mutex<[Int]>([])

        init() { (self.stream, self.opener) = AsyncStream<Void>.makeStream() }

        func call(_ client: RedisClient, _ keys: [String], _ arguments: [String]) async throws -> RedisValue {
            let first = self.sizes.withLock { sizes in
                sizes.append(arguments.count)
                return sizes.count == 1
            }
            if first { for await _ in self.stream { break } }
            return try await client.run(RedisBatcherTests.echo, keys: keys, arguments: arguments)
        }

        func open() { self.opener.finish() }
        var calls: Int { self.sizes.withLock { $0.count } }
    }

    /// Each item's result, as its task finishes.
    final class Results: Sendable {
        let values = Mutex<[String: Result<RedisValue, any Error>]>([:])

        /// Runs the item `value` on `batcher` in a task of its own, and keeps its result. Unstructured tasks
        /// and a deadline: an item the batcher never answers fails the test instead of hanging it.
        func run(_ value: String, on batcher: RedisBatcher) {
            Task {
                let result: Result<RedisValue, any Error>
                do { result = .success(try await batcher.run(RedisBatcherTests.item(value))) } catch { result = .failure(error) }
                self.values.withLock { $0[value] = result }
            }
        }
    }

    static func item(_ value: String) -> RedisBatcher.Item { RedisBatcher.Item(keys: [], arguments: [value]) }

    /// Runs `first` alone, holds its call back until every one of `rest` waits behind it, lets it go and
    /// hands `body` each item's result and every call's size (one call in flight at a time).
    static func gathered(
        first: String, rest: [String], maxItems: Int,
        _ body: (RedisBatcher, [String: Result<RedisValue, any Error>], [Int]) async throws -> Void
    ) async throws {
        try await RedisClientTests.withClient { client, prefix in
            let gate = FirstCallGate()
            let batcher = RedisBatcher(name: "echo", keys: ["\(prefix):calls"], arguments: [], maxItems: maxItems, maxCalls: 1) { keys, arguments in
                try await gate.call(client, keys, arguments)
            }
            let results = Results()
            func add(_ value: String) { results.run(value, on: batcher) }
            add(first)
            _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "the first call") { gate.calls == 1 ? true : nil }
            for value in rest { add(value) }
            _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "\(rest.count) items waiting") {
                batcher.waitingCount == rest.count ? true : nil
            }
            #expect(gate.calls == 1, "nothing else leaves while the only allowed call is in flight")
            gate.open()
            let all = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "every item's result") {
                results.values.withLock { $0.count == rest.count + 1 ? $0 : nil }
            }
            try await body(batcher, all, gate.sizes.withLock { $0 })
        }
    }

    @Test("items that arrive during a call leave together in the next ones, at most maxItems each, and each gets its own reply")
    func gathersBehindACall() async throws {
        let rest = (1..<10).map { "item-\($0)" }
        try await Self.gathered(first: "item-0", rest: rest, maxItems: 4) { _, results, sizes in
            #expect(sizes == [1, 4, 4, 1])
            var callOfItem: [String: Int] = [:]
            for (value, result) in results {
                let parts = try #require(try result.get().array)
                #expect(parts.count == 2)
                #expect(parts[1].string == value, "every caller gets its own item's reply")
                callOfItem[value] = parts[0].int
            }
            #expect(callOfItem["item-0"] == 1)
            #expect(callOfItem.values.sorted() == [1, 2, 2, 2, 2, 3, 3, 3, 3, 4])
        }
    }

    @Test("a script error fails every item of its call, and only those: none is run again, the next call runs")
    func failedCall() async throws {
        try await Self.gathered(first: "first", rest: ["a", "boom", "b"], maxItems: 3) { batcher, results, sizes in
            // Redis keeps what a failed script wrote before its error: running its items again could answer
            // "done" for one whose writes stopped halfway.
            #expect(sizes == [1, 3])
            #expect(try results["first"]?.get().array?[1].string == "first")
            for value in ["a", "boom", "b"] {
                let error = #expect(throws: RedisError.self) { try results[value]?.get() }
                #expect(error?.message.contains("boom in call 2") == true)
            }
            let after = try await batcher.run(Self.item("after"))
            #expect(after.array?[0].int == 3, "the next call runs: the third")
        }
    }

    @Test("a call that fails for Redis being away fails every item waiting then, not a call's worth at a time per timeout")
    func unavailableFailsWaiting() async throws {
        // A Redis that is not there: nothing listens on port 1 of the loopback.
        let away = RedisClient(configuration: try RedisConfiguration(url: "redis://127.0.0.1:1/0"), connections: 1)
        try await TestEnvironment.using(away) {
            let gate = AsyncStream<Void>.makeStream()
            let calls = Mutex(0)
            let batcher = RedisBatcher(name: "away", keys: [], arguments: [], maxItems: 2, maxCalls: 1) { _, _ in
                if calls.withLock({ $0 += 1; return $0 }) == 1 { for await _ in gate.stream { break } }
                return try await away.send("PING")
            }
            let results = Results()
            func add(_ value: String) { results.run(value, on: batcher) }
            add("first")
            _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "the first call") { calls.withLock { $0 } == 1 ? true : nil }
            for index in 0..<10 { add("item-\(index)") }
            _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "10 items waiting") { batcher.waitingCount == 10 ? true : nil }
            gate.continuation.finish()
            let all = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "every item's result") {
                results.values.withLock { $0.count == 11 ? $0 : nil }
            }
            for result in all.values {
                let error = #expect(throws: RedisError.self) { try result.get() }
                #expect(error?.isUnavailable == true)
            }
            #expect(calls.withLock { $0 } == 1, "the waiting items were failed with the first call, not sent to Redis two by two")
            #expect(batcher.waitingCount == 0)
        }
    }

    @Test("a call cut in flight fails its own item as one that may have run, and the items waiting behind it as ones never sent")
    func cutCallLeavesWaitingUnsent() async throws {
        let gate = AsyncStream<Void>.makeStream()
        let calls = Mutex(0)
        let batcher = RedisBatcher(name: "cut", keys: [], arguments: [], maxItems: 2, maxCalls: 1) { _, _ in
            if calls.withLock({ $0 += 1; return $0 }) == 1 { for await _ in gate.stream { break } }
            throw RedisError(.connection, "connection lost").inFlight()
        }
        let results = Results()
        results.run("first", on: batcher)
        _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "the first call") { calls.withLock { $0 } == 1 ? true : nil }
        for index in 0..<5 { results.run("item-\(index)", on: batcher) }
        _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "5 items waiting") { batcher.waitingCount == 5 ? true : nil }
        gate.continuation.finish()
        let all = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "every item's result") {
            results.values.withLock { $0.count == 6 ? $0 : nil }
        }
        for (value, result) in all {
            let error = #expect(throws: RedisError.self) { try result.get() }
            #expect(error?.code == .connection)
            #expect(error?.mayHaveRun == (value == "first"), "\(value)")
        }
        #expect(calls.withLock { $0 } == 1)
    }

    @Test("past maxWaitingBytes an item is refused at once as Redis unavailable; the items waiting still run")
    func waitingBounded() async throws {
        try await RedisClientTests.withClient { client, prefix in
            let gate = FirstCallGate()
            // Each item here is 8 bytes ("item-NNN"): room for three.
            let batcher = RedisBatcher(name: "echo", keys: ["\(prefix):calls"], arguments: [], maxItems: 32, maxCalls: 1, maxWaitingBytes: 24) {
                keys, arguments in try await gate.call(client, keys, arguments)
            }
            let results = Results()
            func add(_ value: String) { results.run(value, on: batcher) }
            add("item-000")
            _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "the first call") { gate.calls == 1 ? true : nil }
            for index in 1...3 { add("item-00\(index)") }
            _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "3 items waiting") { batcher.waitingCount == 3 ? true : nil }
            let refused = await #expect(throws: RedisError.self) { try await batcher.run(Self.item("item-004")) }
            #expect(refused?.isUnavailable == true)
            gate.open()
            let all = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(10), "the four results") {
                results.values.withLock { $0.count == 4 ? $0 : nil }
            }
            for (value, result) in all { #expect(try result.get().array?[1].string == value) }
            #expect(gate.sizes.withLock { $0 } == [1, 3])
        }
    }

    @Test("a lone item leaves at once and gets its reply")
    func loneItem() async throws {
        try await RedisClientTests.withClient { client, prefix in
            let batcher = RedisBatcher(redis: client, script: Self.echo, keys: ["\(prefix):calls"], arguments: [])
            let alone = try await batcher.run(Self.item("alone"))
            #expect(alone == .array([.integer(1), .bulk(Array("alone".utf8))]))
            let again = try await batcher.run(Self.item("again"))
            #expect(again == .array([.integer(2), .bulk(Array("again".utf8))]))
        }
    }
}
