import Logging

/// Applies ``Migrations`` under a PostgreSQL advisory lock, each in its own transaction, recording each
/// in `schema_migrations`: running it twice, or from two processes at once, applies each migration once.
public struct Migrator: Sendable {
    private let database: PostgresClient
    private let logger: Logger
    /// An arbitrary constant naming Tollgate's migration lock.
    private static let lockKey = 7_307_110_020_026

    /// Creates a migrator.
    public init(database: PostgresClient, logger: Logger) {
        self.database = database
        self.logger = logger
    }

    /// Applies what is missing; returns the versions applied by this call.
    @discardableResult
    public func migrate(_ migrations: [Migrations.Migration] = Migrations.all) async throws -> [Int] {
        try await self.database.withConnection { session in
            // No statement timeout here: a migration may rewrite a large table, and a second process waits
            // for the lock as long as the first one migrates.
            try await session.withoutStatementTimeout {
                try await session.query("SELECT pg_advisory_lock($1)", [Self.lockKey])
                do {
                    let applied = try await Self.apply(migrations, session: session, logger: self.logger)
                    try await session.query("SELECT pg_advisory_unlock($1)", [Self.lockKey])
                    return applied
                } catch {
                    _ = try? await session.query("SELECT pg_advisory_unlock($1)", [Self.lockKey])
                    throw error
                }
            }
        }
    }

    private static func apply(_ migrations: [Migrations.Migration], session: PostgresSession, logger: Logger) async throws -> [Int] {
        try await session.query("""
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version    integer PRIMARY KEY,
                name       text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """)
        let done = Set(try await session.query("SELECT version FROM schema_migrations").rows.map { try $0.decode(Int.self, "version") })
        var applied: [Int] = []
        for migration in migrations.sorted(by: { $0.version < $1.version }) where !done.contains(migration.version) {
            logger.info("applying migration", metadata: ["version": "\(migration.version)", "name": "\(migration.name)"])
            try await session.query("BEGIN")
            do {
                try await session.runScript(migration.sql)
                try await session.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [migration.version, migration.name])
                try await session.query("COMMIT")
            } catch {
                await session.rollback()
                throw error
            }
            applied.append(migration.version)
        }
        return applied
    }
}
