import Foundation

/// A token bucket per publisher in Redis, shared by every API process: `perSecond` tokens a second, up
/// to `burst`. One atomic script per request; Redis' own clock, so API hosts' clocks do not matter.
public struct RateLimiter: Sendable {
    private let redis: RedisClient
    private let prefix: String
    /// `TOLLGATE_RATE_LIMIT_PER_S`; 0 turns the limit off.
    public let perSecond: Int
    /// `TOLLGATE_RATE_LIMIT_BURST`; 0 turns the limit off too.
    public let burst: Int

    /// Creates a limiter for a deployment's key prefix.
    public init(redis: RedisClient, prefix: String, perSecond: Int, burst: Int) {
        self.redis = redis
        self.prefix = prefix
        self.perSecond = perSecond
        self.burst = burst
    }

    /// Whether the limit is on.
    public var isEnabled: Bool { self.perSecond > 0 && self.burst > 0 }

    /// Takes one token for `publisherId`: `nil` when allowed, else the seconds to wait (for `Retry-After`).
    public func take(publisherId: UUID) async throws -> Int? {
        guard self.isEnabled else { return nil }
        let key = "\(self.prefix):{rate}:\(publisherId.lowercasedString)"
        let reply = try await self.redis.run(Self.script, keys: [key], arguments: [String(self.perSecond), String(self.burst)])
        let parts = reply.array ?? []
        guard parts.count == 2, let allowed = parts[0].int, let waitMilliseconds = parts[1].int else {
            throw RedisError(.protocolViolation, "the rate limit script returned an unexpected reply")
        }
        return allowed == 1 ? nil : max(1, (waitMilliseconds + 999) / 1000)
    }

    /// KEYS: bucket. ARGV: tokens per second, burst. Returns {allowed (0/1), wait in ms}.
    static let script = RedisScript(name: "rate-limit", source: """
        local rate = tonumber(ARGV[1])
        local burst = tonumber(ARGV[2])
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
        local tokens = tonumber(state[1]) or burst
        local ts = tonumber(state[2]) or now
        if now > ts then tokens = math.min(burst, tokens + (now - ts) * rate / 1000) end
        local allowed = 0
        local wait = 0
        if tokens >= 1 then
          tokens = tokens - 1
          allowed = 1
        else
          wait = math.ceil((1 - tokens) * 1000 / rate)
        end
        redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(math.max(now, ts)))
        redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
        return {allowed, wait}
        """)
}
