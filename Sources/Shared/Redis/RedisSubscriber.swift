import Foundation
import NIOPosix
import Synchronization

/// Listens to one Redis pub/sub channel on a connection and a thread of its own (hiredis blocks, so it
/// never runs on Swift's cooperative pool), and reports what it hears to a handler, on that thread.
///
/// Pub/sub delivers a message only to subscribers connected when it is published. So the handler hears
/// `.subscribed` each time the subscription is (re)established and `.lost` each time it breaks: whatever
/// it derived from messages must be treated as incomplete across a `.lost`. A connection silent for a
/// second is pinged; one that does not answer within a second more counts as lost (a link that stopped
/// passing packets without closing delays messages unseen) until it answers, and is dropped for a new one
/// after 5 s.
public final class RedisSubscriber: Sendable {
    /// What the handler hears.
    public enum Event: Sendable, Equatable {
        /// The subscription is in place: messages from now on will arrive.
        case subscribed
        /// A message's payload.
        case message(String)
        /// The subscription broke; the subscriber reconnects by itself.
        case lost
        /// A subscription could not be set up (once per streak of failures): Redis is away, or refuses
        /// `SUBSCRIBE` (an ACL). The subscriber keeps trying.
        case unavailable(String)
    }

    private let configuration: RedisConfiguration
    private let resolve: RedisConnection.Resolver
    private let channel: String
    private let handler: @Sendable (Event) -> Void
    private let thread = NIOThreadPool(numberOfThreads: 1)
    /// A pipe: ``shutdown()`` writes to `wake.write`; the thread polls `wake.read` beside the socket.
    private let wake: (read: Int32, write: Int32)
    private let stopped = Atomic<Bool>(false)
    /// How long a connection may be silent before it is pinged, and the ping unanswered before the
    /// subscription counts as lost.
    private let silenceMilliseconds: UInt64 = 1_000
    /// How long a ping may go unanswered before the connection is dropped for a new one.
    private let unansweredMilliseconds: UInt64

    /// Creates a subscriber; nothing happens until ``start()``.
    public convenience init(configuration: RedisConfiguration, channel: String, handler: @escaping @Sendable (Event) -> Void) {
        self.init(configuration: configuration, resolve: RedisConnection.addresses, channel: channel, handler: handler)
    }

    /// A subscriber whose host name resolves through `resolve` (tests give it addresses of their own), and that
    /// drops a connection whose ping went unanswered for `unansweredMilliseconds`.
    init(
        configuration: RedisConfiguration, resolve: @escaping RedisConnection.Resolver, unansweredMilliseconds: UInt64 = 5_000, channel: String,
        handler: @escaping @Sendable (Event) -> Void
    ) {
        self.configuration = configuration
        self.resolve = resolve
        self.unansweredMilliseconds = unansweredMilliseconds
        self.channel = channel
        self.handler = handler
        var descriptors: [Int32] = [-1, -1]
        if pipe(&descriptors) == 0 {
            for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        }
        self.wake = (descriptors[0], descriptors[1])
    }

    deinit {
        close(self.wake.read)
        close(self.wake.write)
    }

    /// Starts listening, on the subscriber's own thread.
    public func start() {
        self.thread.start()
        self.thread.submit { _ in self.listen() }
    }

    /// Stops listening and waits for the thread to end.
    public func shutdown() async {
        self.stopped.store(true, ordering: .sequentiallyConsistent)
        var one: UInt8 = 1
        _ = Glibc.write(self.wake.write, &one, 1)
        try? await self.thread.shutdownGracefully()
    }

    private var isStopped: Bool { self.stopped.load(ordering: .sequentiallyConsistent) }

    private func listen() {
        var backoffMilliseconds: Int32 = 100
        var reported = false
        while !self.isStopped {
            switch self.session() {
            case .success:
                backoffMilliseconds = 100
                reported = false
            case .failure(let error):
                if !reported, !self.isStopped { self.handler(.unavailable(error.message)) }
                reported = true
            }
            guard !self.isStopped else { return }
            // Redis is away: wait (or be woken for shutdown) before the next try.
            var descriptor = pollfd(fd: self.wake.read, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, backoffMilliseconds)
            backoffMilliseconds = min(backoffMilliseconds * 2, 2_000)
        }
    }

    /// One connection's life: subscribe, then hear messages until it breaks or the subscriber stops.
    /// Fails when the subscription could not be established.
    private func session() -> Result<Void, RedisError> {
        let connection: RedisConnection
        do { connection = try RedisConnection(configuration: self.configuration, wake: self.wake.read, resolve: self.resolve) } catch {
            return .failure(error as? RedisError ?? RedisError(.connection, "\(error)"))
        }
        switch connection.execute([["SUBSCRIBE", self.channel]]) {
        case .failure(let error): return .failure(error)
        case .success(let replies):
            switch replies.first {
            case .failure(let error)?: return .failure(error)
            case .success(let confirmation)? where confirmation.array?.first?.string == "subscribe": break
            default: return .failure(RedisError(.protocolViolation, "SUBSCRIBE was not confirmed"))
            }
        }
        self.handler(.subscribed)
        var lastHeard = Self.now()
        var pingSent: UInt64?
        // Reported lost while the connection is kept: a ping went unanswered.
        var unanswered = false
        defer { if !self.isStopped, !unanswered { self.handler(.lost) } }

        while !self.isStopped {
            switch connection.awaitPush(timeoutMilliseconds: 250) {
            case .failure:
                return .success(())
            case .success(.woken):
                return .success(())
            case .success(.reply(let value)):
                lastHeard = Self.now()
                pingSent = nil
                if unanswered {
                    // It answers again, in order: nothing published meanwhile was lost, only delayed.
                    unanswered = false
                    self.handler(.subscribed)
                }
                if let parts = value.array, parts.count == 3, parts[0].string == "message", let payload = parts[2].string {
                    self.handler(.message(payload))
                }
            case .success(.idle):
                let now = Self.now()
                if let sent = pingSent {
                    if now - sent > self.unansweredMilliseconds { return .success(()) }
                    if now - sent > self.silenceMilliseconds, !unanswered {
                        unanswered = true
                        self.handler(.lost)
                    }
                } else if now - lastHeard > self.silenceMilliseconds {
                    guard connection.write(["PING"]) == nil else { return .success(()) }
                    pingSent = now
                }
            }
        }
        return .success(())
    }

    private static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds / 1_000_000 }
}
