import Testing
@testable import AppStoreEmulator

@Suite("emulator state")
struct EmulatorStateTests {
    @Test("released holds end, current and future, so a stop signal is not kept waiting")
    func releasedHold() async throws {
        let state = EmulatorState()
        // A ten-minute hold, released: it must end long before, however loaded the machine (a minute's
        // watch for what takes at most 100 ms; a hold that is not released fails the test, not the clock).
        let holding = Task { try await state.hold(milliseconds: 600_000) }
        state.releaseHolds()
        #expect(try await Self.ends(holding, within: .seconds(60)), "the current hold")
        #expect(try await Self.ends(Task { try await state.hold(milliseconds: 600_000) }, within: .seconds(60)), "a hold begun after")
    }

    /// Whether `task` ends before `limit` has passed (it is cancelled otherwise).
    static func ends(_ task: Task<Void, any Error>, within limit: Duration) async throws -> Bool {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask { try await task.value; return true }
            group.addTask { try await Task.sleep(for: limit); return false }
            let first = try await group.next() ?? false
            task.cancel()
            group.cancelAll()
            return first
        }
    }

    @Test("scenario failures are counted per receipt and reset")
    func scenarioFailures() async {
        let state = EmulatorState()
        #expect(await state.consumeScenarioFailure(receiptData: "a", count: 1))
        #expect(await !state.consumeScenarioFailure(receiptData: "a", count: 1))
        #expect(await state.consumeScenarioFailure(receiptData: "b", count: 1))
        #expect(await state.currentStats().failuresInjected == 2)
        #expect(await state.reset() == EmulatorStats())
        #expect(await state.currentStats() == EmulatorStats())
        #expect(await state.consumeScenarioFailure(receiptData: "a", count: 1))
    }

    @Test("a fail rate of 1 fails every call, 0 none")
    func failRate() async {
        let always = EmulatorState(settings: FaultSettings(latencyMs: 0, failRate: 1, failMode: .html, timeoutHoldMs: 0))
        for _ in 0..<100 {
            #expect(await always.admit(.production) == 0)
            #expect(await always.draw().injectedFailure == .html)
            #expect(await always.draw(faults: false).injectedFailure == nil, "the target of an injected redirect")
        }
        let never = EmulatorState()
        for _ in 0..<100 {
            _ = await never.admit(.sandbox)
            #expect(await never.draw().injectedFailure == nil)
        }
        #expect(await never.currentStats() == EmulatorStats(production: 0, sandbox: 100, failuresInjected: 0))
    }
}
