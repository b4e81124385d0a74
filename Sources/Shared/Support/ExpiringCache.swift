import Foundation
import Synchronization

/// A small in-process cache whose entries expire after a fixed time, so changes made elsewhere (another
/// API process, an admin call) take effect within that time without a round trip per request.
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
        /// When a request began refreshing it, while one does (uptime nanoseconds).
        var refreshingSince: UInt64?
        /// No refresh before this: the last one failed (uptime nanoseconds).
        var retryAt: UInt64 = 0
    }

    /// The entries, and when keys were forgotten: a load that began before its key's `remove` may have read
    /// what the remove was for, so its value is not kept. `generation` counts removals; `removed` holds each
    /// removed key's last one (at most `capacity` keys; past that, `clearedAt` stands for them all).
    private struct State {
        var entries: [Key: Entry] = [:]
        var generation: UInt64 = 0
        var removed: [Key: UInt64] = [:]
        var clearedAt: UInt64 = 0
    }

    /// How long after a failed refresh a stale entry answers without trying again.
    static var retryDelayNanoseconds: UInt64 { 1_000_000_000 }
    /// A refresh that has not ended after this long no longer holds the others off (one whose task vanished).
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
    /// answers while another request refreshes it, and for a second after a refresh failed.
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

    /// ``lookup(for:load:)`` at `now` (uptime nanoseconds).
    func lookup(for key: Key, now: UInt64, load: () async throws -> Value?) async rethrows -> (value: Value?, stale: Bool) {
        let (cached, began, answer) = self.state.withLock { state -> (Entry?, UInt64, (Value, Bool)?) in
            guard let cached = state.entries[key] else { return (nil, state.generation, nil) }
            if cached.expires > now { return (cached, state.generation, (cached.value, false)) }
            guard self.staleNanoseconds > 0, cached.expires &+ self.staleNanoseconds > now else { return (cached, state.generation, nil) }
            let refreshing = cached.refreshingSince.map { now < $0 &+ Self.refreshLimitNanoseconds } ?? false
            if refreshing || now < cached.retryAt { return (cached, state.generation, (cached.value, true)) }
            state.entries[key]?.refreshingSince = now
            return (cached, state.generation, nil)
        }
        if let answer { return answer }
        let started = DispatchTime.now().uptimeNanoseconds
        let loaded: Value?
        do {
            loaded = try await load()
        } catch {
            guard let cached, cached.expires &+ self.staleNanoseconds > now else { throw error }
            let failed = now &+ (DispatchTime.now().uptimeNanoseconds &- started)
            self.state.withLock { state in
                // Unless the entry was replaced or removed meanwhile.
                guard state.entries[key]?.expires == cached.expires else { return }
                state.entries[key]?.refreshingSince = nil
                state.entries[key]?.retryAt = failed &+ Self.retryDelayNanoseconds
            }
            return (cached.value, true)
        }
        self.state.withLock { state in
            guard let value = loaded else {
                // Gone at the source: the old entry must not answer for it any longer.
                if let cached, state.entries[key]?.expires == cached.expires { state.entries.removeValue(forKey: key) }
                return
            }
            guard max(state.clearedAt, state.removed[key] ?? 0) <= began else { return }
            if state.entries.count >= self.capacity {
                // Dropping everything is crude but bounded and rare: the cache refills in one lifetime.
                state.entries.removeAll(keepingCapacity: true)
            }
            state.entries[key] = Entry(value: value, expires: now + self.lifetimeNanoseconds)
        }
        return (loaded, false)
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
