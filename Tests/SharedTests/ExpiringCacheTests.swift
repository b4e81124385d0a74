import Synchronization
import Testing
@testable import Shared

@Suite("ExpiringCache")
struct ExpiringCacheTests {
    struct Down: Error {}

    static let second: UInt64 = 1_000_000_000

    @Test("an entry answers for its lifetime; past it, a failing load is answered from the entry for the stale time, then the error")
    func staleWhileLoadFails() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5, staleFor: 60)
        #expect(await cache.value(for: "k", now: 0) { 1 } == 1)
        #expect(await cache.value(for: "k", now: 4 * Self.second) { 2 } == 1, "fresh: not loaded again")
        #expect(try await cache.value(for: "k", now: 30 * Self.second) { throw Down() } == 1, "stale while loading fails")
        await #expect(throws: Down.self) { try await cache.value(for: "k", now: 70 * Self.second) { throw Down() } }
        #expect(await cache.value(for: "k", now: 70 * Self.second) { 3 } == 3, "loaded again once the source answers")
    }

    @Test("without a stale time, a failing load past the lifetime throws")
    func noStaleTime() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5)
        #expect(await cache.value(for: "k", now: 0) { 1 } == 1)
        await #expect(throws: Down.self) { try await cache.value(for: "k", now: 6 * Self.second) { throw Down() } }
    }

    @Test("a value loaded while its key was removed (an admin change committed meanwhile) is answered but not kept")
    func removedWhileLoading() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5)
        let loaded = await cache.value(for: "k", now: 0) {
            // The load read the old value; the change commits and removes the key before the load returns.
            cache.remove("k")
            return 1
        }
        #expect(loaded == 1)
        #expect(await cache.value(for: "k", now: 1) { 2 } == 2, "loaded again, not the value read before the change")
        #expect(await cache.value(for: "k", now: 2) { 3 } == 2, "kept once loaded undisturbed")
    }

    @Test("removing one key while another loads does not stop the other from being kept; removeAll does")
    func otherKeyRemovedWhileLoading() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5, capacity: 2)
        #expect(await cache.value(for: "k", now: 0) { cache.remove("other"); return 1 } == 1)
        #expect(await cache.value(for: "k", now: 1) { 2 } == 1, "kept: only another key was removed")
        // More removed keys than the cache holds: the record of them is bounded, so loads under way then are not kept.
        #expect(await cache.value(for: "j", now: 2) { ["a", "b", "c"].forEach(cache.remove); return 1 } == 1)
        #expect(await cache.value(for: "j", now: 3) { 2 } == 2)
        #expect(await cache.value(for: "i", now: 4) { cache.removeAll(); return 1 } == 1)
        #expect(await cache.value(for: "i", now: 5) { 2 } == 2, "not kept: every key was removed while it loaded")
        #expect(await cache.value(for: "i", now: 6) { 3 } == 2)
    }

    @Test("while one request refreshes an expired entry, the others answer from it at once instead of each loading")
    func oneRefreshAtATime() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5, staleFor: 60)
        #expect(await cache.value(for: "k", now: 0) { 1 } == 1)
        let (released, release) = AsyncStream.makeStream(of: Void.self)
        let (began, started) = AsyncStream.makeStream(of: Void.self)
        // A refresh that hangs, as a load from a stalled PostgreSQL does.
        let refresh = Task {
            await cache.value(for: "k", now: 6 * Self.second) {
                started.yield()
                for await _ in released { break }
                return 2
            }
        }
        for await _ in began { break }
        let loads = Counter()
        for offset in 0..<5 {
            let value = await cache.value(for: "k", now: 6 * Self.second + UInt64(offset)) {
                loads.add()
                return 3
            }
            #expect(value == 1, "answered from the entry being refreshed")
        }
        #expect(loads.value == 0, "only the refreshing request loads")
        release.yield()
        #expect(await refresh.value == 2)
        #expect(await cache.value(for: "k", now: 7 * Self.second) { 4 } == 2, "the refreshed value, fresh")
    }

    @Test("after a refresh failed, a stale entry answers for a second without loading, then tries again")
    func pauseAfterFailedRefresh() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5, staleFor: 60)
        #expect(await cache.value(for: "k", now: 0) { 1 } == 1)
        #expect(try await cache.value(for: "k", now: 6 * Self.second) { throw Down() } == 1)
        let loads = Counter()
        #expect(await cache.value(for: "k", now: 6 * Self.second + Self.second / 2) { loads.add(); return 2 } == 1)
        #expect(loads.value == 0, "not tried again within the second")
        #expect(await cache.value(for: "k", now: 7 * Self.second + Self.second / 10) { loads.add(); return 2 } == 2)
        #expect(loads.value == 1)
    }

    @Test("an entry whose refresh finds it gone at the source no longer answers")
    func goneAtSource() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5, staleFor: 60)
        #expect(await cache.value(for: "k", now: 0) { 1 } == 1)
        #expect(await cache.value(for: "k", now: 6 * Self.second) { nil } == nil)
        await #expect(throws: Down.self) { try await cache.value(for: "k", now: 7 * Self.second) { throw Down() } }
    }

    /// One caller's load of "k" that hangs until `release()`, as one from a stalled PostgreSQL does, and `count`
    /// callers waiting for it that count their own loads (each loading `value`). `start` returns once they all wait.
    struct HeldLoad {
        let first: Task<Int?, any Error>
        let waiting: [Task<Int?, Never>]
        let loads: Counter
        private let released: AsyncStream<Void>.Continuation

        static func start(
            _ cache: ExpiringCache<String, Int>, at firstAt: UInt64, waiters count: Int, at now: UInt64, loading value: Int,
            first result: @escaping @Sendable () throws -> Int?
        ) async throws -> HeldLoad {
            let (released, release) = AsyncStream.makeStream(of: Void.self)
            let (began, started) = AsyncStream.makeStream(of: Void.self)
            let first = Task {
                try await cache.value(for: "k", now: firstAt) {
                    started.yield()
                    for await _ in released { break }
                    return try result()
                }
            }
            for await _ in began { break }
            let loads = Counter()
            let waiting = (0..<count).map { _ in
                Task { await cache.value(for: "k", now: now) { loads.add(); return value } }
            }
            let deadline = ContinuousClock.now + .seconds(10)
            while cache.waiters(for: "k") < count {
                try #require(ContinuousClock.now < deadline, "\(cache.waiters(for: "k")) of \(count) callers wait")
                try await Task.sleep(for: .milliseconds(1))
            }
            return HeldLoad(first: first, waiting: waiting, loads: loads, released: release)
        }

        /// Lets the first caller's load return.
        func release() { self.released.yield() }
    }

    @Test("a key nobody has cached is loaded by one caller while the others wait for its value, as when a process starts under load")
    func coldKeyLoadedOnce() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5)
        let held = try await HeldLoad.start(cache, at: 0, waiters: 50, at: 1, loading: 2) { 1 }
        held.release()
        #expect(try await held.first.value == 1)
        for task in held.waiting { #expect(await task.value == 1, "the value the first caller loaded") }
        #expect(held.loads.value == 0, "only the first caller loads")
        #expect(await cache.value(for: "k", now: 2) { 3 } == 1, "and it is kept")
        #expect(cache.waiters(for: "k") == 0)
    }

    @Test("an expired entry without a stale time: the callers wait for one load, not each its own")
    func expiredKeyLoadedOnce() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5)
        #expect(await cache.value(for: "k", now: 0) { 1 } == 1)
        let held = try await HeldLoad.start(cache, at: 6 * Self.second, waiters: 20, at: 6 * Self.second + 1, loading: 3) { 2 }
        held.release()
        #expect(try await held.first.value == 2)
        for task in held.waiting { #expect(await task.value == 2, "the refreshed value, not the expired one") }
        #expect(held.loads.value == 0)
    }

    @Test("when the load they wait for fails, each waiter loads for itself")
    func waitersLoadAfterFailure() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5)
        let held = try await HeldLoad.start(cache, at: 0, waiters: 10, at: 1, loading: 2) { throw Down() }
        held.release()
        await #expect(throws: Down.self) { try await held.first.value }
        for task in held.waiting { #expect(await task.value == 2) }
        #expect(held.loads.value == 10, "each waiter tried its own load")
    }

    @Test("waiters of a load whose key was removed meanwhile look again: none answers the value read before the change")
    func waitersAfterRemove() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5)
        let held = try await HeldLoad.start(cache, at: 0, waiters: 10, at: 1, loading: 2) {
            cache.remove("k")
            return 1
        }
        held.release()
        #expect(try await held.first.value == 1, "the first caller answers what it read, as before")
        for task in held.waiting { #expect(await task.value == 2, "loaded after the change") }
        #expect(held.loads.value >= 1)
        #expect(await cache.value(for: "k", now: 2) { 3 } == 2)
    }

    @Test("a load past the limit no longer holds callers off: the next one loads, and the waiters take its value")
    func hungLoadReplaced() async throws {
        let cache = ExpiringCache<String, Int>(lifetime: 5)
        let held = try await HeldLoad.start(cache, at: 0, waiters: 5, at: 1, loading: 2) { 1 }
        let limit = ExpiringCache<String, Int>.refreshLimitNanoseconds
        #expect(await cache.value(for: "k", now: limit + 1) { 3 } == 3, "loaded by the next caller")
        for task in held.waiting { #expect(await task.value == 3, "the waiters had its value") }
        #expect(held.loads.value == 0)
        held.release()
        #expect(try await held.first.value == 1)
    }

    /// Counts calls from closures.
    final class Counter: Sendable {
        private let count = Mutex(0)
        func add() { self.count.withLock { $0 += 1 } }
        var value: Int { self.count.withLock { $0 } }
    }
}
