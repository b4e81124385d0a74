import ArgumentParser
import Foundation
import Logging
import Shared

/// `tollgate-worker`: verifies queued receipts with Apple and grants in PostgreSQL. Run as many as you like.
@main
struct Worker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tollgate-worker",
        abstract: "Consumes the receipt queue, verifies with Apple, grants entitlements exactly once."
    )

    // Numbers are read as text and checked with the variable they override: a bad value is one line and
    // exit 2 (CONTRACT.md), not the argument parser's usage text.
    @Option(help: "Verifications in flight (overrides TOLLGATE_WORKER_CONCURRENCY).") var concurrency: String?
    @Option(help: "Consumer name in the stream's group (overrides TOLLGATE_WORKER_NAME).") var name: String?
    @Option(help: "Port for /metrics and health (overrides TOLLGATE_METRICS_PORT).") var metricsPort: String?

    func run() async throws {
        var environment = ProcessInfo.processInfo.environment
        if let concurrency { environment["TOLLGATE_WORKER_CONCURRENCY"] = concurrency }
        if let name { environment["TOLLGATE_WORKER_NAME"] = name }
        if let metricsPort { environment["TOLLGATE_METRICS_PORT"] = metricsPort }
        let configuration: Configuration
        do {
            configuration = try Configuration(environment: environment, portFileVariable: "TOLLGATE_METRICS_PORT_FILE")
        } catch let error as ConfigurationError {
            error.report(as: "tollgate-worker")
            throw ExitCode(2)
        }
        LoggingSetup.bootstrap(format: configuration.logFormat, level: configuration.logLevel)
        var logger = Logger(label: "tollgate.worker")
        logger[metadataKey: "worker"] = "\(configuration.workerName)"
        for warning in configuration.warnings { logger.warning("\(warning)") }
        try await runWorker(configuration: configuration, logger: logger)
    }
}
