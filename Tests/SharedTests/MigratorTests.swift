import Foundation
import Logging
import Testing
import TestSupport
@testable import Shared

@Suite("Migrator")
struct MigratorTests {
    static let logger = Logger(label: "test.migrator")

    static func versions(_ client: PostgresClient) async throws -> [Int] {
        try await client.query("SELECT version FROM schema_migrations ORDER BY version").rows.map { try $0.decode(Int.self, "version") }
    }

    @Test("migrating an already-migrated database applies nothing and changes nothing")
    func idempotent() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            let before = try await Self.versions(client)
            #expect(before == Migrations.all.map(\.version).sorted())
            let applied = try await Migrator(database: client, logger: Self.logger).migrate()
            #expect(applied.isEmpty)
            #expect(try await Self.versions(client) == before)
        }
    }

    @Test("an older build migrating a newer build's database applies nothing and warns once, naming the versions it does not know")
    func newerDatabase() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("INSERT INTO schema_migrations (version, name) VALUES (9999, 'next'), (10000, 'after')")
            let lines = CapturedLines()
            let applied = try await Migrator(database: client, logger: Logger(label: "test.migrator") { _ in lines }).migrate()
            #expect(applied.isEmpty)
            #expect(lines.lines == [
                "the database has migrations this build does not know (9999, 10000): a newer build migrated it; run that build, or check its notes before running this one",
            ])
            #expect(try await Self.versions(client) == Migrations.all.map(\.version).sorted() + [9999, 10000])
            // A database this build knows whole: nothing said.
            try await client.query("DELETE FROM schema_migrations WHERE version >= 9999")
            try await Migrator(database: client, logger: Logger(label: "test.migrator") { _ in lines }).migrate()
            #expect(lines.lines.count == 1)
        }
    }

    @Test("two migrators started together on a new empty database both succeed and apply each version once")
    func concurrentMigrators() async throws {
        let url = try await TestDatabase.createEmpty()
        let first = PostgresClient(url: url, connections: 1)
        let second = PostgresClient(url: url, connections: 1)
        try await TestEnvironment.using(first, second) {
            // Nothing there yet.
            let tables = try await first.query("SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'").first?.decode(Int.self, "n")
            #expect(tables == 0)

            async let a = Migrator(database: first, logger: Self.logger).migrate()
            async let b = Migrator(database: second, logger: Self.logger).migrate()
            let (appliedA, appliedB) = try await (a, b)

            let all = Migrations.all.map(\.version).sorted()
            #expect((appliedA + appliedB).sorted() == all, "each version applied by exactly one of them")
            #expect(Set(appliedA).isDisjoint(with: appliedB))
            let rows = try await first.query("SELECT version, count(*) OVER (PARTITION BY version)::int AS copies FROM schema_migrations")
            #expect(rows.rows.count == all.count)
            #expect(try rows.rows.allSatisfy { try $0.decode(Int.self, "copies") == 1 })
            #expect(try await Self.versions(second) == all)
            // The schema is really there.
            #expect(try await first.query("SELECT to_regclass('public.transactions') IS NOT NULL AS present").first?.decode(Bool.self, "present") == true)
            // And a third run applies nothing.
            #expect(try await Migrator(database: second, logger: Self.logger).migrate().isEmpty)
        }
    }

    @Test("catalog rows are permanent: deleting, truncating or renumbering a publisher, app or product is refused; disabling is not")
    func catalogRowsArePermanent() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("""
                INSERT INTO publishers (id, name, token_hash, basic_username, basic_password_hash)
                    VALUES ('00000000-0000-0000-0000-00000000000a', 'p', '\\x01', 'permanent', '\\x02');
                """)
            try await client.query("""
                INSERT INTO apps (id, publisher_id, bundle_id)
                    VALUES ('00000000-0000-0000-0000-00000000000b', '00000000-0000-0000-0000-00000000000a', 'com.example.permanent')
                """)
            try await client.query("""
                INSERT INTO products (id, publisher_id, app_id, product_id, offer_id, kind, title)
                    VALUES ('00000000-0000-0000-0000-00000000000c', '00000000-0000-0000-0000-00000000000a',
                            '00000000-0000-0000-0000-00000000000b', 'com.example.permanent.p', 'PERMANENT', 'non_consumable', 't')
                """)
            for table in ["products", "apps", "publishers"] {
                for statement in ["DELETE FROM \(table)", "TRUNCATE \(table) CASCADE", "UPDATE \(table) SET id = gen_random_uuid()"] {
                    let error = await #expect(throws: PostgresError.self, "\(statement)") { try await client.query(statement) }
                    #expect(error?.sqlState == "23001", "\(statement): \(String(describing: error))")
                    #expect(error?.message.contains("never deleted or renumbered") == true)
                }
                let count = try await client.query("SELECT count(*)::int AS n FROM \(table)").first?.decode(Int.self, "n")
                #expect(count == 1, "\(table) kept its row")
            }
            try await client.query("UPDATE products SET enabled = false")
            try await client.query("UPDATE publishers SET enabled = false, name = 'renamed'")
        }
    }

    @Test("migrations have increasing, unique versions")
    func versionsAreUnique() {
        let versions = Migrations.all.map(\.version)
        #expect(versions == versions.sorted())
        #expect(Set(versions).count == versions.count)
    }

    @Test("a failing migration rolls back and leaves its version unrecorded")
    func failingMigrationRollsBack() async throws {
        try await TestDatabase.withFresh(connections: 1) { (client: PostgresClient, _: String) async throws in
            let broken = Migrations.Migration(version: 9_999, name: "broken", sql: "CREATE TABLE half_done (id int); SELECT * FROM no_such_table;")
            await #expect(throws: PostgresError.self) {
                try await Migrator(database: client, logger: Self.logger).migrate(Migrations.all + [broken])
            }
            #expect(try await Self.versions(client) == Migrations.all.map(\.version).sorted())
            #expect(try await client.query("SELECT to_regclass('public.half_done') IS NULL AS absent").first?.decode(Bool.self, "absent") == true)
            // The lock was released: another run goes through.
            #expect(try await Migrator(database: client, logger: Self.logger).migrate().isEmpty)
        }
    }

    /// Opens a transaction on `holder` that runs `held`, starts applying `change` through `client` with
    /// `lockTimeoutMilliseconds`, and once the migration waits for a lock (`pg_stat_activity`, read through
    /// `observer`) hands `body` the open transaction and the migration's task.
    static func migrating(
        _ change: Migrations.Migration, lockTimeoutMilliseconds: Int, behind held: [String],
        client: PostgresClient, holder: PostgresClient, observer: PostgresClient, logger: Logger = Self.logger,
        _ body: (_ live: PostgresSession, _ migrating: Task<[Int], any Error>) async throws -> Void
    ) async throws {
        try await holder.withConnection { live in
            try await live.query("BEGIN")
            for statement in held { try await live.query(statement) }
            let migrating = Task {
                try await Migrator(database: client, logger: logger, lockTimeoutMilliseconds: lockTimeoutMilliseconds).migrate(Migrations.all + [change])
            }
            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(5), "migration \(change.version) waiting for a lock") { () async throws -> Bool? in
                let waiting = try await observer.query(
                    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND starts_with(query, $1) AND wait_event_type = 'Lock'", [change.sql]
                ).first?.decode(Int.self, "n")
                return waiting == 1 ? true : nil
            }
            try await body(live, migrating)
        }
    }

    @Test("a migration waiting for a lock a long transaction holds gives it back at the lock timeout, so reads do not queue behind it; it applies once that transaction ends")
    func lockTimeout() async throws {
        try await TestDatabase.withFresh(connections: 1) { (client: PostgresClient, url: String) async throws in
            try await client.query("CREATE TABLE busy (id int)")
            let holder = PostgresClient(url: url, connections: 1)
            let reader = PostgresClient(url: url, connections: 1)
            try await TestEnvironment.using(holder, reader) {
                // A reader that would queue behind the migration's lock gives up after 10 s instead of 15 (the
                // migration's lock timeout is 100 ms: the rest is a loaded machine's room).
                try await reader.query("SET statement_timeout = 10000")
                let change = Migrations.Migration(version: 9_998, name: "alter busy", sql: "ALTER TABLE busy ADD COLUMN note text")
                // A forgotten transaction: it read the table and stays open.
                try await Self.migrating(
                    change, lockTimeoutMilliseconds: 100, behind: ["SELECT count(*) FROM busy"], client: client, holder: holder, observer: reader
                ) { forgotten, migrating in
                    // The live system's read answers: it waits at most the migration's lock timeout.
                    #expect(try await reader.query("SELECT count(*)::int AS n FROM busy").first?.decode(Int.self, "n") == 0)
                    #expect(try await Self.versions(reader).contains(9_998) == false)
                    try await forgotten.query("COMMIT")
                    #expect(try await migrating.value == [9_998])
                }
                #expect(try await reader.query("SELECT count(note)::int AS n FROM busy").first?.decode(Int.self, "n") == 0)
            }
        }
    }

    @Test("a second migrator waits for the first however short a lock_timeout its URL sets, and its session keeps that setting")
    func waitsDespiteLockTimeout() async throws {
        try await TestDatabase.withFresh(connections: 1) { (observer: PostgresClient, url: String) async throws in
            let holder = PostgresClient(url: url, connections: 1)
            let impatient = PostgresClient(url: url + "?options=-c%20lock_timeout%3D1", connections: 1)
            try await TestEnvironment.using(holder, impatient) {
                try await holder.withConnection { first in
                    // The first migrator, as far as the second can tell: it holds the migration lock.
                    try await first.query("SELECT pg_advisory_lock($1)", [Migrator.lockKey])
                    let second = Task { try await Migrator(database: impatient, logger: Self.logger).migrate() }
                    func waiting() async throws -> Bool {
                        try await observer.query(
                            // This database only: other tests' migrators wait on their own databases' locks.
                            """
                            SELECT count(*)::int AS n FROM pg_stat_activity
                            WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'
                            """
                        ).first?.decode(Int.self, "n") == 1
                    }
                    _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(5), "the second migrator waiting for the lock") {
                        try await waiting() ? true : nil
                    }
                    // With lock_timeout = 1 ms it would have given up long before this.
                    try await observer.query("SELECT pg_sleep(0.2)")
                    #expect(try await waiting(), "still waiting")
                    try await first.query("SELECT pg_advisory_unlock($1)", [Migrator.lockKey])
                    #expect(try await second.value.isEmpty)
                }
                #expect(try await impatient.query("SHOW lock_timeout").first?.decode(String.self, "lock_timeout") == "1ms")
            }
        }
    }

    @Test("a migration chosen as a deadlock's victim gives its locks back and tries again, instead of failing")
    func deadlockRetried() async throws {
        try await TestDatabase.withFresh(connections: 1) { (client: PostgresClient, url: String) async throws in
            try await client.query("CREATE TABLE first_table (id int)")
            try await client.query("CREATE TABLE second_table (id int)")
            let holder = PostgresClient(url: url, connections: 1)
            let watcher = PostgresClient(url: url, connections: 1)
            try await TestEnvironment.using(holder, watcher) {
                // PostgreSQL looks for a deadlock once per wait, deadlock_timeout (1 s) after it began: the migration
                // finds the cycle only if the live transaction joins it within that second. A machine that holds
                // this test back longer makes the live one the victim instead, or (past the migration's 2.5 s lock
                // timeout) no deadlock happens at all; then the scenario runs again, with another version, a few
                // times at most. The migrator's own line says which happened.
                let lines = CapturedLines()
                var logger = Logger(label: "test.migrator") { _ in lines }
                logger.logLevel = .info
                for attempt in 0..<5 {
                    // The migration takes the tables in one order; a live transaction takes them in the other.
                    let change = Migrations.Migration(
                        version: 9_997 - attempt, name: "lock both",
                        sql: "LOCK TABLE second_table IN ACCESS EXCLUSIVE MODE; LOCK TABLE first_table IN ACCESS EXCLUSIVE MODE"
                    )
                    var liveWasTheVictim = false
                    // A lock timeout above PostgreSQL's deadlock_timeout (1 s): the deadlock is found first.
                    try await Self.migrating(
                        change, lockTimeoutMilliseconds: 2500, behind: ["LOCK TABLE first_table IN ROW EXCLUSIVE MODE"],
                        client: client, holder: holder, observer: watcher, logger: logger
                    ) { live, migrating in
                        // The cycle: the migration, waiting longer, finds it and is the victim; this one then gets its lock.
                        do {
                            try await live.query("LOCK TABLE second_table IN ROW EXCLUSIVE MODE")
                            try await live.query("COMMIT")
                        } catch let error as PostgresError where error.sqlState == "40P01" {
                            liveWasTheVictim = true
                            try await live.query("ROLLBACK")
                        }
                        #expect(try await migrating.value == [change.version])
                    }
                    if !liveWasTheVictim, lines.count("migration deadlocked with another session and gave its locks back; trying again") > 0 { return }
                }
                Issue.record("in five rounds the migration was never the deadlock's victim: its retry was never reached. \(lines.lines)")
            }
        }
    }
}
