import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
@testable import AppStoreEmulator

@Suite("emulator control routes and global fault injection")
struct ControlRouteTests {
    @Test("GET /health answers ok")
    func health() async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            let response = try await client.execute(uri: "/health", method: .get)
            #expect(response.status == .ok)
            #expect(String(buffer: response.body) == "ok")
        }
    }

    @Test("stats count calls per route; reset zeroes them")
    func stats() async throws {
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario())
        try await Fixtures.makeApplication().test(.router) { client in
            _ = try await client.verify(receipt)
            _ = try await client.verify(receipt)
            _ = try await client.verify(receipt, sandbox: true)
            let stats = try Fixtures.object(try await client.execute(uri: "/emulator/stats", method: .get).body)
            #expect(stats["production"] as? Int == 2)
            #expect(stats["sandbox"] as? Int == 1)
            #expect(stats["failuresInjected"] as? Int == 0)

            let reset = try await client.execute(uri: "/emulator/reset", method: .post)
            #expect(reset.status == .ok)
            let zeroed = try Fixtures.object(try await client.execute(uri: "/emulator/stats", method: .get).body)
            #expect(zeroed["production"] as? Int == 0)
            #expect(zeroed["sandbox"] as? Int == 0)
        }
    }

    @Test("POST /emulator/config changes the faults at runtime and answers the whole config")
    func runtimeConfig() async throws {
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario())
        try await Fixtures.makeApplication().test(.router) { client in
            let changed = try await client.execute(
                uri: "/emulator/config", method: .post,
                body: ByteBuffer(string: #"{"failRate":1,"failMode":"http429"}"#)
            )
            #expect(changed.status == .ok)
            let config = try Fixtures.object(changed.body)
            #expect(config["failRate"] as? Double == 1)
            #expect(config["failMode"] as? String == "http429")
            #expect(config["latencyMs"] as? Int == 0)
            #expect(config["timeoutHoldMs"] as? Int == 30_000)

            let failed = try await client.verify(receipt)
            #expect(failed.status == .tooManyRequests)
            #expect(failed.headers[.retryAfter] == "1")

            _ = try await client.execute(uri: "/emulator/config", method: .post, body: ByteBuffer(string: #"{"failRate":0}"#))
            #expect(try Fixtures.object(try await client.verify(receipt).body)["status"] as? Int == 0)

            let stats = try Fixtures.object(try await client.execute(uri: "/emulator/stats", method: .get).body)
            #expect(stats["failuresInjected"] as? Int == 1)
            #expect(stats["production"] as? Int == 2)

            let current = try Fixtures.object(try await client.execute(uri: "/emulator/config", method: .get).body)
            #expect(current["failMode"] as? String == "http429")
            #expect(current["failRate"] as? Double == 0)
        }
    }

    @Test("a refused config value answers 400 naming the field and changes nothing", arguments: [
        (#"{"failRate":1.5}"#, "failRate"),
        (#"{"failMode":"explode"}"#, "failMode"),
        (#"{"latencyMs":-1}"#, "latencyMs"),
        (#"{"failRate":1,"timeoutHoldMs":-5}"#, "timeoutHoldMs"),
        (#"{"failrate":1}"#, "failrate"),
        (#"{"failRate":1,"mode":"html"}"#, "mode"),
        // Of the wrong type, or too large for its type.
        (#"{"failRate":"lots"}"#, "failRate"),
        (#"{"latencyMs":99999999999999999999}"#, "latencyMs"),
        (#"{"timeoutHoldMs":1.5}"#, "timeoutHoldMs"),
        (#"{"failMode":5}"#, "failMode"),
    ])
    func refusedConfig(body: String, field: String) async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            let response = try await client.execute(uri: "/emulator/config", method: .post, body: ByteBuffer(string: body))
            #expect(response.status == .badRequest)
            let error = try Fixtures.object(response.body)
            #expect(error["field"] as? String == field)
            #expect(error["code"] as? String == "invalid_field")
            #expect(error["message"] is String)
            let current = try Fixtures.object(try await client.execute(uri: "/emulator/config", method: .get).body)
            #expect(current["failRate"] as? Double == 0)
        }
    }

    @Test("malformed config JSON answers 400 malformed_json")
    func malformedConfig() async throws {
        try await Fixtures.makeApplication().test(.router) { client in
            for body in [#"{"failRate":"#, "[1]", #""text""#] {
                let response = try await client.execute(uri: "/emulator/config", method: .post, body: ByteBuffer(string: body))
                #expect(response.status == .badRequest)
                #expect(try Fixtures.object(response.body)["code"] as? String == "malformed_json", "\(body)")
            }
        }
    }

    @Test("each global fail mode answers as documented")
    func failModes() async throws {
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario())
        try await Fixtures.makeApplication(faults: FaultSettings(latencyMs: 0, failRate: 1, failMode: .http503, timeoutHoldMs: 20))
            .test(.router) { client in
                func setMode(_ mode: FailMode) async throws {
                    _ = try await client.execute(uri: "/emulator/config", method: .post, body: ByteBuffer(string: #"{"failMode":"\#(mode.rawValue)"}"#))
                }
                #expect(try await client.verify(receipt).status == .serviceUnavailable)

                try await setMode(.http500)
                #expect(try await client.verify(receipt).status == .internalServerError)

                try await setMode(.timeout)
                let clock = ContinuousClock()
                let start = clock.now
                #expect(try await client.verify(receipt).status == .gatewayTimeout)
                #expect(clock.now - start >= .milliseconds(20))

                // The answer's head comes first; its body ends, as 21005, once the hold is over.
                for mode in [FailMode.stall, .trickle] {
                    try await setMode(mode)
                    let start = clock.now
                    let slow = try await client.verify(receipt)
                    #expect(clock.now - start >= .milliseconds(20))
                    #expect(slow.status == .ok)
                    let text = String(buffer: slow.body)
                    #expect(text.hasPrefix(#"{"status":"#) && text.hasSuffix("21005}"), "\(mode): \(text)")
                    #expect(text.contains(" ") == (mode == .trickle), "\(mode): \(text)")
                    #expect(try Fixtures.object(slow.body)["status"] as? Int == 21005)
                }

                try await setMode(.redirect)
                let redirect = try await client.verify(receipt)
                #expect(redirect.status == .temporaryRedirect)
                #expect(redirect.headers[.location] == "/verifyReceipt?moved=1")

                try await setMode(.html)
                let html = try await client.verify(receipt)
                #expect(html.status == .ok)
                #expect(String(buffer: html.body).hasPrefix("<!DOCTYPE html>"))

                try await setMode(.empty)
                let empty = try await client.verify(receipt)
                #expect(empty.status == .ok)
                #expect(empty.body.readableBytes == 0)

                try await setMode(.truncated)
                let truncated = try await client.verify(receipt)
                #expect(truncated.status == .ok)
                #expect(String(buffer: truncated.body).hasPrefix(#"{"status":0"#))
                #expect((try? JSONSerialization.jsonObject(with: Data(truncated.body.readableBytesView))) == nil)

                try await setMode(.status21005)
                #expect(try Fixtures.object(try await client.verify(receipt).body)["status"] as? Int == 21005)

                try await setMode(.status21010)
                #expect(try Fixtures.object(try await client.verify(receipt).body)["status"] as? Int == 21010)

                try await setMode(.status21199)
                let internalError = try Fixtures.object(try await client.verify(receipt).body)
                #expect(internalError["status"] as? Int == 21199)
                #expect(internalError["is-retryable"] as? Bool == true)

                let stats = try Fixtures.object(try await client.execute(uri: "/emulator/stats", method: .get).body)
                #expect(stats["failuresInjected"] as? Int == 12)
            }
    }

    @Test("an injected redirect's target answers normally, global and scripted faults alike; requests failed by a fault are counted as sent")
    func redirectTarget() async throws {
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario())
        let scripted = Fixtures.receiptData(Fixtures.simpleScenario(extra: #","fail":{"count":2,"mode":"redirect"}"#))
        try await Fixtures.makeApplication(faults: FaultSettings(latencyMs: 0, failRate: 1, failMode: .redirect, timeoutHoldMs: 0))
            .test(.router) { client in
                func post(_ uri: String, _ receiptData: String) async throws -> TestResponse {
                    try await client.execute(
                        uri: uri, method: .post, headers: [.contentType: "application/json"],
                        body: try Fixtures.requestBody(receiptData: receiptData, password: "secret", excludeOldTransactions: nil)
                    )
                }
                let moved = try await post("/verifyReceipt", receipt)
                #expect(moved.status == .temporaryRedirect)
                let location = try #require(moved.headers[.location])
                let followed = try await post(location, receipt)
                #expect(followed.status == .ok, "a fail rate of 1 must not redirect the redirect's target again")
                #expect(try Fixtures.object(followed.body)["status"] as? Int == 0)

                _ = try await client.execute(uri: "/emulator/config", method: .post, body: ByteBuffer(string: #"{"failRate":0}"#))
                #expect(try await post("/verifyReceipt", scripted).status == .temporaryRedirect)
                #expect(try await post(location, scripted).status == .ok, "the target does not use up the scenario's second failure")
                #expect(try await post("/verifyReceipt", scripted).status == .temporaryRedirect, "the second scripted failure")
                #expect(try await post("/verifyReceipt", scripted).status == .ok)

                let stats = try Fixtures.object(try await client.execute(uri: "/emulator/stats", method: .get).body)
                #expect(stats["production"] as? Int == 6)
                #expect(stats["withPassword"] as? Int == 6, "every request carried a password, those answered by a fault too")
                #expect(stats["failuresInjected"] as? Int == 3)
            }
    }

    @Test("global and scenario latency delay the answer")
    func latency() async throws {
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario(extra: #","latencyMs":30"#))
        try await Fixtures.makeApplication(faults: FaultSettings(latencyMs: 20, failRate: 0, failMode: .http503, timeoutHoldMs: 0))
            .test(.router) { client in
                let clock = ContinuousClock()
                let start = clock.now
                let answer = try Fixtures.object(try await client.verify(receipt).body)
                let elapsed = clock.now - start
                #expect(answer["status"] as? Int == 0)
                #expect(elapsed >= .milliseconds(50))
            }
    }

    /// Waits until `state` has counted a call: it is in, and delayed (20 s at most).
    private static func untilCalled(_ state: EmulatorState) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while await state.currentStats().production == 0 {
            try #require(ContinuousClock.now < deadline, "the call never arrived")
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test("global latency lowered at runtime applies to the calls it finds waiting: set to 0, they answer without waiting it out", .timeLimit(.minutes(1)))
    func latencyLowered() async throws {
        let state = EmulatorState(settings: FaultSettings(latencyMs: 3_600_000, failRate: 0, failMode: .http503, timeoutHoldMs: 0))
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario())
        try await buildApplication(EmulatorConfiguration(), state: state).test(.router) { client in
            async let answer = client.verify(receipt)
            try await Self.untilCalled(state)
            let lowered = try await client.execute(uri: "/emulator/config", method: .post, body: ByteBuffer(string: #"{"latencyMs":0}"#))
            #expect(lowered.status == .ok)
            let body = try Fixtures.object(try await answer.body)
            #expect(body["status"] as? Int == 0)
            #expect(!state.holdsAreReleased, "lowered, not released by a stop")
        }
    }

    @Test("a stop signal cuts global and scenario latency short: the calls in flight answer without waiting it out", arguments: [(60_000, 0), (0, 60_000)])
    func latencyReleased(global: Int, scenario: Int) async throws {
        let state = EmulatorState(settings: FaultSettings(latencyMs: global, failRate: 0, failMode: .http503, timeoutHoldMs: 0))
        let receipt = Fixtures.receiptData(Fixtures.simpleScenario(extra: #","latencyMs":\#(scenario)"#))
        try await buildApplication(EmulatorConfiguration(), state: state).test(.router) { client in
            async let answer = client.verify(receipt)
            // The call is in: counted, then delayed (a scenario's latency comes once its receipt is read).
            try await Self.untilCalled(state)
            state.releaseHolds()
            let released = ContinuousClock.now
            let body = try Fixtures.object(try await answer.body)
            #expect(body["status"] as? Int == 0)
            // A minute's latency: half of it is room for a loaded machine, not a timing bet.
            #expect(ContinuousClock.now - released < .seconds(30))
        }
    }
}
