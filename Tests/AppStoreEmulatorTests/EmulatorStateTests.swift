import Testing
@testable import AppStoreEmulator

@Suite("emulator state")
struct EmulatorStateTests {
    @Test("released holds end at once, so a stop signal is not kept waiting")
    func releasedHold() async throws {
        let state = EmulatorState()
        let clock = ContinuousClock()
        let holding = Task { try await state.hold(milliseconds: 60_000) }
        try await Task.sleep(for: .milliseconds(50))
        state.releaseHolds()
        let start = clock.now
        try await holding.value
        #expect(clock.now - start < .seconds(2))
    }

    @Test("scenario failures are counted per receipt and reset")
    func scenarioFailures() async {
        let state = EmulatorState()
        #expect(await state.consumeScenarioFailure(receiptData: "a", count: 1))
        #expect(await !state.consumeScenarioFailure(receiptData: "a", count: 1))
        #expect(await state.consumeScenarioFailure(receiptData: "b", count: 1))
        #expect(await state.currentStats().failuresInjected == 2)
        await state.reset()
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
