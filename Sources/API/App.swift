import ArgumentParser
import Foundation
import Logging
import Shared

/// `tollgate-api`: the HTTP API (`serve`) and the schema migrations (`migrate`).
@main
struct App: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tollgate-api",
        abstract: "Tollgate's HTTP API: accepts App Store receipts, answers access status.",
        subcommands: [Serve.self, Migrate.self, Admin.self],
        defaultSubcommand: Serve.self
    )
}

/// Options every subcommand shares: flags override environment variables.
struct CommonOptions: ParsableArguments {
    @Option(help: "PostgreSQL URL (overrides TOLLGATE_DATABASE_URL). A password here shows in the process list and the shell's history: prefer the variable.")
    var databaseURL: String?

    /// The process environment with flags applied.
    func environment(_ overrides: [String: String?] = [:]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        if let databaseURL { environment["TOLLGATE_DATABASE_URL"] = databaseURL }
        for case let (key, value?) in overrides { environment[key] = value }
        return environment
    }
}

/// Loads the configuration, or prints the one-line error and exits with code 2 (CONTRACT.md).
func loadConfiguration(_ environment: [String: String], portFileVariable: String = "TOLLGATE_HTTP_PORT_FILE") throws -> Configuration {
    do {
        return try Configuration(environment: environment, portFileVariable: portFileVariable)
    } catch let error as ConfigurationError {
        error.report(as: "tollgate-api")
        throw ExitCode(2)
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the HTTP API.")

    @OptionGroup var common: CommonOptions
    @Option(help: "Listen address (overrides TOLLGATE_HTTP_HOST).") var host: String?
    // Read as text and checked with the variable it overrides: a bad value is one line and exit 2 (CONTRACT.md).
    @Option(help: "Listen port (overrides TOLLGATE_HTTP_PORT).") var port: String?

    func run() async throws {
        let configuration = try loadConfiguration(common.environment([
            "TOLLGATE_HTTP_HOST": host, "TOLLGATE_HTTP_PORT": port,
        ]))
        LoggingSetup.bootstrap(format: configuration.logFormat, level: configuration.logLevel)
        let logger = Logger(label: "tollgate.api")
        for warning in configuration.warnings { logger.warning("\(warning)") }
        let application = try await buildApplication(configuration: configuration, logger: logger)
        do {
            try await application.run()
        } catch {
            // Found once a dependency answered (Redis refused the URL's credentials or database), or the
            // listen address is not one this machine can take.
            guard let refused = error as? ConfigurationError ?? ConfigurationError.refusedListen(
                error, host: configuration.httpHost, port: configuration.httpPort, hostVariable: "TOLLGATE_HTTP_HOST", portVariable: "TOLLGATE_HTTP_PORT"
            ) else { throw error }
            logger.error("stopping: a configuration value was refused", metadata: ["error": "\(refused)"])
            refused.report(as: "tollgate-api")
            throw ExitCode(2)
        }
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply the SQL migrations (idempotent; safe from two processes at once).")

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let configuration = try loadConfiguration(common.environment())
        LoggingSetup.bootstrap(format: configuration.logFormat, level: configuration.logLevel)
        let logger = Logger(label: "tollgate.migrate")
        let database = PostgresClient(url: configuration.databaseURL, connections: 1)
        do {
            let applied = try await Migrator(database: database, logger: logger).migrate()
            await database.shutdown()
            print(applied.isEmpty ? "schema is up to date" : "applied migrations \(applied.map(String.init).joined(separator: ", "))")
        } catch {
            await database.shutdown()
            FileHandle.standardError.write(Data("tollgate-api migrate: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}
