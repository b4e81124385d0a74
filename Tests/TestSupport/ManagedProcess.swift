import Foundation

/// A Tollgate executable run as a real child process for end-to-end tests: its output goes to a log file,
/// it reports its port through a port file, and it is stopped (or killed) on demand.
public final class ManagedProcess: @unchecked Sendable {
    // @unchecked Sendable: `process` is configured once in init; Foundation's Process is thread-safe for
    // the calls used afterwards (terminate, processIdentifier, isRunning, waitUntilExit).
    private let process: Process
    /// Where its standard output and error go.
    public let logPath: String
    private let portFile: String

    /// Starts `executable` (a name in `TOLLGATE_TEST_BIN_DIR`, or an absolute path) with `arguments` and extra environment.
    /// `portFileVariable` names the variable through which it writes its bound port (if any).
    public init(executable: String, arguments: [String] = [], environment: [String: String], portFileVariable: String?) throws {
        let directory = try TestEnvironment.stateDirectory()
        let tag = "\(URL(fileURLWithPath: executable).lastPathComponent)-\(UUID().uuidString.prefix(8))"
        self.logPath = "\(directory)/\(tag).log"
        self.portFile = "\(directory)/\(tag).port"
        let process = Process()
        let path = executable.hasPrefix("/") ? executable : "\(try TestEnvironment.binDirectory())/\(executable)"
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        var merged = ProcessInfo.processInfo.environment
        for (key, value) in environment { merged[key] = value }
        if let portFileVariable { merged[portFileVariable] = self.portFile }
        process.environment = merged
        _ = FileManager.default.createFile(atPath: self.logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: self.logPath))
        process.standardOutput = log
        process.standardError = log
        try Self.spawnWithSignalsUnblocked(process)
        self.process = process
    }

    /// Starts `process` from a thread of its own that blocks no signal. A child inherits the signal mask
    /// of the thread that spawns it, and the threads Swift concurrency runs tasks on block nearly every
    /// signal: a `redis-server` started from one never saw SIGTERM, so ``stop()`` waited 30 s and killed
    /// it, without the final AOF write a stop should have.
    private static func spawnWithSignalsUnblocked(_ process: Process) throws {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var outcome: Result<Void, any Error> = .success(())
        let thread = Thread {
            var none = sigset_t()
            sigemptyset(&none)
            pthread_sigmask(SIG_SETMASK, &none, nil)
            outcome = Result { try process.run() }
            done.signal()
        }
        thread.start()
        done.wait()
        try outcome.get()
    }

    /// The process id.
    public var pid: Int32 { self.process.processIdentifier }

    /// Whether it is still running.
    public var isRunning: Bool { self.process.isRunning }

    /// The port it bound, once it wrote its port file (polled until `timeout`).
    public func port(timeout: Duration = .seconds(60)) async throws -> Int {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let text = try? String(contentsOfFile: self.portFile, encoding: .utf8),
                let port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                return port
            }
            guard self.process.isRunning else { throw Failure("exited before listening; log: \(self.logTail())") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw Failure("no port within \(timeout); log: \(self.logTail())")
    }

    /// Sends a signal (`SIGTERM`, `SIGKILL`, …).
    public func signal(_ signal: Int32) {
        kill(self.process.processIdentifier, signal)
    }

    /// Waits for the process to exit (polled until `timeout`) and returns its exit status.
    public func waitForExit(timeout: Duration = .seconds(60)) async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while self.process.isRunning {
            guard ContinuousClock.now < deadline else { throw Failure("still running after \(timeout)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        return self.process.terminationStatus
    }

    /// Stops it with SIGTERM, then SIGKILL if it does not exit in time.
    public func stop() async {
        guard self.process.isRunning else { return }
        self.signal(SIGTERM)
        if (try? await self.waitForExit(timeout: .seconds(30))) == nil {
            self.signal(SIGKILL)
            _ = try? await self.waitForExit(timeout: .seconds(10))
        }
    }

    /// The last lines of its log, for failure messages.
    public func logTail(lines: Int = 30) -> String {
        let text = (try? String(contentsOfFile: self.logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(lines).joined(separator: "\n")
    }

    /// Everything it wrote.
    public func log() -> String {
        (try? String(contentsOfFile: self.logPath, encoding: .utf8)) ?? ""
    }

    deinit {
        if self.process.isRunning { kill(self.process.processIdentifier, SIGKILL) }
    }

    /// A process that did not behave.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }
}
