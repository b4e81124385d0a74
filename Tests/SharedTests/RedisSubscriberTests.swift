import Foundation
import Synchronization
import Testing
import TestSupport
@testable import Shared

@Suite("RedisSubscriber against a real Redis")
struct RedisSubscriberTests {
    /// The events a subscriber reported, in order.
    final class Heard: Sendable {
        let events = Mutex<[RedisSubscriber.Event]>([])
        func append(_ event: RedisSubscriber.Event) { self.events.withLock { $0.append(event) } }
        var all: [RedisSubscriber.Event] { self.events.withLock { $0 } }
    }

    @Test("subscribes, hears what is published on its channel only, and stops without reporting a loss")
    func hearsItsChannel() async throws {
        let configuration = try RedisConfiguration(url: TestEnvironment.redisURL())
        let channel = TestEnvironment.uniquePrefix() + ":channel"
        let heard = Heard()
        let subscriber = RedisSubscriber(configuration: configuration, channel: channel) { heard.append($0) }
        subscriber.start()
        let client = try TestEnvironment.redis()
        _ = try await Poll.until(timeout: .seconds(10), "subscribed") { heard.all.first == .subscribed ? true : nil }
        try await client.send("PUBLISH", channel + ":other", "not for us")
        for payload in ["one", "two", "*"] { try await client.send("PUBLISH", channel, payload) }
        _ = try await Poll.until(timeout: .seconds(10), "three messages") { heard.all.count == 4 ? true : nil }
        #expect(heard.all == [.subscribed, .message("one"), .message("two"), .message("*")])

        await subscriber.shutdown()
        #expect(heard.all.count == 4, "a shutdown is not reported as a lost subscription")
        await client.shutdown()
    }

    @Test("a host name whose first address refuses is reached on the next one, as the pipelined client does")
    func triesEveryAddress() async throws {
        // A server of the test's own, bound to 127.0.0.1 only: 127.0.0.2, loopback too, refuses at once.
        let server = try await DedicatedRedis()
        try await TestEnvironment.using(server) {
            let configuration = try RedisConfiguration(url: server.url)
            let dead = Heard()
            let refused = RedisSubscriber(configuration: configuration, resolve: { _ in ["127.0.0.2"] }, channel: "nobody") { dead.append($0) }
            refused.start()
            _ = try await Poll.until(timeout: .seconds(10), "reported unavailable") { dead.all.isEmpty ? nil : true }
            await refused.shutdown()
            guard case .unavailable(let reason)? = dead.all.first else {
                Issue.record("expected .unavailable, heard \(dead.all)")
                return
            }
            #expect(reason.contains("(127.0.0.2)"), "\(reason)")

            let heard = Heard()
            let subscriber = RedisSubscriber(configuration: configuration, resolve: { _ in ["127.0.0.2", "127.0.0.1"] }, channel: "nobody") { heard.append($0) }
            subscriber.start()
            _ = try await Poll.until(timeout: .seconds(10), "subscribed") { heard.all.first == .subscribed ? true : nil }
            await subscriber.shutdown()
        }
        // getaddrinfo blocks: on a thread of its own, not Swift's pool.
        let resolved = await withCheckedContinuation { continuation in
            Thread {
                continuation.resume(returning: (
                    literal: Result { try RedisConnection.addresses(of: "127.0.0.1") },
                    unknown: Result { try RedisConnection.addresses(of: "no-such-host.invalid") }
                ))
            }.start()
        }
        #expect((try? resolved.literal.get()) == ["127.0.0.1"])
        if case .failure(let error) = resolved.unknown { #expect(!"\(error)".isEmpty) } else { Issue.record("a name that does not resolve gave \(resolved.unknown)") }
    }

    @Test("a Redis that cannot be reached is reported once per streak of failures, not on every retry")
    func unavailableOnce() async throws {
        let port = try DedicatedRedis.freePort()
        let configuration = try RedisConfiguration(url: "redis://127.0.0.1:\(port)/0")
        let heard = Heard()
        let subscriber = RedisSubscriber(configuration: configuration, channel: "nobody") { heard.append($0) }
        subscriber.start()
        _ = try await Poll.until(timeout: .seconds(10), "reported unavailable") { heard.all.isEmpty ? nil : true }
        // A window in which it retries at 100, 200, 400 and 800 ms: still one report. (Slower retries
        // would only make the window see fewer; it cannot make the test fail.)
        try await Task.sleep(for: .milliseconds(1_600))
        await subscriber.shutdown()
        let events = heard.all
        #expect(events.count == 1)
        if case .unavailable(let reason)? = events.first { #expect(!reason.isEmpty) } else { Issue.record("expected .unavailable, heard \(events)") }
    }

    @Test(
        "a Redis that takes connections and never confirms: unavailable after the reply timeout, and a shutdown ends any wait",
        .timeLimit(.minutes(1))
    )
    func silentRedis() async throws {
        try await SilentListener.with { redis in
            var configuration = try redis.redisConfiguration(timeoutMilliseconds: 1000)
            let heard = Heard()
            let subscriber = RedisSubscriber(configuration: configuration, channel: "nobody") { heard.append($0) }
            subscriber.start()
            _ = try await Poll.until(timeout: .seconds(30), "reported unavailable") { heard.all.isEmpty ? nil : true }
            await subscriber.shutdown()
            #expect(heard.all == [.unavailable("no reply within 1000 ms")])

            // A reply timeout far past the test's time limit: once SUBSCRIBE is sent, only the shutdown can end
            // the wait for its confirmation.
            configuration.timeoutMilliseconds = 600_000
            let waiting = RedisSubscriber(configuration: configuration, channel: "nobody") { _ in }
            let before = redis.bytesReceived()
            waiting.start()
            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(20), "SUBSCRIBE sent") { redis.bytesReceived() > before ? true : nil }
            await waiting.shutdown()
        }
    }

    @Test(
        "a connection that stops answering without closing counts as lost until it answers again, on the same connection",
        .timeLimit(.minutes(1))
    )
    func unansweredThenBack() async throws {
        let server = try await DedicatedRedis()
        let admin = RedisClient(configuration: try RedisConfiguration(url: server.url), connections: 1)
        let heard = Heard()
        // Dropped only after 40 s unanswered (5 s in service), so however late this test resumes the server,
        // the connection is still the one it had.
        let subscriber = RedisSubscriber(
            configuration: try RedisConfiguration(url: server.url), resolve: RedisConnection.addresses, unansweredMilliseconds: 40_000, channel: "changes"
        ) { heard.append($0) }
        try await TestEnvironment.using(admin, server) {
            subscriber.start()
            _ = try await Poll.until(timeout: .seconds(10), "subscribed") { heard.all == [.subscribed] ? true : nil }
            let before = try await admin.send("CLIENT", "LIST", "TYPE", "pubsub")
            // Frozen (SIGSTOP): the connection stays open and nothing answers, as on a link that stopped
            // passing packets. Anything published meanwhile would be delayed unseen.
            server.pause()
            _ = try await Poll.until(timeout: .seconds(30), "reported lost") { heard.all.contains(.lost) ? true : nil }
            server.resume()
            _ = try await Poll.until(timeout: .seconds(30), "subscribed again") { heard.all.last == .subscribed && heard.all.count > 2 ? true : nil }
            #expect(heard.all == [.subscribed, .lost, .subscribed])
            let after = try await admin.send("CLIENT", "LIST", "TYPE", "pubsub")
            #expect(after.string?.split(separator: " ").first == before.string?.split(separator: " ").first, "the same connection (client id)")
            await subscriber.shutdown()
        }
    }
}
