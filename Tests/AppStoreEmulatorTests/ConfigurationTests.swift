import Testing
@testable import AppStoreEmulator

@Suite("configuration from environment and flags")
struct ConfigurationTests {
    @Test("defaults")
    func defaults() throws {
        let configuration = try EmulatorConfiguration.resolve(environment: [:])
        #expect(configuration.host == "127.0.0.1")
        #expect(configuration.port == 9090)
        #expect(configuration.portFile == nil)
        #expect(configuration.faults == FaultSettings(latencyMs: 0, failRate: 0, failMode: .http503, timeoutHoldMs: 30_000))
    }

    @Test("environment variables are read and flags override them")
    func environmentAndFlags() throws {
        let environment = [
            "APPSTORE_EMULATOR_HOST": "0.0.0.0",
            "APPSTORE_EMULATOR_PORT": "0",
            "APPSTORE_EMULATOR_PORT_FILE": "/tmp/emulator.port",
            "APPSTORE_EMULATOR_LATENCY_MS": "15",
            "APPSTORE_EMULATOR_FAIL_RATE": "0.25",
            "APPSTORE_EMULATOR_FAIL_MODE": "timeout",
            "APPSTORE_EMULATOR_TIMEOUT_HOLD_MS": "1000",
        ]
        let fromEnvironment = try EmulatorConfiguration.resolve(environment: environment)
        #expect(fromEnvironment.host == "0.0.0.0")
        #expect(fromEnvironment.port == 0)
        #expect(fromEnvironment.portFile == "/tmp/emulator.port")
        #expect(fromEnvironment.faults == FaultSettings(latencyMs: 15, failRate: 0.25, failMode: .timeout, timeoutHoldMs: 1000))

        var overrides = EmulatorConfiguration.Overrides()
        overrides.port = "9191"
        overrides.failMode = "html"
        let overridden = try EmulatorConfiguration.resolve(environment: environment, overrides: overrides)
        #expect(overridden.port == 9191)
        #expect(overridden.faults.failMode == .html)
        #expect(overridden.faults.latencyMs == 15)
    }

    @Test("a bad value is one line naming the variable, with exit code 2", arguments: [
        ("APPSTORE_EMULATOR_PORT", "http"),
        ("APPSTORE_EMULATOR_PORT", "70000"),
        ("APPSTORE_EMULATOR_HOST", ""),
        ("APPSTORE_EMULATOR_LATENCY_MS", "-1"),
        ("APPSTORE_EMULATOR_FAIL_RATE", "2"),
        ("APPSTORE_EMULATOR_FAIL_RATE", "nan"),
        ("APPSTORE_EMULATOR_FAIL_MODE", "http418"),
        ("APPSTORE_EMULATOR_TIMEOUT_HOLD_MS", "soon"),
        ("APPSTORE_EMULATOR_PORT_FILE", ""),
    ])
    func badEnvironmentValue(variable: String, value: String) throws {
        let error = #expect(throws: ConfigurationError.self) {
            try EmulatorConfiguration.resolve(environment: [variable: value])
        }
        #expect(error?.variable == variable)
        #expect(error?.line.contains(variable) == true)
        #expect(error?.line.contains("\n") == false)
        #expect(ConfigurationError.exitCode == 2)
    }

    @Test("a bad flag names the variable it overrides")
    func badFlag() throws {
        var overrides = EmulatorConfiguration.Overrides()
        overrides.failRate = "often"
        let error = #expect(throws: ConfigurationError.self) {
            try EmulatorConfiguration.resolve(environment: ["APPSTORE_EMULATOR_FAIL_RATE": "0.5"], overrides: overrides)
        }
        #expect(error?.variable == "APPSTORE_EMULATOR_FAIL_RATE")
        #expect(error?.line == "appstore-emulator: invalid APPSTORE_EMULATOR_FAIL_RATE (--fail-rate) value 'often': expected a number from 0 to 1")
    }

    @Test("the command turns a bad value into exit code 2", .timeLimit(.minutes(1)))
    func commandExitCode() async throws {
        // A bad value accepted would start a server here: the time limit fails the test instead of hanging it.
        let command = try AppStoreEmulatorCommand.parse(["--port", "nope"])
        let error = await #expect(throws: (any Error).self) { try await command.run() }
        #expect(error.map { AppStoreEmulatorCommand.exitCode(for: $0).rawValue } == 2)
    }
}
