import Foundation
import Synchronization

/// A small in-process cache whose entries expire after a fixed time, so changes made elsewhere (another
/// API process, an admin call) take effect within that time without a round trip per request.
public final class ExpiringCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry {
        let value: Value
        let expires: UInt64
    }

    private let entries = Mutex<[Key: Entry]>([:])
    private let lifetimeNanoseconds: UInt64
    private let capacity: Int

    /// Creates a cache whose entries live `lifetime` seconds, holding at most `capacity` of them.
    public init(lifetime: Double, capacity: Int = 10_000) {
        self.lifetimeNanoseconds = UInt64(lifetime * 1_000_000_000)
        self.capacity = capacity
    }

    /// The cached value, or the one `load` produces (cached unless it is `nil`).
    public func value(for key: Key, load: () async throws -> Value?) async rethrows -> Value? {
        let now = DispatchTime.now().uptimeNanoseconds
        if let entry = self.entries.withLock({ $0[key] }), entry.expires > now { return entry.value }
        guard let value = try await load() else { return nil }
        self.entries.withLock { entries in
            if entries.count >= self.capacity {
                // Dropping everything is crude but bounded and rare: the cache refills in one lifetime.
                entries.removeAll(keepingCapacity: true)
            }
            entries[key] = Entry(value: value, expires: now + self.lifetimeNanoseconds)
        }
        return value
    }

    /// Forgets every key.
    public func removeAll() {
        self.entries.withLock { $0.removeAll() }
    }

    /// Forgets one key.
    public func remove(_ key: Key) {
        _ = self.entries.withLock { $0.removeValue(forKey: key) }
    }
}
