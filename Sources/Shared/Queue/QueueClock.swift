import Logging
import ServiceLifecycle
import Synchronization

/// The queue's one clock: Redis' `TIME`, carried between readings by this host's monotonic clock.
///
/// Every time the queue stores or compares (a job's `acceptedAt`, a retry's due time, the age limit, an
/// in-flight stamp, the dead letters' retention, which Redis' own entry ids measure) is read here, so
/// processes on hosts whose wall clocks disagree still agree on it: a worker whose clock runs a minute
/// behind would otherwise park retries that a peer's promoter releases at once, and one whose clock runs
/// ahead would end jobs at the age limit early. A wall-clock step on this host between readings changes
/// nothing. A step of Redis' host is taken in by the first reading after it that is as exact as the one in
/// use, or whose range does not meet that one's (``synchronize(with:)``); until then the clock stays within
/// the slower reading's range of Redis' time.
public final class QueueClock: Sendable {
    /// This host's time in Unix ms, carried monotonically.
    private let host: @Sendable () -> Int
    /// Redis' time minus `host()`: none until the first reading.
    private let offset = Atomic<Int>(0)
    /// The reading ``offset`` comes from.
    private let adopted = Mutex<Reading?>(nil)

    /// One reading of Redis' clock: Redis' time minus this host's at the midpoint of its round trip (so off
    /// by at most half of it), and when it ended (`host()`).
    struct Reading: Equatable {
        var offset: Int
        var roundTrip: Int
        var at: Int
    }

    /// How far two hosts' clocks may drift apart between readings: 1 ms every 10 s (100 ppm, quartz that no
    /// NTP disciplines). The reading in use is taken to be that much less exact as it ages.
    static let millisecondsPerDriftedMillisecond = 10_000

    /// Creates the clock. `host` is this host's time in Unix ms (tests pass a skewed one).
    public init(host: @escaping @Sendable () -> Int = QueueClock.hostMilliseconds) {
        self.host = host
    }

    /// The reading in use, if any.
    var reading: Reading? { self.adopted.withLock { $0 } }

    /// Now, in Unix milliseconds by Redis' clock (by this host's until the first reading).
    public func nowMilliseconds() -> Int {
        self.host() + self.offset.load(ordering: .relaxed)
    }

    /// Reads Redis' `TIME` three times and keeps the reading with the shortest round trip, as now at that
    /// round trip's midpoint (off by at most half of it, and 2 ms for the whole milliseconds it is read in: a
    /// busy host resumes a task late, and a late resumption looks like a slow answer). It replaces the reading in use only when it is at least as exact
    /// as that one has become, or when the two cannot both be right (``replaces(_:)``): a reading taken while
    /// the machine is saturated, tens of milliseconds off, does not move a clock set by a quick one. Returns
    /// how far this host's clock is from Redis' by the reading in use (ms, positive when this host's runs ahead).
    @discardableResult
    public func synchronize(with redis: RedisClient) async throws -> Int {
        var best: Reading?
        for _ in 0..<3 {
            let before = self.host()
            let reply = try await redis.send("TIME")
            let after = self.host()
            guard let parts = reply.array, parts.count == 2,
                  let seconds = parts[0].string.flatMap(Int.init), let microseconds = parts[1].string.flatMap(Int.init)
            else {
                throw RedisError(.protocolViolation, "TIME returned an unexpected reply")
            }
            let reading = Reading(offset: seconds * 1000 + microseconds / 1000 - (before + after) / 2, roundTrip: after - before, at: after)
            if best.map({ reading.roundTrip < $0.roundTrip }) ?? true { best = reading }
        }
        // Stored under the lock: two synchronisations at once (the queue's preparation and the clock's
        // service, at start) must not leave the offset of a reading the other one replaced.
        let offset = self.adopted.withLock { adopted in
            if let best, adopted.map({ best.replaces($0) }) ?? true { adopted = best }
            let offset = adopted?.offset ?? 0
            self.offset.store(offset, ordering: .relaxed)
            return offset
        }
        return -offset
    }

    private static let start = (wall: WallClock.nowMilliseconds(), monotonic: ContinuousClock.now)

    /// This host's wall clock as it read at the first call in this process, carried since by the monotonic
    /// clock: a step of the wall clock later (an NTP correction, an operator) does not move it.
    public static func hostMilliseconds() -> Int {
        let elapsed = (ContinuousClock.now - Self.start.monotonic).components
        return Self.start.wall + Int(elapsed.seconds) * 1000 + Int(elapsed.attoseconds / 1_000_000_000_000_000)
    }
}

extension QueueClock.Reading {
    /// Whether this reading replaces `current`, the one in use: when its round trip is no longer than
    /// `current`'s plus twice what the clocks may have drifted since (each reading is off by at most half its
    /// round trip), or when the two readings' ranges do not meet, so that one of the clocks stepped since
    /// `current` (an NTP correction, an operator): then the newer is the one that can be right. Each reading
    /// is taken in whole milliseconds (Redis' `TIME`, the host's clock, the midpoint), which puts it up to
    /// 2 ms further off: ranges that miss by less than that are taken to meet.
    func replaces(_ current: QueueClock.Reading) -> Bool {
        let drift = max(0, self.at - current.at) / QueueClock.millisecondsPerDriftedMillisecond
        let widened = current.roundTrip + 2 * drift
        if self.roundTrip <= widened { return true }
        return abs(self.offset - current.offset) * 2 > self.roundTrip + widened + 8
    }
}

/// Keeps the queue's ``QueueClock`` in step with Redis: a reading at start and every minute after (the
/// queue's `prepare()` takes one too), and a warning when this host's wall clock moves more than a second
/// from Redis'.
public struct QueueClockSync: Service, CustomStringConvertible {
    let queue: ReceiptQueue
    let interval: Duration
    let logger: Logger

    /// How ServiceGroup's logs name it.
    public var description: String { "QueueClockSync" }

    /// Creates the service.
    public init(queue: ReceiptQueue, interval: Duration = .seconds(60), logger: Logger) {
        self.queue = queue
        self.interval = interval
        self.logger = logger
    }

    public func run() async {
        await untilGracefulShutdown {
            var warned = false
            while !Task.isCancelled {
                do {
                    let skew = try await self.queue.synchronizeClock()
                    let skewed = abs(skew) > 1000
                    if skewed, !warned {
                        self.logger.warning("this host's clock is off from Redis' clock; the queue keeps Redis' time", metadata: ["skew_ms": "\(skew)"])
                    }
                    warned = skewed
                } catch {
                    // The last reading stands; readiness reports the outage.
                    self.logger.debug("cannot read Redis' clock", metadata: ["error": "\(error)"])
                }
                try? await Task.sleep(for: self.interval)
            }
        }
    }
}
