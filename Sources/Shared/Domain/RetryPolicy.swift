/// Exponential backoff with full jitter, bounded by attempts and age (CONTRACT.md).
public struct RetryPolicy: Sendable, Equatable {
    /// `TOLLGATE_RETRY_BASE_MS`.
    public var baseMilliseconds: Int
    /// `TOLLGATE_RETRY_MAX_DELAY_MS`.
    public var maxDelayMilliseconds: Int
    /// `TOLLGATE_RETRY_MAX_ATTEMPTS`.
    public var maxAttempts: Int
    /// `TOLLGATE_RETRY_MAX_AGE_S`.
    public var maxAgeSeconds: Int

    /// Creates a policy.
    public init(baseMilliseconds: Int, maxDelayMilliseconds: Int, maxAttempts: Int, maxAgeSeconds: Int) {
        self.baseMilliseconds = baseMilliseconds
        self.maxDelayMilliseconds = maxDelayMilliseconds
        self.maxAttempts = maxAttempts
        self.maxAgeSeconds = maxAgeSeconds
    }

    /// The cap of the delay after attempt number `attempt` (1-based): `min(max, base·2^attempt)`.
    public func ceiling(afterAttempt attempt: Int) -> Int {
        let exponent = max(attempt, 0)
        // From 2^63 on the factor no longer fits an Int, and a base ≥ 1 times it exceeds any maximum.
        guard exponent < Int.bitWidth - 1 else { return self.baseMilliseconds == 0 ? 0 : self.maxDelayMilliseconds }
        let (product, overflow) = self.baseMilliseconds.multipliedReportingOverflow(by: 1 << exponent)
        return overflow ? self.maxDelayMilliseconds : min(self.maxDelayMilliseconds, product)
    }

    /// A delay drawn uniformly from `0...ceiling` (full jitter), so retries of many jobs spread out.
    public func delay<G: RandomNumberGenerator>(afterAttempt attempt: Int, using generator: inout G) -> Int {
        Int.random(in: 0...self.ceiling(afterAttempt: attempt), using: &generator)
    }

    /// A delay drawn with the system's generator.
    public func delay(afterAttempt attempt: Int) -> Int {
        var generator = SystemRandomNumberGenerator()
        return self.delay(afterAttempt: attempt, using: &generator)
    }

    /// When to try a job again after attempt number `attempt` failed at `now` (Unix ms): after a jittered
    /// delay, or `atLeast` ms, but never past the job's age limit, so its last attempt comes at the limit
    /// and not up to a maximum delay after it (a job must not stay `retrying` long past `TOLLGATE_RETRY_MAX_AGE_S`).
    public func due<G: RandomNumberGenerator>(
        afterAttempt attempt: Int, now: Int, acceptedAt: Int, atLeast: Int = 0, using generator: inout G
    ) -> Int {
        let delayed = now + max(atLeast, self.delay(afterAttempt: attempt, using: &generator))
        let (window, wide) = self.maxAgeSeconds.multipliedReportingOverflow(by: 1000)
        let (limit, late) = acceptedAt.addingReportingOverflow(window)
        return wide || late ? delayed : max(now, min(delayed, limit))
    }

    /// ``due(afterAttempt:now:acceptedAt:atLeast:using:)`` with the system's generator.
    public func due(afterAttempt attempt: Int, now: Int, acceptedAt: Int, atLeast: Int = 0) -> Int {
        var generator = SystemRandomNumberGenerator()
        return self.due(afterAttempt: attempt, now: now, acceptedAt: acceptedAt, atLeast: atLeast, using: &generator)
    }

    /// The least delay before asking again after an answer that is believed once it comes a few times
    /// (21002, "malformed or a temporary issue", and statuses Apple does not document), from its second
    /// time on: a quarter of the largest delay (75 s by default), so that its tries span minutes and a
    /// short incident at Apple does not use them up within seconds. The first time, it is asked again as
    /// soon as any failure, within the minute an app polls.
    public var limitedAnswerDelay: Int { self.maxDelayMilliseconds / 4 }

    /// How far back workers look to tell a 21002 about one receipt from an incident at Apple (another
    /// receipt verified, other receipts answered 21002): a minute, or the least delay between a 21002's
    /// tries if that is longer, so the look spans the gap before its last try.
    public var incidentWindow: Int { max(self.limitedAnswerDelay, 60_000) }

    /// Whether a job may be tried again after `attempts` attempts, `ageMilliseconds` after it was accepted.
    public func allowsAnotherAttempt(after attempts: Int, ageMilliseconds: Int) -> Bool {
        attempts < self.maxAttempts && ageMilliseconds < self.maxAgeSeconds * 1000
    }
}
