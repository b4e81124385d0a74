import Foundation
import Testing
import TestSupport

/// CONTRACT.md: a bad configuration value, from a variable or the flag that overrides it, stops a process
/// at start with one line naming the variable and exit code 2.
@Suite("Start-up configuration")
struct StartupTests {
    @Test(
        "a bad value exits 2 at once with one line naming the variable",
        arguments: [
            ("tollgate-api", ["serve", "--port", "abc"], [:], "TOLLGATE_HTTP_PORT"),
            ("tollgate-api", ["serve"], ["TOLLGATE_HTTP_HOST": "not a host"], "TOLLGATE_HTTP_HOST"),
            ("tollgate-api", ["serve"], ["TOLLGATE_DATABASE_URL": "postgres://tollgate@127.0.0.1:1/tollgate?sslmode=bogus"], "TOLLGATE_DATABASE_URL"),
            ("tollgate-api", ["migrate"], ["TOLLGATE_DATABASE_URL": "postgres://tollgate@127.0.0.1:1/tollgate?no_such_option=1"], "TOLLGATE_DATABASE_URL"),
            ("tollgate-worker", ["--metrics-port", "99999"], [:], "TOLLGATE_METRICS_PORT"),
            ("tollgate-worker", ["--concurrency", "lots"], [:], "TOLLGATE_WORKER_CONCURRENCY"),
        ] as [(String, [String], [String: String], String)]
    )
    func badValueExits2(executable: String, arguments: [String], environment: [String: String], variable: String) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(try TestEnvironment.binDirectory())/\(executable)")
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let stderr = Pipe()
        process.standardError = stderr
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        do {
            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(20), "\(executable) to exit") { process.isRunning ? nil : true }
        } catch {
            // It started instead of refusing the value: stop it, and let the expectations below say so.
            process.terminate()
            process.waitUntilExit()
        }
        let error = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let status = process.terminationStatus
        #expect(status == 2, "\(executable) \(arguments): \(error)")
        let lines = error.split(separator: "\n")
        #expect(lines.count == 1, "one line: \(error)")
        #expect(error.contains(variable))
    }
}
