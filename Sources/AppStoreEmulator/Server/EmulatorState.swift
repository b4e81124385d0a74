import Synchronization

/// The emulator's mutable state: fault settings, call counters and per-scenario failure counters.
///
/// An actor, so every route sees one consistent state without locks; each verifyReceipt call touches it
/// once (twice when its scenario scripts a failure), which costs far less than the JSON work per call.
actor EmulatorState {
    private var settings: FaultSettings
    private var stats = EmulatorStats()
    /// Failures already served per exact `receipt-data` string. Only receipts whose scenario has `fail`
    /// are recorded, so a benchmark with millions of distinct receipts does not grow it.
    private var scenarioFailures: [String: Int] = [:]
    /// Set once the process is stopping: requests held by the `timeout` mode or delayed by latency stop
    /// waiting, so a 30-second hold (or minutes of latency) does not hold up a graceful shutdown.
    /// Atomic, outside the actor's isolation: a delayed call checks it without a hop.
    private let holdsReleased = Atomic<Bool>(false)
    /// The global latency as `settings` has it, for the calls waiting it out to read without a hop.
    private let latencyMs: Atomic<Int>

    /// Creates the state with the process's starting fault settings.
    init(settings: FaultSettings = .defaults) {
        self.settings = settings
        self.latencyMs = Atomic(settings.latencyMs)
    }

    /// Counts a call to the `endpoint` route; returns the global latency to serve it with.
    func admit(_ endpoint: AppleEnvironment) -> Int {
        switch endpoint {
        case .production: stats.production += 1
        case .sandbox: stats.sandbox += 1
        }
        return settings.latencyMs
    }

    /// Draws, with the settings of now (after the call's latency), whether the global fault injection
    /// fails the call; never when `faults` is false (the target of an injected redirect).
    func draw(faults: Bool = true) -> Admission {
        var admission = Admission(timeoutHoldMs: settings.timeoutHoldMs)
        if faults, settings.failRate > 0, Double.random(in: 0..<1) < settings.failRate {
            admission.injectedFailure = settings.failMode
            stats.failuresInjected += 1
        }
        return admission
    }

    /// Whether this call with `receiptData` is one of the first `count` and must fail; counts it if so.
    func consumeScenarioFailure(receiptData: String, count: Int) -> Bool {
        let served = scenarioFailures[receiptData, default: 0]
        guard served < count else { return false }
        scenarioFailures[receiptData] = served + 1
        stats.failuresInjected += 1
        return true
    }

    /// Counts what a well-formed request asked for, so tests can see what a client sends.
    func recordRequest(withPassword: Bool, excludeOldTransactions: Bool) {
        if withPassword { stats.withPassword += 1 }
        if excludeOldTransactions { stats.excludeOldTransactions += 1 }
    }

    /// The current fault settings.
    func currentSettings() -> FaultSettings {
        settings
    }

    /// Applies a runtime change of the fault settings; nothing changes when a field is refused.
    func update(_ update: FaultSettingsUpdate) -> Result<FaultSettings, ControlError> {
        let result = update.applied(to: settings)
        if case .success(let updated) = result {
            settings = updated
            latencyMs.store(updated.latencyMs, ordering: .relaxed)
        }
        return result
    }

    /// The call counters.
    func currentStats() -> EmulatorStats {
        stats
    }

    /// Zeroes the call counters and forgets every scenario's served failures; the settings stay. Returns
    /// the zeroed counters, so an answer shows them before any call that follows counts.
    func reset() -> EmulatorStats {
        stats = EmulatorStats()
        scenarioFailures = [:]
        return stats
    }

    /// Ends every current and future hold (`timeout` mode, latency) early; called when a stop signal arrives.
    nonisolated func releaseHolds() {
        holdsReleased.store(true, ordering: .relaxed)
    }

    /// Whether the process is stopping, so holds end (within ``holdStep``).
    nonisolated var holdsAreReleased: Bool {
        holdsReleased.load(ordering: .relaxed)
    }

    /// Waits out the global latency of a call admitted at `admitted` with `milliseconds` of it, as the setting
    /// stands while it waits: a runtime change applies to the calls already waiting (lowered to 0, Apple is
    /// back for them too, within ``holdStep``). Ends early once holds are released.
    nonisolated func holdLatency(milliseconds: Int, admitted: ContinuousClock.Instant) async throws {
        try await self.hold(from: admitted, milliseconds: milliseconds) { self.latencyMs.load(ordering: .relaxed) }
    }

    /// Waits up to `milliseconds`, or less once holds are released.
    nonisolated func hold(milliseconds: Int) async throws {
        try await self.hold(from: .now, milliseconds: milliseconds) { nil }
    }

    /// How long a hold sleeps at most before it looks again at its duration and at a stop: how late a runtime
    /// change or a stop signal may reach the calls already waiting. A hold no longer than this sleeps once. Each
    /// sleep is a timer and two thread wake-ups: at 200 ms of latency, steps of 100 ms (two sleeps, and the
    /// setting read on the actor after each) cost the emulator about a fifth of its CPU (ops/bench-profile.md).
    static let holdStep = Duration.milliseconds(250)

    /// Waits until `milliseconds` past `start`, the duration read again from `current` (when it gives one) every
    /// ``holdStep`` at most, or less once holds are released.
    private nonisolated func hold(from start: ContinuousClock.Instant, milliseconds: Int, current: () -> Int?) async throws {
        var duration = milliseconds
        while !self.holdsAreReleased {
            let left = start.advanced(by: .milliseconds(duration)) - ContinuousClock.now
            guard left > .zero else { return }
            try await Task.sleep(for: min(left, Self.holdStep))
            if let now = current() { duration = now }
        }
    }
}
