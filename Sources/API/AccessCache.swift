import Foundation
import Metrics
import Shared
import Synchronization

/// Recent access-status answers, so that apps polling every 5 seconds rarely cost a Redis and a
/// PostgreSQL round trip.
///
/// Kept exact by invalidation, not by a short lifetime: every change to an answer (a receipt accepted,
/// a job finished or dead-lettered or requeued, a refund or renewal applied) is published on the queue's
/// access channel after it is committed, and ``RedisSubscriber`` drops the entry here. The cache serves
/// only while that subscription stands: it starts empty and off, turns on when the subscription is in
/// place, and is emptied and turned off whenever the subscription breaks (messages published meanwhile
/// are lost). The process that accepts a receipt drops its own entry before answering, so its next
/// poll already says `pending`.
///
/// A look-up racing an invalidation must not put the old answer back: every invalidation advances a
/// generation and records it in the key's bucket (one of 4,096, so memory stays flat however many
/// receipts are accepted), and an answer read from Redis and PostgreSQL is stored only if neither its
/// bucket nor the whole cache was invalidated after its look-up started (a collision only skips a store).
/// Entries also expire after `TOLLGATE_ACCESS_CACHE_TTL_S`, which bounds what anything missed could cost.
final class AccessCache: Sendable {
    /// One answer, as read: expiry is checked again on every hit.
    struct Answer: Sendable, Equatable {
        var granted: Bool
        /// To the instant PostgreSQL holds: an access ending within the second is still granted until it ends.
        var expiresAt: Date?
        var pending: Bool
    }

    /// Where a look-up started, to store its answer only if nothing changed since.
    struct Ticket: Sendable {
        fileprivate let generation: UInt64
        fileprivate let startedAt: UInt64
    }

    /// What a look-up found.
    enum Lookup: Sendable {
        case hit(Answer)
        /// Read the answer, then ``store(_:for:ticket:)`` it.
        case miss(Ticket)
    }

    private struct Entry {
        var answer: Answer
        var expires: UInt64
    }

    private static let buckets = 4_096

    private struct Store {
        var entries: [String: Entry] = [:]
        var generation: UInt64 = 0
        var flushedAt: UInt64 = 0
        /// The generation of the last invalidation of any key in each bucket.
        var invalidatedAt = [UInt64](repeating: 0, count: AccessCache.buckets)
        var live = false
    }

    private let store = Mutex(Store())
    private let lifetimeNanoseconds: UInt64
    private let capacity: Int
    private let hits = Counter(label: "tollgate_access_cache_total", dimensions: [("result", "hit")])
    private let misses = Counter(label: "tollgate_access_cache_total", dimensions: [("result", "miss")])

    /// - Parameters:
    ///   - lifetimeSeconds: how long an answer is served at most; 0 turns the cache off.
    ///   - capacity: the most entries held.
    init(lifetimeSeconds: Int, capacity: Int = 200_000) {
        self.lifetimeNanoseconds = UInt64(max(0, lifetimeSeconds)) * 1_000_000_000
        self.capacity = capacity
    }

    var isEnabled: Bool { self.lifetimeNanoseconds > 0 }

    /// The cached answer for a pending key, or a ticket to store the answer about to be read; `nil`
    /// while the cache is off or not subscribed. (`now`: the monotonic clock, in nanoseconds.)
    func lookup(_ key: String, now: UInt64 = AccessCache.now()) -> Lookup? {
        guard self.isEnabled else { return nil }
        let found = self.store.withLock { store -> Lookup? in
            guard store.live else { return nil }
            if let entry = store.entries[key], entry.expires > now { return .hit(entry.answer) }
            return .miss(Ticket(generation: store.generation, startedAt: now))
        }
        switch found {
        case .hit?: self.hits.increment()
        case .miss?: self.misses.increment()
        case nil: break
        }
        return found
    }

    /// Stores an answer read after `ticket` was issued, unless the key changed or the cache was emptied since.
    func store(_ answer: Answer, for key: String, ticket: Ticket) {
        let now = Self.now()
        let bucket = Self.bucket(key)
        self.store.withLock { store in
            guard store.live, store.flushedAt <= ticket.generation, store.invalidatedAt[bucket] <= ticket.generation else { return }
            if store.entries.count >= self.capacity, store.entries[key] == nil {
                Self.sweep(&store, now: now)
                // Still nearly full of live answers: a tenth of them make room, whichever the table holds
                // first (its order is the keys' hashes', so no customer is favoured), and the rest keep
                // answering: emptying the cache would send every poll to Redis and PostgreSQL at the busiest
                // moment. The next sweep is then a tenth of the capacity of stores away, never at every store.
                let room = max(1, self.capacity / 10)
                if store.entries.count > self.capacity - room {
                    for evicted in Array(store.entries.keys.prefix(store.entries.count - (self.capacity - room))) {
                        store.entries.removeValue(forKey: evicted)
                    }
                }
            }
            store.entries[key] = Entry(answer: answer, expires: ticket.startedAt + self.lifetimeNanoseconds)
        }
    }

    /// Forgets one key's answer (a pending key, or `*` for every key: workers of earlier releases announce
    /// refunds and renewals that way, and an API upgraded before its workers must still hear them).
    func invalidate(_ key: String) {
        guard self.isEnabled else { return }
        let bucket = Self.bucket(key)
        self.store.withLock { store in
            if key == "*" {
                Self.flush(&store, live: store.live)
                return
            }
            store.generation += 1
            store.invalidatedAt[bucket] = store.generation
            store.entries.removeValue(forKey: key)
        }
    }

    /// Follows the access channel's subscription.
    func handle(_ event: RedisSubscriber.Event) {
        guard self.isEnabled else { return }
        switch event {
        case .subscribed: self.store.withLock { Self.flush(&$0, live: true) }
        case .lost: self.store.withLock { Self.flush(&$0, live: false) }
        case .message(let key): self.invalidate(key)
        case .unavailable: break
        }
    }

    /// How many answers are held.
    var count: Int { self.store.withLock { $0.entries.count } }

    private static func flush(_ store: inout Store, live: Bool) {
        store.generation += 1
        store.flushedAt = store.generation
        store.entries.removeAll(keepingCapacity: true)
        store.live = live
    }

    private static func sweep(_ store: inout Store, now: UInt64) {
        store.entries = store.entries.filter { $0.value.expires > now }
    }

    /// The invalidation bucket of a key.
    static func bucket(_ key: String) -> Int { key.hashValue & (Self.buckets - 1) }

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}
