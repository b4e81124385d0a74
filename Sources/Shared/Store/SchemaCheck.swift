import Logging
import Synchronization

/// Whether the database has every migration this build needs (``Migrations/all``), for readiness and
/// before a worker takes jobs.
///
/// A build that runs ahead of its migration (a deploy that rolled the binaries out before
/// `tollgate-api migrate` ran, or a boot where the migration failed) would fail every grant on a missing
/// table or column and burn each job's attempts; instead it reports not ready until the schema is there.
/// A schema ahead of the build is fine: migrations only add; the worker says so in its log once, naming
/// the versions this build does not know. Once found current, the schema is not read again: migrations
/// never go back.
public final class SchemaCheck: Sendable {
    private let database: PostgresClient
    private let required: [Int]
    private let current = Atomic<Bool>(false)
    /// The applied versions this build does not know, as last read.
    private let unknown = Mutex<[Int]>([])

    /// Creates a check for `migrations` (every one this build has, by default).
    public init(database: PostgresClient, migrations: [Migrations.Migration] = Migrations.all) {
        self.database = database
        self.required = migrations.map(\.version).sorted()
    }

    /// The versions this build needs and the database lacks, in order; empty when current.
    public func missing() async throws -> [Int] {
        if self.current.load(ordering: .relaxed) { return [] }
        let applied: Set<Int>
        do {
            applied = Set(try await self.database.query("SELECT version FROM schema_migrations").rows.map { try $0.decode(Int.self, "version") })
        } catch let error as PostgresError where error.sqlState == "42P01" {
            // No migration ever ran here.
            applied = []
        }
        let missing = self.required.filter { !applied.contains($0) }
        let known = Set(self.required)
        self.unknown.withLock { $0 = applied.filter { !known.contains($0) }.sorted() }
        if missing.isEmpty { self.current.store(true, ordering: .relaxed) }
        return missing
    }

    /// What readiness names while the schema is behind or cannot be read (a role without the right to read
    /// `schema_migrations`), or nil when it is current or PostgreSQL is away (the database's own check
    /// reports that).
    public func readinessProblem() async -> String? {
        do {
            let missing = try await self.missing()
            return missing.isEmpty ? nil : "postgresql schema (\(Self.describe(missing)))"
        } catch let error as PostgresError where !error.isUnavailable {
            return "postgresql schema (cannot be read: \(error.sqlState.map { "SQLSTATE \($0)" } ?? error.code.description))"
        } catch {
            return nil
        }
    }

    /// Returns once the schema is current (true), or when the task is cancelled (false). Says in the log
    /// what is missing and what to run, or why PostgreSQL cannot be read (away, or refusing the URL's
    /// credentials or database), at once and then every minute.
    public func waitUntilCurrent(logger: Logger, interval: Duration = .seconds(2)) async -> Bool {
        var lastReport: ContinuousClock.Instant?
        func due() -> Bool { lastReport.map { ContinuousClock.now - $0 >= .seconds(60) } ?? true }
        while !Task.isCancelled {
            do {
                let missing = try await self.missing()
                if missing.isEmpty {
                    if lastReport != nil { logger.info("the database schema is current; starting") }
                    let unknown = self.unknown.withLock { $0 }
                    if !unknown.isEmpty {
                        logger.warning(Self.newerMigrations(unknown))
                    }
                    return true
                }
                if due() {
                    logger.error("waiting for the database schema: \(Self.describe(missing))")
                    lastReport = .now
                }
            } catch {
                // Readiness says so too; try again. A wrong password or database name looks the same from here
                // as a server that is down (libpq gives no SQLSTATE for a refused connection): the text tells.
                if due() {
                    logger.error("cannot read the database schema; retrying", metadata: ["error": "\(LoggableError.describe(error))"])
                    lastReport = .now
                }
            }
            try? await Task.sleep(for: interval)
        }
        return false
    }

    /// What a build says of a database migrated by a newer one: `versions` are the ones it does not know.
    static func newerMigrations(_ versions: [Int]) -> Logger.Message {
        "the database has migrations this build does not know (\(versions.map(String.init).joined(separator: ", "))): a newer build migrated it; run that build, or check its notes before running this one"
    }

    private static func describe(_ missing: [Int]) -> String {
        "migration\(missing.count == 1 ? "" : "s") \(missing.map(String.init).joined(separator: ", ")) not applied: run `tollgate-api migrate`"
    }
}
