import ArgumentParser
import Foundation
import Hummingbird
import ServiceLifecycle
import Synchronization

/// `appstore-emulator`: a fake of Apple's verifyReceipt for local runs, tests and benchmarks.
///
/// Every option falls back to its `APPSTORE_EMULATOR_*` variable; see `docs/emulator.md`.
@main
struct AppStoreEmulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "appstore-emulator",
        abstract: "A fake of Apple's verifyReceipt (production and sandbox) with fault injection."
    )

    @Option(help: "Interface to bind (APPSTORE_EMULATOR_HOST, default 127.0.0.1).")
    var host: String?

    @Option(help: "Port to bind, 0 for any free port (APPSTORE_EMULATOR_PORT, default 9090).")
    var port: String?

    @Option(help: "File that receives the bound port once listening (APPSTORE_EMULATOR_PORT_FILE).")
    var portFile: String?

    @Option(help: "Delay before every verifyReceipt answer, ms (APPSTORE_EMULATOR_LATENCY_MS, default 0).")
    var latencyMs: String?

    @Option(help: "Share of calls, 0...1, answered with the fail mode (APPSTORE_EMULATOR_FAIL_RATE, default 0).")
    var failRate: String?

    @Option(help: "How injected failures answer: \(FailMode.acceptedValues) (APPSTORE_EMULATOR_FAIL_MODE, default http503).")
    var failMode: String?

    @Option(help: "How long the timeout mode holds a request, ms (APPSTORE_EMULATOR_TIMEOUT_HOLD_MS, default 30000).")
    var timeoutHoldMs: String?

    @Option(help: "Log level (APPSTORE_EMULATOR_LOG_LEVEL, default info).")
    var logLevel: String?

    func run() async throws {
        let overrides = EmulatorConfiguration.Overrides(
            host: host, port: port, portFile: portFile, latencyMs: latencyMs, failRate: failRate,
            failMode: failMode, timeoutHoldMs: timeoutHoldMs, logLevel: logLevel
        )
        let configuration: EmulatorConfiguration
        do throws(ConfigurationError) {
            configuration = try EmulatorConfiguration.resolve(environment: ProcessInfo.processInfo.environment, overrides: overrides)
            if let portFile = configuration.portFile, !PortFileWriter.canWrite(to: portFile) {
                throw ConfigurationError(
                    variable: "APPSTORE_EMULATOR_PORT_FILE", flag: "--port-file", value: portFile,
                    expected: "a file path (not a directory) in an existing, writable directory"
                )
            }
        } catch {
            ConsoleOutput.standardError(error.line)
            throw ExitCode(ConfigurationError.exitCode)
        }
        let state = EmulatorState(settings: configuration.faults)
        let watcher = StopSignalWatcher(releasing: state)
        let listening = Atomic<Bool>(false)
        let application = buildApplication(configuration, state: state) { listening.store(true, ordering: .relaxed) }
        var group = ServiceGroupConfiguration(services: [application], gracefulShutdownSignals: [.sigterm, .sigint], logger: application.logger)
        // A client that sent half a request, or stopped reading an answer, must not hold the stop for good.
        group.maximumGracefulShutdownDuration = Self.shutdownGrace
        do {
            try await ServiceGroup(configuration: group).run()
        } catch where !listening.load(ordering: .relaxed) {
            // The address cannot be bound (a host that does not resolve, a port in use or privileged): a
            // configuration error, one line and exit code 2, as for a value refused at start.
            ConsoleOutput.standardError(
                "appstore-emulator: cannot listen on \(configuration.host):\(configuration.port) (APPSTORE_EMULATOR_HOST, APPSTORE_EMULATOR_PORT): \(error)"
            )
            throw ExitCode(ConfigurationError.exitCode)
        }
        withExtendedLifetime(watcher) {}
    }

    /// How long a stop waits for requests in progress before it closes their connections.
    static let shutdownGrace = Duration.seconds(10)
}
