import Logging
import Testing
import TestSupport
@testable import Shared

@Suite("Schema check")
struct SchemaCheckTests {
    @Test("a schema that cannot be read (the role may not read schema_migrations) is a readiness problem, not ready")
    func unreadable() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            #expect(await SchemaCheck(database: client).readinessProblem() == nil)
            try await client.query("REVOKE SELECT ON schema_migrations FROM CURRENT_USER")
            let problem = await SchemaCheck(database: client).readinessProblem()
            #expect(problem == "postgresql schema (cannot be read: SQLSTATE 42501)")
            try await client.query("GRANT SELECT ON schema_migrations TO CURRENT_USER")
        }
    }

    @Test("a schema behind the build names what to run; one ahead of it is current, and the worker's wait says which versions it does not know")
    func behindAndAhead() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            let behind = SchemaCheck(database: client, migrations: Migrations.all + [Migrations.Migration(version: 9_999, name: "next", sql: "SELECT 1")])
            #expect(try await behind.missing() == [9_999])
            #expect(await behind.readinessProblem() == "postgresql schema (migration 9999 not applied: run `tollgate-api migrate`)")

            try await client.query("INSERT INTO schema_migrations (version, name) VALUES (9999, 'next'), (10000, 'after')")
            let lines = CapturedLines()
            let ahead = SchemaCheck(database: client)
            #expect(await ahead.waitUntilCurrent(logger: Logger(label: "test.schema") { _ in lines }))
            #expect(lines.lines.filter { $0.hasPrefix("the database has migrations this build does not know (9999, 10000)") }.count == 1, "\(lines.lines)")
            #expect(await ahead.readinessProblem() == nil)
        }
    }

    @Test("a worker waiting for a schema behind the build says what to run once, not at every check, and that it starts once migrated")
    func waitForBehindSchema() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            let lines = CapturedLines()
            let behind = SchemaCheck(database: client, migrations: Migrations.all + [Migrations.Migration(version: 9_999, name: "next", sql: "SELECT 1")])
            let waiting = Task { await behind.waitUntilCurrent(logger: Logger(label: "test.schema") { _ in lines }, interval: .milliseconds(20)) }
            defer { waiting.cancel() }
            let said = "waiting for the database schema: migration 9999 not applied: run `tollgate-api migrate`"
            _ = try await Poll.until(timeout: .seconds(30), "the first report") { lines.count(said) > 0 ? true : nil }
            // A check every 20 ms: a line each would be a dozen by now. (Absence takes a wait to observe.)
            try await Task.sleep(for: .milliseconds(300))
            #expect(lines.count(said) == 1, "\(lines.lines)")
            try await client.query("INSERT INTO schema_migrations (version, name) VALUES (9999, 'next')")
            #expect(await waiting.value, "it returns once the schema is current")
            #expect(lines.lines == [said, "the database schema is current; starting"])
        }
    }

    @Test("a worker whose PostgreSQL cannot be reached says so once, not at every check, and a cancelled wait returns false")
    func waitForUnreachableDatabase() async throws {
        let lines = CapturedLines()
        let database = PostgresClient(url: "postgres://nobody@127.0.0.1:\(try DedicatedRedis.closedPort())/none", connections: 1)
        try await TestEnvironment.using(database) {
            let waiting = Task { await SchemaCheck(database: database).waitUntilCurrent(logger: Logger(label: "test.schema") { _ in lines }, interval: .milliseconds(20)) }
            defer { waiting.cancel() }
            _ = try await Poll.until(timeout: .seconds(30), "the first report") { lines.lines.isEmpty ? nil : true }
            try await Task.sleep(for: .milliseconds(300))
            #expect(lines.lines == ["cannot read the database schema; retrying"])
            #expect(lines.metadataOfLines.first?["error"] != nil, "with libpq's reason")
            waiting.cancel()
            #expect(await waiting.value == false)
        }
    }
}
