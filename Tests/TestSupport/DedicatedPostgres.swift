import Foundation
import Shared
import Synchronization

/// A PostgreSQL cluster of a test's own (the shared one must stay up for every other test) that the test
/// can stop and start again on the same port and data: a real outage. Runs as the `postgres` user, as
/// PostgreSQL refuses root.
public final class DedicatedPostgres: Sendable {
    public let port: Int
    private let directory: String
    /// Whether `shutdown()` has stopped the cluster for good.
    private let finished = Mutex(false)
    private static let bin = "/usr/lib/postgresql/15/bin"

    /// Creates, starts and migrates a cluster with a `tollgate` database.
    public init() async throws {
        self.directory = "\(try TestEnvironment.stateDirectory())/pg-\(UUID().uuidString.prefix(8))"
        self.port = try DedicatedRedis.freePort()
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
        let directory = self.directory, port = self.port
        try await offThePool {
            try Self.run("/usr/bin/chown", ["postgres", directory])
            try Self.asPostgres("\(Self.bin)/initdb", ["-D", "\(directory)/data", "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"])
        }
        try await self.start()
        try await offThePool {
            try Self.run("/usr/bin/psql", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "-qc", "CREATE DATABASE tollgate"])
        }
        let database = PostgresClient(url: self.url, connections: 1)
        do {
            try await Migrator(database: database, logger: TestEnvironment.migrationLogger).migrate()
        } catch {
            await database.shutdown()
            throw error
        }
        await database.shutdown()
    }

    /// `postgres://postgres@127.0.0.1:<port>/tollgate`.
    public var url: String { "postgres://postgres@127.0.0.1:\(self.port)/tollgate" }

    /// Starts (or restarts) the cluster and waits until it accepts connections.
    public func start() async throws {
        let directory = self.directory, port = self.port
        do {
            try await offThePool {
                try Self.asPostgres("\(Self.bin)/pg_ctl", [
                    "-D", "\(directory)/data", "-l", "\(directory)/postgres.log", "-w",
                    "-o", "-c listen_addresses=127.0.0.1 -p \(port) -k \(directory) -c fsync=off", "start",
                ])
            }
        } catch {
            let log = (try? String(contentsOfFile: "\(directory)/postgres.log", encoding: .utf8)) ?? ""
            throw ManagedProcess.Failure("\(error); its log ends: \(log.split(separator: "\n").suffix(5).joined(separator: " | "))")
        }
    }

    /// Stops the cluster (fast shutdown: connections are cut, as in an outage).
    public func stop() async throws {
        let directory = self.directory
        try await offThePool { try Self.asPostgres("\(Self.bin)/pg_ctl", ["-D", "\(directory)/data", "-m", "fast", "-w", "stop"]) }
    }

    /// Stops the cluster for good (immediate shutdown), off the cooperative pool: `pg_ctl` blocks its thread.
    public func shutdown() async {
        guard self.finished.withLock({ finished in defer { finished = true }; return !finished }) else { return }
        let directory = self.directory
        _ = try? await offThePool { try Self.asPostgres("\(Self.bin)/pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "stop"]) }
    }

    /// The same stop for a cluster whose test never called `shutdown()` (it threw before its `using`): it blocks
    /// whatever thread drops the last reference, so tests shut down instead.
    deinit {
        guard !self.finished.withLock({ $0 }) else { return }
        try? Self.asPostgres("\(Self.bin)/pg_ctl", ["-D", "\(self.directory)/data", "-m", "immediate", "stop"])
    }

    private static func asPostgres(_ executable: String, _ arguments: [String]) throws {
        try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", executable] + arguments)
    }

    /// Runs a command to completion with posix_spawn and waitpid. Foundation's Process is not used here:
    /// it learns of an exit through a descriptor the child inherits, and `pg_ctl start` leaves the server
    /// it forks holding that descriptor, so Process would wait for the server's exit, forever.
    private static func run(_ executable: String, _ arguments: [String]) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else { throw ManagedProcess.Failure("cannot run \(executable): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        // WIFEXITED && WEXITSTATUS == 0, spelled out: the C macros are not imported.
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            throw ManagedProcess.Failure("\(executable) \(arguments.joined(separator: " ")) failed with status \(status)")
        }
    }
}
