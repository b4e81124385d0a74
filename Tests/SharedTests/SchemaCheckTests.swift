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
}
