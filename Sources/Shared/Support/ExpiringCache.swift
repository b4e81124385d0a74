import Foundation
import Synchronization

/// A small in-process cache whose entries expire after a fixed time, so changes made elsewhere (another
/// API process, an admin call) take effect within that time without a round trip per request.
///
/// One caller at a time loads a key: those that find no entry to answer from while it loads wait for its
/// value instead of each asking the source (a process starting under load, where every request or job in
/// flight misses at once). Should that load fail, each waiter tries its own, as it would have alone.
///
/// With `staleFor`, an entry past its lifetime still answers while `load` fails (its source, PostgreSQL,
/// is away) for that much longer: what was true a moment ago, rather than an error for every request.
/// Such an entry is refreshed by one request at a time: the others answer from it meanwhile, and for a
/// second after a refresh failed, so that a source that hangs (a stalled PostgreSQL, every connection busy)
/// costs one request its wait, not every request.
public final class ExpiringCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry {
        let value: Value
        let expires: UInt64
        /// No refresh before this: the last one failed (uptime nanoseconds).
        var retryAt: UInt64 = 0
    }

    /// A load under way, and the callers waiting for what it loads.
    private struct Load {
        let id: UInt64
        /// When it began (uptime nanoseconds).
        let since: UInt64
        var waiters: [CheckedContinuation<Outcome, Never>] = []
    }

    /// What a waiter is told when the load it waits for ends.
    private enum Outcome: Sendable {
        /// The value (nil: gone at the source), kept in the cache.
        case loaded(Value?)
        /// The load failed: the waiter loads for itself.
        case failed
        /// The value was not kept (its key was removed while it loaded): the waiter looks again.
        case again
    }

    /// The entries, the loads under way, and when keys were forgotten: a load that began before its key's
    /// `remove` may have read what the remove was for, so its value is not kept. `generation` counts removals;
    /// `removed` holds each removed key's last one (at most `capacity` keys; past that, `clearedAt` stands for
    /// them all).
    private struct State {
        var entries: [Key: Entry] = [:]
        var loads: [Key: Load] = [:]
        var nextLoad: UInt64 = 0
        var generation: UInt64 = 0
        var removed: [Key: UInt64] = [:]
        var clearedAt: UInt64 = 0
    }

    /// How long after a failed refresh a stale entry answers without trying again.
    static var retryDelayNanoseconds: UInt64 { 1_000_000_000 }
    /// A load that has not ended after this long no longer holds the others off (one whose task vanished):
    /// the next caller loads, and those waiting wait for that load instead.
    static var refreshLimitNanoseconds: UInt64 { 30_000_000_000 }

    private let state = Mutex(State())
    private let lifetimeNanoseconds: UInt64
    private let staleNanoseconds: UInt64
    private let capacity: Int

    /// Creates a cache whose entries live `lifetime` seconds, and serve `staleFor` seconds more while
    /// loading fails, holding at most `capacity` of them.
    public init(lifetime: Double, staleFor: Double = 0, capacity: Int = 10_000) {
        self.lifetimeNanoseconds = UInt64(lifetime * 1_000_000_000)
        self.staleNanoseconds = UInt64(staleFor * 1_000_000_000)
        self.capacity = capacity
    }

    /// The cached value, or the one `load` produces (cached unless it is `nil`, or a key was removed while
    /// it loaded); when `load` throws, an entry within its stale time. An entry within its stale time also
    /// answers while another request refreshes it, and for a second after a refresh failed. A caller that
    /// finds nothing to answer from while another loads the key waits for that load (not for its own task's
    /// cancellation).
    public func value(for key: Key, load: () async throws -> Value?) async rethrows -> Value? {
        try await self.lookup(for: key, now: DispatchTime.now().uptimeNanoseconds, load: load).value
    }

    /// ``value(for:load:)``, and whether the value is a stale one (past its lifetime: the source failed, or is
    /// being asked by another caller), which may miss what the source gained since.
    public func lookup(for key: Key, load: () async throws -> Value?) async rethrows -> (value: Value?, stale: Bool) {
        try await self.lookup(for: key, now: DispatchTime.now().uptimeNanoseconds, load: load)
    }

    /// ``value(for:load:)`` at `now` (uptime nanoseconds), for tests.
    func value(for key: Key, now: UInt64, load: () async throws -> Value?) async rethrows -> Value? {
        try await self.lookup(for: key, now: now, load: load).value
    }

    /// What a caller does: answer, wait for the load under way, or load the key itself (as load `id`).
    private enum Step {
        case answer(Value, stale: Bool)
        case wait(load: UInt64)
        case load(id: UInt64)
    }

    /// ``lookup(for:load:)`` at `now` (uptime nanoseconds).
    func lookup(for key: Key, now: UInt64, load: () async throws -> Value?) async rethrows -> (value: Value?, stale: Bool) {
        let (cached, began, step) = self.state.withLock { state -> (Entry?, UInt64, Step) in
            let cached = state.entries[key]
            if let cached, cached.expires > now { return (cached, state.generation, .answer(cached.value, stale: false)) }
            let underWay = state.loads[key].flatMap { now < $0.since &+ Self.refreshLimitNanoseconds ? $0.id : nil }
            if let cached, self.staleNanoseconds > 0, cached.expires &+ self.staleNanoseconds > now,
                underWay != nil || now < cached.retryAt
            {
                return (cached, state.generation, .answer(cached.value, stale: true))
            }
            if let underWay { return (cached, state.generation, .wait(load: underWay)) }
            let id = state.nextLoad
            state.nextLoad += 1
            // A load past its limit hands its waiters to this one.
            state.loads[key] = Load(id: id, since: now, waiters: state.loads[key]?.waiters ?? [])
            return (cached, state.generation, .load(id: id))
        }
        switch step {
        case .answer(let value, let stale):
            return (value, stale)
        case .load(let id):
            return try await self.load(key, cached: cached, began: began, now: now, id: id, load: load)
        case .wait(let id):
            let outcome = await withCheckedContinuation { (waiter: CheckedContinuation<Outcome, Never>) in
                self.state.withLock { state in
                    guard state.loads[key]?.id == id else { return waiter.resume(returning: .again) }
                    state.loads[key]?.waiters.append(waiter)
                }
            }
            switch outcome {
            case .loaded(let value): return (value, false)
            case .again: return try await self.lookup(for: key, now: now, load: load)
            case .failed: return try await self.load(key, cached: cached, began: began, now: now, id: nil, load: load)
            }
        }
    }

    /// Loads `key` and keeps what it loaded; when `id` names the caller's registered load, tells its waiters.
    private func load(
        _ key: Key, cached: Entry?, began: UInt64, now: UInt64, id: UInt64?, load: () async throws -> Value?
    ) async rethrows -> (value: Value?, stale: Bool) {
        let started = DispatchTime.now().uptimeNanoseconds
        let loaded: Value?
        do {
            loaded = try await load()
        } catch {
            let failed = now &+ (DispatchTime.now().uptimeNanoseconds &- started)
            self.state.withLock { state in
                self.end(id, of: key, in: &state, telling: .failed)
                // Unless the entry was replaced or removed meanwhile.
                guard let cached, state.entries[key]?.expires == cached.expires else { return }
                state.entries[key]?.retryAt = failed &+ Self.retryDelayNanoseconds
            }
            guard let cached, cached.expires &+ self.staleNanoseconds > now else { throw error }
            return (cached.value, true)
        }
        self.state.withLock { state in
            guard let value = loaded else {
                // Gone at the source: the old entry must not answer for it any longer.
                if let cached, state.entries[key]?.expires == cached.expires { state.entries.removeValue(forKey: key) }
                return self.end(id, of: key, in: &state, telling: .loaded(nil))
            }
            guard max(state.clearedAt, state.removed[key] ?? 0) <= began else {
                return self.end(id, of: key, in: &state, telling: .again)
            }
            if state.entries.count >= self.capacity {
                // Dropping everything is crude but bounded and rare: the cache refills in one lifetime.
                state.entries.removeAll(keepingCapacity: true)
            }
            state.entries[key] = Entry(value: value, expires: now + self.lifetimeNanoseconds)
            self.end(id, of: key, in: &state, telling: .loaded(value))
        }
        return (loaded, false)
    }

    /// Ends load `id` of `key` (if it is still the key's: one past its limit may have been replaced) and
    /// resumes its waiters.
    private func end(_ id: UInt64?, of key: Key, in state: inout State, telling outcome: Outcome) {
        guard let id, state.loads[key]?.id == id, let ended = state.loads.removeValue(forKey: key) else { return }
        for waiter in ended.waiters { waiter.resume(returning: outcome) }
    }

    /// How many callers wait for the load of `key` under way, for tests.
    func waiters(for key: Key) -> Int {
        self.state.withLock { $0.loads[key]?.waiters.count ?? 0 }
    }

    /// Forgets every key.
    public func removeAll() {
        self.state.withLock { state in
            state.entries.removeAll()
            state.generation += 1
            state.clearedAt = state.generation
            state.removed.removeAll()
        }
    }

    /// Forgets one key.
    public func remove(_ key: Key) {
        self.state.withLock { state in
            state.entries.removeValue(forKey: key)
            state.generation += 1
            if state.removed.count >= self.capacity {
                state.clearedAt = state.generation
                state.removed.removeAll()
            } else {
                state.removed[key] = state.generation
            }
        }
    }
}
