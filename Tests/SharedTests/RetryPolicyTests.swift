import Testing
@testable import Shared

@Suite("RetryPolicy")
struct RetryPolicyTests {
    static let standard = RetryPolicy(baseMilliseconds: 1000, maxDelayMilliseconds: 300_000, maxAttempts: 15, maxAgeSeconds: 86_400)

    /// min(max, base·2^attempt), computed without overflow: the contract's formula, independently.
    static func reference(base: Int, max maximum: Int, attempt: Int) -> Int {
        var value = base
        for _ in 0..<max(attempt, 0) {
            if value > maximum / 2 { return maximum }
            value *= 2
        }
        return min(maximum, value)
    }

    @Test(
        "ceiling doubles from the base and stops at the maximum",
        arguments: [
            (0, 1000), (1, 2000), (2, 4000), (3, 8000), (4, 16_000), (5, 32_000), (6, 64_000), (7, 128_000),
            (8, 256_000), (9, 300_000), (10, 300_000), (15, 300_000),
        ]
    )
    func ceilingDoubles(attempt: Int, expected: Int) {
        #expect(Self.standard.ceiling(afterAttempt: attempt) == expected)
    }

    @Test("ceiling never overflows, whatever the attempt", arguments: [40, 62, 63, 64, 100, 1000, Int.max])
    func ceilingAtHugeAttempts(attempt: Int) {
        #expect(Self.standard.ceiling(afterAttempt: attempt) == 300_000)
        let wide = RetryPolicy(baseMilliseconds: Int.max / 3, maxDelayMilliseconds: Int.max, maxAttempts: 1, maxAgeSeconds: 1)
        #expect(wide.ceiling(afterAttempt: attempt) == Int.max)
    }

    @Test("ceiling matches min(max, base·2^attempt) over a grid, large maxima included")
    func ceilingMatchesFormula() {
        let bases = [1, 7, 1000, 86_400_000, 1 << 40, Int.max / 2]
        let maxima = [1, 500, 300_000, 86_400_000, 1 << 50, Int.max]
        for base in bases {
            for maximum in maxima {
                let policy = RetryPolicy(baseMilliseconds: base, maxDelayMilliseconds: maximum, maxAttempts: 1, maxAgeSeconds: 1)
                for attempt in [0, 1, 2, 3, 10, 20, 30, 39, 40, 41, 45, 50, 60, 61, 62, 63, 64, 70, 200] {
                    #expect(
                        policy.ceiling(afterAttempt: attempt) == Self.reference(base: base, max: maximum, attempt: attempt),
                        "base \(base), max \(maximum), attempt \(attempt)"
                    )
                }
            }
        }
    }

    @Test("delay is always within 0...ceiling", arguments: [0, 1, 3, 8, 9, 20, 1000])
    func delayWithinBounds(attempt: Int) {
        var generator = SeededGenerator(seed: 0xC0FFEE &+ UInt64(attempt))
        let ceiling = Self.standard.ceiling(afterAttempt: attempt)
        var low = Int.max
        var high = Int.min
        var outside: [Int] = []
        for _ in 0..<20_000 {
            let delay = Self.standard.delay(afterAttempt: attempt, using: &generator)
            if !(0...ceiling).contains(delay) { outside.append(delay) }
            low = min(low, delay)
            high = max(high, delay)
        }
        #expect(outside.isEmpty, "delays outside 0...\(ceiling)")
        // Full jitter: the draws spread over the whole range, not just near the ceiling.
        #expect(low < ceiling / 100 + 1)
        #expect(high > ceiling - ceiling / 100 - 1)
    }

    @Test("delay uses every value of a small range, 0 and the ceiling included")
    func delayUsesFullRange() {
        let policy = RetryPolicy(baseMilliseconds: 1, maxDelayMilliseconds: 16, maxAttempts: 5, maxAgeSeconds: 60)
        var generator = SeededGenerator(seed: 42)
        for attempt in 0...6 {
            let ceiling = policy.ceiling(afterAttempt: attempt)
            var seen = Set<Int>()
            for _ in 0..<5_000 { seen.insert(policy.delay(afterAttempt: attempt, using: &generator)) }
            #expect(seen == Set(0...ceiling), "attempt \(attempt)")
        }
    }

    @Test("the same seed draws the same delays")
    func delayIsDeterministicWithASeed() {
        var first = SeededGenerator(seed: 7)
        var second = SeededGenerator(seed: 7)
        let a = (0..<100).map { Self.standard.delay(afterAttempt: $0 % 12, using: &first) }
        let b = (0..<100).map { Self.standard.delay(afterAttempt: $0 % 12, using: &second) }
        #expect(a == b)
        #expect(Set(a).count > 50)
    }

    @Test("the system-generator delay is within 0...ceiling too")
    func systemDelayWithinBounds() {
        for attempt in 0...12 {
            let delay = Self.standard.delay(afterAttempt: attempt)
            #expect((0...Self.standard.ceiling(afterAttempt: attempt)).contains(delay))
        }
    }

    @Test(
        "allowsAnotherAttempt by attempts",
        arguments: [(0, true), (1, true), (14, true), (15, false), (16, false), (1000, false)]
    )
    func allowsByAttempts(attempts: Int, expected: Bool) {
        #expect(Self.standard.allowsAnotherAttempt(after: attempts, ageMilliseconds: 0) == expected)
    }

    @Test(
        "allowsAnotherAttempt by age",
        arguments: [(0, true), (1000, true), (86_399_999, true), (86_400_000, false), (86_400_001, false), (Int.max / 2, false)]
    )
    func allowsByAge(ageMilliseconds: Int, expected: Bool) {
        #expect(Self.standard.allowsAnotherAttempt(after: 1, ageMilliseconds: ageMilliseconds) == expected)
    }

    @Test("the next attempt is due after the delay, but never past the age limit")
    func dueWithinAge() {
        let policy = RetryPolicy(baseMilliseconds: 1000, maxDelayMilliseconds: 300_000, maxAttempts: 15, maxAgeSeconds: 5)
        var generator = SeededGenerator(seed: 3)
        let accepted = 1_000_000
        for attempt in 1...12 {
            for age in [0, 1000, 4000, 4999] {
                let now = accepted + age
                let due = policy.due(afterAttempt: attempt, now: now, acceptedAt: accepted, using: &generator)
                #expect(due >= now)
                #expect(due <= accepted + 5000, "attempt \(attempt) at age \(age) is due past the limit")
                #expect(due - now <= policy.ceiling(afterAttempt: attempt))
            }
        }
        // Far from the limit, the delay is the policy's own.
        var a = SeededGenerator(seed: 9)
        var b = SeededGenerator(seed: 9)
        #expect(Self.standard.due(afterAttempt: 3, now: 10, acceptedAt: 0, using: &a) == 10 + Self.standard.delay(afterAttempt: 3, using: &b))
        // Already past it (an operator's requeue restarts the age, so this is a late copy): at once.
        #expect(policy.due(afterAttempt: 1, now: accepted + 9000, acceptedAt: accepted, using: &generator) == accepted + 9000)
    }

    @Test("a least delay holds over the jitter, within the age limit")
    func dueAtLeast() {
        var generator = SeededGenerator(seed: 5)
        #expect(Self.standard.limitedAnswerDelay == 75_000)
        for attempt in 1...4 {
            let due = Self.standard.due(afterAttempt: attempt, now: 0, acceptedAt: 0, atLeast: 75_000, using: &generator)
            #expect(due >= 75_000, "attempt \(attempt) is due after \(due) ms")
        }
        // The age limit still wins.
        let short = RetryPolicy(baseMilliseconds: 1000, maxDelayMilliseconds: 300_000, maxAttempts: 15, maxAgeSeconds: 60)
        #expect(short.due(afterAttempt: 1, now: 1000, acceptedAt: 0, atLeast: 75_000, using: &generator) == 60_000)
    }

    @Test("past either bound, no further attempt")
    func eitherBoundStops() {
        let policy = RetryPolicy(baseMilliseconds: 10, maxDelayMilliseconds: 100, maxAttempts: 3, maxAgeSeconds: 2)
        #expect(policy.allowsAnotherAttempt(after: 2, ageMilliseconds: 1999))
        #expect(!policy.allowsAnotherAttempt(after: 3, ageMilliseconds: 0))
        #expect(!policy.allowsAnotherAttempt(after: 0, ageMilliseconds: 2000))
        #expect(!policy.allowsAnotherAttempt(after: 3, ageMilliseconds: 2000))
    }
}
