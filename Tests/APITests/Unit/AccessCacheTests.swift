import Foundation
import Shared
import Testing

@testable import API

/// `AccessCache`: serves only while subscribed, never puts back an answer an invalidation overtook.
@Suite("AccessCache")
struct AccessCacheTests {
    static let granted = AccessCache.Answer(granted: true, expiresAt: nil, pending: false)
    static let pending = AccessCache.Answer(granted: false, expiresAt: nil, pending: true)

    /// Looks `key` up and expects a miss; returns its ticket.
    static func miss(
        _ cache: AccessCache, _ key: String, now: UInt64 = AccessCache.now(), sourceLocation: SourceLocation = #_sourceLocation
    ) -> AccessCache.Ticket? {
        guard case .miss(let ticket)? = cache.lookup(key, now: now) else {
            Issue.record("expected a miss for \(key)", sourceLocation: sourceLocation)
            return nil
        }
        return ticket
    }

    static func hit(_ cache: AccessCache, _ key: String) -> AccessCache.Answer? {
        if case .hit(let answer)? = cache.lookup(key) { return answer }
        return nil
    }

    @Test("off until the subscription is in place, and again as soon as it is lost")
    func followsTheSubscription() throws {
        let cache = AccessCache(lifetimeSeconds: 30)
        #expect(cache.lookup("k") == nil)
        cache.handle(.subscribed)
        let ticket = try #require(Self.miss(cache, "k"))
        cache.store(Self.granted, for: "k", ticket: ticket)
        #expect(Self.hit(cache, "k") == Self.granted)
        cache.handle(.lost)
        #expect(cache.lookup("k") == nil)
        #expect(cache.count == 0)
        cache.handle(.subscribed)
        _ = Self.miss(cache, "k")
    }

    @Test("a message drops its key only; `*` drops everything")
    func invalidation() throws {
        let cache = AccessCache(lifetimeSeconds: 30)
        cache.handle(.subscribed)
        for key in ["a", "b"] {
            let ticket = try #require(Self.miss(cache, key))
            cache.store(Self.granted, for: key, ticket: ticket)
        }
        cache.handle(.message("a"))
        _ = Self.miss(cache, "a")
        #expect(Self.hit(cache, "b") == Self.granted)
        cache.handle(.message("*"))
        _ = Self.miss(cache, "b")
    }

    @Test("an answer read before an invalidation of its key, or a flush, is not stored")
    func racingReadsAreDropped() throws {
        let cache = AccessCache(lifetimeSeconds: 30)
        cache.handle(.subscribed)
        let stale = try #require(Self.miss(cache, "k"))
        cache.invalidate("k")
        cache.store(Self.pending, for: "k", ticket: stale)
        _ = Self.miss(cache, "k")

        let beforeFlush = try #require(Self.miss(cache, "k"))
        cache.handle(.message("*"))
        cache.store(Self.pending, for: "k", ticket: beforeFlush)
        _ = Self.miss(cache, "k")

        let beforeLoss = try #require(Self.miss(cache, "k"))
        cache.handle(.lost)
        cache.handle(.subscribed)
        cache.store(Self.pending, for: "k", ticket: beforeLoss)
        _ = Self.miss(cache, "k")

        // An invalidation of a key in another bucket does not hold back this one's answer.
        let other = try #require((0..<100).map { "other-\($0)" }.first { AccessCache.bucket($0) != AccessCache.bucket("k") })
        let fresh = try #require(Self.miss(cache, "k"))
        cache.invalidate(other)
        cache.store(Self.pending, for: "k", ticket: fresh)
        #expect(Self.hit(cache, "k") == Self.pending)
    }

    @Test("a lifetime of 0 turns the cache off")
    func disabled() {
        let cache = AccessCache(lifetimeSeconds: 0)
        cache.handle(.subscribed)
        #expect(!cache.isEnabled)
        #expect(cache.lookup("k") == nil)
    }

    @Test("at capacity, expired answers make room first")
    func capacity() throws {
        let cache = AccessCache(lifetimeSeconds: 30, capacity: 3)
        cache.handle(.subscribed)
        // One answer read a lifetime ago (expired by now), two live ones.
        let old = try #require(Self.miss(cache, "old", now: AccessCache.now() - 31_000_000_000))
        cache.store(Self.granted, for: "old", ticket: old)
        for key in ["a", "b"] {
            let ticket = try #require(Self.miss(cache, key))
            cache.store(Self.granted, for: key, ticket: ticket)
        }
        let ticket = try #require(Self.miss(cache, "d"))
        cache.store(Self.granted, for: "d", ticket: ticket)
        #expect(cache.count == 3)
        for key in ["a", "b", "d"] { #expect(Self.hit(cache, key) == Self.granted, "\(key)") }
    }

    @Test("at capacity with nearly every answer live, a tenth of them make room and the rest keep answering")
    func capacityNearlyAllLive() throws {
        let cache = AccessCache(lifetimeSeconds: 30, capacity: 100)
        cache.handle(.subscribed)
        let live = (0..<100).map { "live-\($0)" }
        for key in live {
            let ticket = try #require(Self.miss(cache, key))
            cache.store(Self.granted, for: key, ticket: ticket)
        }
        #expect(cache.count == 100)
        let ticket = try #require(Self.miss(cache, "new"))
        cache.store(Self.granted, for: "new", ticket: ticket)
        #expect(cache.count == 91, "a tenth made room for the new answer")
        #expect(Self.hit(cache, "new") == Self.granted)
        let kept = live.filter { Self.hit(cache, $0) != nil }
        #expect(kept.count == 90, "the others still answer: not an empty cache at the busiest moment")
        // The next store has room: no sweep at every store.
        let next = try #require(Self.miss(cache, "next"))
        cache.store(Self.granted, for: "next", ticket: next)
        #expect(cache.count == 92)
    }

    @Test("an access that expired since it was cached is answered as no access")
    func expiryIsCheckedOnEveryAnswer() {
        let past = AccessCache.Answer(granted: true, expiresAt: Date(timeIntervalSince1970: 1_000), pending: false)
        let view = AccessController.AccessView(offerId: "O", answer: past)
        #expect(!view.accessGranted)
        #expect(view.expiresAt == nil)
        #expect(view.grantType == nil)
        let future = AccessCache.Answer(granted: true, expiresAt: Date(timeIntervalSince1970: 4_000_000_000.5), pending: true)
        let live = AccessController.AccessView(offerId: "O", answer: future)
        #expect(live.accessGranted && live.expiresAt == 4_000_000_000 && live.grantType == "direct-purchase" && live.pending)
        #expect(live.json.json == #"{"accessGranted":true,"expiresAt":4000000000,"grantType":"direct-purchase","offerId":"O","pending":true}"#)
    }

    @Test("an access ending within the current second is granted until the instant it ends")
    func expiryWithinTheSecond() {
        let answer = AccessCache.Answer(granted: true, expiresAt: Date(timeIntervalSince1970: 1_000.8), pending: false)
        let before = AccessController.AccessView(offerId: "O", answer: answer, now: Date(timeIntervalSince1970: 1_000.3))
        #expect(before.accessGranted && before.expiresAt == 1_000)
        let after = AccessController.AccessView(offerId: "O", answer: answer, now: Date(timeIntervalSince1970: 1_000.8))
        #expect(!after.accessGranted && after.expiresAt == nil)
    }
}
