import Logging

/// Applies ``Migrations`` under a PostgreSQL advisory lock, each in its own transaction, recording each
/// in `schema_migrations`: running it twice, or from two processes at once, applies each migration once.
///
/// A migration waits at most `lockTimeoutMilliseconds` for each table lock it takes (`lock_timeout`), then
/// gives its locks back and tries again after a pause (as long again, doubling up to 10 s), for up to
/// `lockPatience`; so does one that PostgreSQL picks as a deadlock's victim. A live system's grants and
/// reads queue behind a lock the migration waits for, so waiting for good behind one long transaction (a
/// forgotten `psql` session) would stall them all.
public struct Migrator: Sendable {
    private let database: PostgresClient
    private let logger: Logger
    private let lockTimeoutMilliseconds: Int
    private let lockPatience: Duration
    /// An arbitrary constant naming Tollgate's migration lock.
    static let lockKey = 7_307_110_020_026

    /// Creates a migrator.
    public init(database: PostgresClient, logger: Logger, lockTimeoutMilliseconds: Int = 5000, lockPatience: Duration = .seconds(600)) {
        self.database = database
        self.logger = logger
        self.lockTimeoutMilliseconds = max(1, lockTimeoutMilliseconds)
        self.lockPatience = lockPatience
    }

    /// Applies what is missing; returns the versions applied by this call.
    @discardableResult
    public func migrate(_ migrations: [Migrations.Migration] = Migrations.all) async throws -> [Int] {
        try await self.database.withConnection { session in
            // No statement timeout here: a migration may rewrite a large table, and a second process waits
            // for the lock as long as the first one migrates, whatever lock_timeout the URL or the role sets
            // (the advisory lock obeys it); the session's own setting is back once the lock is held.
            try await session.withoutStatementTimeout {
                try await session.query("SET lock_timeout = 0")
                try await session.query("SELECT pg_advisory_lock($1)", [Self.lockKey])
                try await session.query("RESET lock_timeout")
                do {
                    let applied = try await self.apply(migrations, session: session)
                    try await session.query("SELECT pg_advisory_unlock($1)", [Self.lockKey])
                    return applied
                } catch {
                    _ = try? await session.query("SELECT pg_advisory_unlock($1)", [Self.lockKey])
                    throw error
                }
            }
        }
    }

    private func apply(_ migrations: [Migrations.Migration], session: PostgresSession) async throws -> [Int] {
        try await session.query("""
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version    integer PRIMARY KEY,
                name       text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """)
        let done = Set(try await session.query("SELECT version FROM schema_migrations").rows.map { try $0.decode(Int.self, "version") })
        // An older build run against a newer build's database (a rollback) has nothing to apply, and says why.
        let newer = done.subtracting(migrations.map(\.version)).sorted()
        if !newer.isEmpty { self.logger.warning(SchemaCheck.newerMigrations(newer)) }
        var applied: [Int] = []
        for migration in migrations.sorted(by: { $0.version < $1.version }) where !done.contains(migration.version) {
            self.logger.info("applying migration", metadata: ["version": "\(migration.version)", "name": "\(migration.name)"])
            let started = ContinuousClock.now
            var pause = self.lockTimeoutMilliseconds
            while true {
                try await session.query("BEGIN")
                do {
                    try await session.query("SET LOCAL lock_timeout = \(self.lockTimeoutMilliseconds)")
                    try await session.runScript(migration.sql)
                    try await session.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [migration.version, migration.name])
                    try await session.query("COMMIT")
                    break
                } catch let error as PostgresError
                    where ["55P03", "40P01"].contains(error.sqlState) && ContinuousClock.now - started + .milliseconds(pause) < self.lockPatience
                {
                    await session.rollback()
                    self.logger.warning(
                        error.sqlState == "40P01"
                            ? "migration deadlocked with another session and gave its locks back; trying again"
                            : "migration waits for a lock another session holds (a long transaction?); trying again",
                        metadata: [
                            "version": "\(migration.version)", "retry_in_ms": "\(pause)",
                        ]
                    )
                    try await Task.sleep(for: .milliseconds(pause))
                    pause = min(pause * 2, max(10_000, self.lockTimeoutMilliseconds))
                } catch {
                    await session.rollback()
                    throw error
                }
            }
            applied.append(migration.version)
        }
        return applied
    }
}
