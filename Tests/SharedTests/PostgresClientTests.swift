import Foundation
import Testing
import TestSupport
@testable import Shared

@Suite("PostgresClient against a real PostgreSQL")
struct PostgresClientTests {
    static func micros(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
    }

    @Test(
        "strings bind as values, never as SQL",
        arguments: ["it's", "'; DROP TABLE x; --", "\"quoted\" \\ backslash \\x00", "$1 $2 ?", "naïve ☃ 𝄞", "", "line\nbreak\ttab"]
    )
    func stringBinding(value: String) async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("CREATE TABLE x (id serial PRIMARY KEY, value text NOT NULL)")
            try await client.query("INSERT INTO x (value) VALUES ($1)", [value])
            let row = try #require(try await client.query("SELECT value, length($1) AS n FROM x WHERE value = $1", [value]).first)
            #expect(try row.decode(String.self, "value") == value)
            #expect(try row.decode(Int.self, "n") == value.count)
            // The table is still there, with exactly one row.
            #expect(try await client.query("SELECT count(*)::int AS n FROM x").first?.decode(Int.self, "n") == 1)
        }
    }

    @Test("Int, Bool, Double, UUID, Date, bytes and nil bind and decode back")
    func typedBinding() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            let uuid = UUID()
            let bytes = PostgresBytes((0...255).map { UInt8($0) } + [0, 0, 92, 120])
            let dates = [
                Date(timeIntervalSince1970: 1_700_000_000.123456), Date(timeIntervalSince1970: -1_000_000.654321),
                Date(timeIntervalSince1970: 0.000001), Date(timeIntervalSince1970: 4_102_444_800.999999),
            ]
            for date in dates {
                let row = try #require(try await client.query(
                    """
                    SELECT $1::bigint AS i, $2::bigint AS imin, $3::bool AS t, $4::bool AS f, $5::float8 AS d, $6::float8 AS dneg,
                           $7::uuid AS u, $8::timestamptz AS ts, $9::bytea AS y, $10::text AS n, $10::text IS NULL AS isnull,
                           extract(microseconds FROM $8::timestamptz)::bigint % 1000000 AS micros
                    """,
                    [Int.max, Int.min, true, false, 0.1, -1.5e300, uuid, date, bytes, String?.none]
                ).first)
                #expect(try row.decode(Int.self, "i") == Int.max)
                #expect(try row.decode(Int.self, "imin") == Int.min)
                #expect(try row.decode(Bool.self, "t") == true)
                #expect(try row.decode(Bool.self, "f") == false)
                #expect(try row.decode(Double.self, "d") == 0.1)
                #expect(try row.decode(Double.self, "dneg") == -1.5e300)
                #expect(try row.decode(UUID.self, "u") == uuid)
                let decoded = try row.decode(Date.self, "ts")
                #expect(Self.micros(decoded) == Self.micros(date))
                #expect(try row.decode(PostgresBytes.self, "y") == bytes)
                #expect(try row.decode(String?.self, "n") == nil)
                #expect(try row.decode(Bool.self, "isnull") == true)
                // PostgreSQL itself saw the microseconds (not rounded to milliseconds on the way in).
                let expectedMicros = ((Self.micros(date) % 60_000_000) + 60_000_000) % 60_000_000 % 1_000_000
                #expect(try row.decode(Int.self, "micros") == Int(expectedMicros))
            }
        }
    }

    @Test("a Date stored in a timestamptz column keeps its microseconds whatever the session time zone")
    func dateStoredAndRead() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            let date = Date(timeIntervalSince1970: 1_234_567_890.987654)
            try await client.query("CREATE TABLE d (at timestamptz NOT NULL)")
            try await client.query("INSERT INTO d VALUES ($1)", [date])
            let row = try #require(try await client.query("SELECT at, at = $1 AS same FROM d", [date]).first)
            #expect(Self.micros(try row.decode(Date.self, "at")) == Self.micros(date))
            #expect(try row.decode(Bool.self, "same"))
            // Optional decoding of a present value.
            #expect(try row.decode(Date?.self, "at").map(Self.micros) == Self.micros(date))
        }
    }

    @Test("decoding a value as the wrong type throws a .decoding error")
    func typedDecodeErrors() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            let row = try #require(try await client.query(
                "SELECT 'abc'::text AS word, 42 AS number, NULL::int AS nothing, 1 AS one, 'not-a-uuid' AS u, '2024-01-01'::date AS day"
            ).first)
            func expectDecodingError(_ body: () throws -> Void, _ comment: Comment) {
                let error = #expect(throws: PostgresError.self, comment) { try body() }
                #expect(error?.code == .decoding, comment)
            }
            expectDecodingError({ _ = try row.decode(Int.self, "word") }, "text as Int")
            expectDecodingError({ _ = try row.decode(Bool.self, "one") }, "1 as Bool")
            expectDecodingError({ _ = try row.decode(UUID.self, "u") }, "text as UUID")
            expectDecodingError({ _ = try row.decode(Date.self, "day") }, "date as timestamptz")
            expectDecodingError({ _ = try row.decode(PostgresBytes.self, "word") }, "text as bytea")
            expectDecodingError({ _ = try row.decode(Int.self, "nothing") }, "NULL as non-optional Int")
            expectDecodingError({ _ = try row.decode(String.self, "nothing") }, "NULL as non-optional String")
            expectDecodingError({ _ = try row.decode(Int?.self, "word") }, "text as Int?")
            expectDecodingError({ _ = try row.decode(Int.self, "no_such_column") }, "a missing column")
            expectDecodingError({ _ = try row.decode(Int.self, at: 99) }, "a missing index")
            #expect(try row.decode(Int?.self, "nothing") == nil)
            #expect(try row.decode(Int.self, "number") == 42)
            #expect(try row.decode(Int.self, at: 1) == 42)
        }
    }

    @Test("withTransaction commits when the body returns and rolls back when it throws")
    func transactions() async throws {
        struct Abort: Error {}
        try await TestDatabase.withFresh(connections: 1) { client, url in
            try await client.query("CREATE TABLE t (value int NOT NULL)")
            let returned = try await client.withTransaction { session in
                try await session.query("INSERT INTO t VALUES (1)")
                try await session.query("INSERT INTO t VALUES (2)")
                return "done"
            }
            #expect(returned == "done")
            #expect(try await client.query("SELECT count(*)::int AS n FROM t").first?.decode(Int.self, "n") == 2)

            await #expect(throws: Abort.self) {
                try await client.withTransaction { session in
                    try await session.query("INSERT INTO t VALUES (3)")
                    throw Abort()
                }
            }
            #expect(try await client.query("SELECT count(*)::int AS n FROM t").first?.decode(Int.self, "n") == 2)

            // A failing statement inside rolls back too, and the connection is usable afterwards.
            await #expect(throws: PostgresError.self) {
                try await client.withTransaction { session in
                    try await session.query("INSERT INTO t VALUES (4)")
                    try await session.query("INSERT INTO t VALUES (NULL)")
                }
            }
            let values = try await client.query("SELECT value FROM t ORDER BY value").rows.map { try $0.decode(Int.self, "value") }
            #expect(values == [1, 2])
            // No transaction was left open on the pooled connection: what it writes now is visible to others at once.
            try await client.query("INSERT INTO t VALUES (5)")
            let other = PostgresClient(url: url, connections: 1)
            let seen = try await TestEnvironment.using(other) {
                try await other.query("SELECT count(*)::int AS n FROM t WHERE value = 5").first?.decode(Int.self, "n")
            }
            #expect(seen == 1)
        }
    }

    @Test("a COMMIT that PostgreSQL answers with ROLLBACK (a statement in the transaction failed and was caught) throws 25P02")
    func commitAnsweredRollback() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("CREATE TABLE t (value int NOT NULL)")
            // The body swallows a failed statement and returns: its first insert is gone, and the caller must hear so.
            let swallowed = await #expect(throws: PostgresError.self) {
                try await client.withTransaction { session in
                    try await session.query("INSERT INTO t VALUES (1)")
                    _ = try? await session.query("INSERT INTO t VALUES (NULL)")
                }
            }
            #expect(swallowed?.sqlState == "25P02")
            // The same through a pipeline ending in COMMIT.
            let piped = await #expect(throws: PostgresError.self) {
                try await client.withConnection { session in
                    try await session.query("BEGIN")
                    _ = try? await session.query("INSERT INTO t VALUES (NULL)")
                    try await session.pipeline([("COMMIT", [])])
                }
            }
            #expect(piped?.sqlState == "25P02")
            #expect(try await client.query("SELECT count(*)::int AS n FROM t").first?.decode(Int.self, "n") == 0)
            // A plain ROLLBACK, and a COMMIT that commits, are no errors.
            try await client.withConnection { session in
                try await session.query("BEGIN")
                try await session.query("ROLLBACK")
            }
            _ = try await client.withTransaction { session in try await session.query("INSERT INTO t VALUES (2)") }
            #expect(try await client.query("SELECT count(*)::int AS n FROM t").first?.decode(Int.self, "n") == 1)
        }
    }

    /// How a call whose connection is lost before its answer is made (see ``lostAnswer(call:)``).
    enum LostCall: String, CaseIterable, Sendable {
        /// A read outside a transaction.
        case read
        /// An autocommitted write, whose commit (a deferred trigger) is still running.
        case write
        /// A write inside an open transaction.
        case writeInTransaction
        /// An autocommitted write on a session without a statement timeout or an answer deadline (a migration's):
        /// libpq, not the deadline's wait, then reads the server's FATAL error and the close.
        case writeWithoutDeadline
        /// A `COMMIT` still running (a deferred trigger).
        case commit
        /// A pipeline that begins, writes and commits, the grants' shape.
        case pipelineWithCommit
        /// A pipeline of writes inside an open transaction.
        case pipelineInTransaction

        /// Whether the error must say the change may have been made.
        var outcomeUnknown: Bool { [.write, .writeWithoutDeadline, .commit, .pipelineWithCommit].contains(self) }
    }

    @Test(
        "a connection lost after a change went out and before PostgreSQL confirmed it (an autocommitted write, a COMMIT, a pipeline that commits) says the change may have been made; a read or a write inside an open transaction does not",
        arguments: LostCall.allCases
    )
    func lostAnswer(call: LostCall) async throws {
        let name = "tollgate-test-lost-\(call.rawValue)"
        // A statement timeout far past the poll below (20 s) that cuts the backend: the default 15 s could end the
        // sleep first on a test process held back that long.
        let (client, killer) = try await Self.clients(
            named: name, connections: 1, settings: [URLQueryItem(name: "options", value: "-c statement_timeout=120s")]
        )
        try await TestEnvironment.using(killer, client) {
            // `slow` sleeps at commit (a deferred constraint trigger); `plain` does not.
            try await killer.withConnection { try await $0.runScript("""
                CREATE TABLE slow (n int); CREATE TABLE plain (n int);
                CREATE FUNCTION slowly() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$;
                CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slowly();
                """) }
            let sleepy = "INSERT INTO plain SELECT 1 FROM pg_sleep(60)"
            async let outcome: PostgresError? = {
                do {
                    switch call {
                    case .read: try await client.query("SELECT pg_sleep(60)")
                    case .write: try await client.query("INSERT INTO slow VALUES (1)")
                    case .writeWithoutDeadline:
                        try await client.withConnection { session in try await session.withoutStatementTimeout { try await session.query("INSERT INTO slow VALUES (1)") } }
                    case .writeInTransaction: _ = try await client.withTransaction { try await $0.query(sleepy) }
                    case .commit: _ = try await client.withTransaction { try await $0.query("INSERT INTO slow VALUES (1)") }
                    case .pipelineWithCommit:
                        _ = try await client.withConnection { try await $0.pipeline([("BEGIN", []), ("INSERT INTO slow VALUES (1)", []), ("COMMIT", [])]) }
                    case .pipelineInTransaction:
                        _ = try await client.withTransaction { try await $0.pipeline([("INSERT INTO plain VALUES (1)", []), (sleepy, [])]) }
                    }
                    return nil
                } catch let error as PostgresError {
                    return error
                }
            }()
            // The backend is cut while it sleeps, as a network cut or a failover would cut it.
            let terminated = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(20), "the call to sleep in PostgreSQL") { () async throws -> Bool? in
                try await killer.query(
                    """
                    SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity
                    WHERE datname = current_database() AND application_name = $1 AND wait_event = 'PgSleep'
                    """, [name]
                ).first?.decode(Bool.self, "done")
            }
            #expect(terminated)
            let error = try #require(await outcome, "the call failed")
            #expect(error.code == .connection, "\(error)")
            #expect(error.isUnavailable)
            #expect(error.outcomeUnknown == call.outcomeUnknown, "\(error)")
            #expect(await client.ping(), "the next lease connects again")
        }
    }

    @Test("which statements may commit a change: outside a block anything but a read or a session setting; inside one only its COMMIT", arguments: [
        (["SELECT 1"], false, false), (["  select 1"], false, false), (["SHOW statement_timeout"], false, false), (["SET x.y = 1"], false, false),
        (["INSERT INTO t VALUES (1)"], false, true), (["\n\tupdate t SET n = 1"], false, true), (["WITH x AS (DELETE FROM t RETURNING n) SELECT 1"], false, true),
        (["CREATE TABLE t (n int)"], false, true), (["-- a comment\nSELECT 1"], false, true),
        (["INSERT INTO t VALUES (1)"], true, false), (["COMMIT"], true, true), (["END"], true, true), (["COMMIT"], false, false),
        (["BEGIN", "INSERT INTO t VALUES (1)", "COMMIT"], false, true), (["BEGIN", "INSERT INTO t VALUES (1)"], false, false),
        (["BEGIN", "INSERT INTO t VALUES (1)", "ROLLBACK"], false, false), (["ROLLBACK", "INSERT INTO t VALUES (1)"], true, true),
        (["START TRANSACTION", "DELETE FROM t"], false, false), (["DEALLOCATE tg_1"], false, false), (["COMMIT PREPARED 'tx'"], false, true),
    ])
    func mayCommit(statements: [String], inTransaction: Bool, commits: Bool) {
        #expect(PostgresConnection.mayCommit(statements, inTransaction: inTransaction) == commits)
    }

    @Test("a script may commit outside a transaction block, and inside one only when it names COMMIT", arguments: [
        ("SELECT 1; SELECT 2", false, true), ("CREATE TABLE t (n int); INSERT INTO t VALUES (1)", true, false),
        ("INSERT INTO t VALUES (1); commit; BEGIN", true, true),
    ])
    func scriptMayCommit(sql: String, inTransaction: Bool, commits: Bool) {
        #expect(PostgresConnection.scriptMayCommit(sql, inTransaction: inTransaction) == commits)
    }

    @Test("a pipeline runs its statements in order in one round trip; a failing one throws and skips the rest")
    func pipeline() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("CREATE TABLE p (value int PRIMARY KEY)")
            let results = try await client.withConnection { session in
                try await session.pipeline([
                    ("BEGIN", []), ("INSERT INTO p VALUES ($1)", [1]), ("INSERT INTO p VALUES ($1) RETURNING value * 10 AS ten", [2]),
                    ("SELECT count(*)::int AS n FROM p", []), ("COMMIT", []),
                ])
            }
            #expect(results.count == 5)
            #expect(try results[2].first?.decode(Int.self, "ten") == 20)
            #expect(try results[3].first?.decode(Int.self, "n") == 2)

            // A duplicate key in the middle: the error is thrown, the statements after it do not run, and
            // after a rollback the connection works (and nothing of the failed pipeline stayed).
            let error = await #expect(throws: PostgresError.self) {
                try await client.withConnection { session in
                    do {
                        try await session.pipeline([
                            ("BEGIN", []), ("INSERT INTO p VALUES ($1)", [3]), ("INSERT INTO p VALUES ($1)", [1]),
                            ("INSERT INTO p VALUES ($1)", [4]), ("COMMIT", []),
                        ])
                    } catch {
                        await session.rollback()
                        throw error
                    }
                }
            }
            #expect(error?.isUniqueViolation == true)
            let values = try await client.query("SELECT value FROM p ORDER BY value").rows.map { try $0.decode(Int.self, "value") }
            #expect(values == [1, 2])
        }
    }

    @Test("a text parameter with a NUL is refused whole (22021), in a query and in a pipeline, never stored cut short")
    func nulRefused() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("CREATE TABLE n (value text NOT NULL)")
            let value = "before\u{0}after"
            let single = await #expect(throws: PostgresError.self) { try await client.query("INSERT INTO n VALUES ($1)", [value]) }
            #expect(single?.code == .server)
            #expect(single?.sqlState == "22021")
            #expect(single?.message.contains("$1") == true)
            #expect(single?.message.contains("before") == false)
            let piped = await #expect(throws: PostgresError.self) {
                try await client.withConnection { session in
                    try await session.pipeline([("INSERT INTO n VALUES ($1)", ["fine"]), ("INSERT INTO n VALUES ($1)", [value])])
                }
            }
            #expect(piped?.sqlState == "22021")
            // Nothing of either went in, and the connection still works.
            #expect(try await client.query("SELECT count(*)::int AS n FROM n").first?.decode(Int.self, "n") == 0)
        }
    }

    @Test("a unique violation is a server error with SQLSTATE 23505")
    func uniqueViolation() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("CREATE TABLE u (key text PRIMARY KEY)")
            try await client.query("INSERT INTO u VALUES ($1)", ["secret-value-123"])
            let error = await #expect(throws: PostgresError.self) {
                try await client.query("INSERT INTO u VALUES ($1)", ["secret-value-123"])
            }
            #expect(error?.code == .server)
            #expect(error?.sqlState == "23505")
            #expect(error?.isUniqueViolation == true)
            #expect(error?.isConnectionFailure == false)
            // Other server errors are not unique violations.
            let syntax = await #expect(throws: PostgresError.self) { try await client.query("SELEC 1") }
            #expect(syntax?.sqlState == "42601")
            #expect(syntax?.isUniqueViolation == false)
            // And the connection is still good.
            #expect(await client.ping())
        }
    }

    /// A primary demoted in a failover keeps its sessions and answers every write with 25006; the session's
    /// own `default_transaction_read_only` stands in for the demotion here.
    @Test("a write refused because the server is read-only (25006) is unavailable, and the next lease runs on a new connection")
    func readOnlyServerDropsConnection() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("CREATE TABLE w (n int)")
            let firstPid = try #require(try await client.query("SELECT pg_backend_pid() AS pid").first?.decode(Int.self, "pid"))
            try await client.query("SET default_transaction_read_only = on")
            let refused = await #expect(throws: PostgresError.self) { try await client.query("INSERT INTO w VALUES (1)") }
            #expect(refused?.sqlState == "25006")
            #expect(refused?.isReadOnlyServer == true)
            #expect(refused?.isUnavailable == true, "the API answers 503 and the worker retries")
            #expect(refused?.isConnectionFailure == false)
            try await client.query("INSERT INTO w VALUES (2)")
            let secondPid = try #require(try await client.query("SELECT pg_backend_pid() AS pid").first?.decode(Int.self, "pid"))
            #expect(secondPid != firstPid)
            #expect(try await client.query("SELECT count(*)::int AS n FROM w").first?.decode(Int.self, "n") == 1)
        }
    }

    @Test("serialization failures, deadlocks, a server short of resources or failing its disk are unavailable (retried, 503), other server errors are not (a missing table or column either)", arguments: [
        ("40001", true), ("40P01", true), ("57014", true), ("55P03", true), ("25006", true), ("53100", true), ("53200", true), ("53300", true),
        ("58030", true), ("42P01", false), ("42703", false), ("42883", false), ("23505", false), ("22003", false), ("42601", false), ("42501", false),
    ])
    func unavailableStates(sqlState: String, unavailable: Bool) {
        #expect(PostgresError(.server, sqlState: sqlState, "x").isUnavailable == unavailable)
    }

    @Test("after pg_terminate_backend from another client, the client's next statement runs on a new connection, without failing first")
    func reconnectAfterTerminate() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, url in
            let firstPid = try #require(try await client.query("SELECT pg_backend_pid() AS pid").first?.decode(Int.self, "pid"))
            let killer = PostgresClient(url: url, connections: 1)
            try await TestEnvironment.using(killer) {
                let terminated = try await killer.query(
                    "SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).rows.map { try $0.decode(Bool.self, "done") }
                #expect(terminated.contains(true))
                // The backend is really gone before the client is asked again.
                _ = try await Poll.until(timeout: .seconds(20), "the backend to exit") { () async throws -> Bool? in
                    let alive = try await killer.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [firstPid]).first != nil
                    return alive ? nil : true
                }
            }
            var failures: [PostgresError] = []
            let secondPid = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(50), "the client to reconnect") { () async throws -> Int? in
                do {
                    return try await client.query("SELECT pg_backend_pid() AS pid").first?.decode(Int.self, "pid")
                } catch let error as PostgresError where error.isConnectionFailure {
                    failures.append(error)
                    return nil
                }
            }
            #expect(secondPid != firstPid)
            #expect(failures.isEmpty, "the first statement of a lease checks the idle connection first: \(failures)")
        }
    }

    @Test("50 concurrent queries through a 4-connection pool all succeed, on at most 4 connections")
    func concurrentQueries() async throws {
        try await TestDatabase.withFresh(connections: 4) { client, _ in
            // Each statement waits until a second connection has run one: a pool that opens its further
            // connections, as it must, passes unless connecting takes 10 s; one that serves all 50 statements
            // on one connection fails, saying so. A sequence is the latch, as it is seen at once, outside any
            // transaction. (10 s stays inside the session's 15 s statement timeout.)
            try await client.withConnection { try await $0.runScript("""
                CREATE SEQUENCE met;
                CREATE FUNCTION meet() RETURNS void LANGUAGE plpgsql AS $$
                DECLARE started timestamptz := clock_timestamp();
                BEGIN
                  LOOP
                    EXIT WHEN (SELECT is_called FROM met);
                    IF clock_timestamp() - started > interval '10 s' THEN
                      RAISE EXCEPTION 'no second connection ran a statement within 10 s';
                    END IF;
                    PERFORM pg_stat_clear_snapshot();
                    IF EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                               AND state = 'active' AND query LIKE '%FROM meet()%') THEN
                      PERFORM nextval('met');
                      EXIT;
                    END IF;
                    PERFORM pg_sleep(0.005);
                  END LOOP;
                END $$;
                """) }
            let results = try await withThrowingTaskGroup(of: (Int, Int, Int).self) { group in
                for index in 0..<50 {
                    group.addTask {
                        let row = try #require(try await client.query(
                            "SELECT $1::int AS value, pg_backend_pid() AS pid FROM meet(), pg_sleep(0.02)", [index]
                        ).first)
                        return (index, try row.decode(Int.self, "value"), try row.decode(Int.self, "pid"))
                    }
                }
                var results: [(Int, Int, Int)] = []
                for try await result in group { results.append(result) }
                return results
            }
            #expect(results.count == 50)
            #expect(results.allSatisfy { $0.0 == $0.1 })
            let pids = Set(results.map(\.2))
            #expect(pids.count <= 4)
            #expect(pids.count >= 2)
        }
    }

    /// Runs `body` with a client per pool size in `pools` on a fresh database of the test's own, and a way to set
    /// that database's connection limit (-1: none), then shuts the clients down. A superuser is exempt from such a
    /// limit: the test refuses to run as one.
    static func withLimitedDatabase(
        pools: [Int], acquireTimeout: Duration = .seconds(10), _ body: (_ limitConnections: (Int) async throws -> Void, _ clients: [PostgresClient]) async throws -> Void
    ) async throws {
        let url = try await TestEnvironment.freshDatabase()
        let name = try #require(URLComponents(string: url)?.path.dropFirst())
        let admin = PostgresClient(url: try TestEnvironment.databaseURL(), connections: 1)
        let clients = pools.map { PostgresClient(url: url, connections: $0, acquireTimeout: acquireTimeout) }
        let result: Result<Void, any Error>
        do {
            let superuser = try #require(try await admin.query("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").first).decode(Bool.self, "rolsuper")
            try #require(!superuser, "a connection limit does not apply to a superuser: run the tests as an ordinary role (ops/test does)")
            // ALTER DATABASE takes no parameters; the name is the generated one, never input.
            try await body({ limit in try await admin.query("ALTER DATABASE \(name) CONNECTION LIMIT \(limit)") }, clients)
            result = .success(())
        } catch {
            result = .failure(error)
        }
        for client in clients + [admin] { await client.shutdown() }
        try result.get()
    }

    @Test(
        "a server that opens no more connections (a connection limit reached) leaves the pool smaller: its callers wait for the connections it has",
        .timeLimit(.minutes(1))
    )
    func connectionLimitReached() async throws {
        // An acquire timeout far past the bound below: a caller that waited for it cannot pass for one refused at once.
        try await Self.withLimitedDatabase(pools: [6, 2], acquireTimeout: .seconds(40)) { limitConnections, clients in
            let (client, refused) = (clients[0], clients[1])
            try await limitConnections(2)
            let pids = try await withThrowingTaskGroup(of: Int.self) { group in
                // The two connections the limit allows, opened one after the other (PostgreSQL counts sessions
                // that start together approximately, and may refuse them all), each held a moment.
                for _ in 0..<2 {
                    let opened = AsyncStream<Void>.makeStream()
                    group.addTask {
                        try await client.withConnection { session in
                            let pid = try #require(try await session.query("SELECT pg_backend_pid() AS pid").first).decode(Int.self, "pid")
                            opened.continuation.yield()
                            try await session.query("SELECT pg_sleep(0.3)")
                            return pid
                        }
                    }
                    for await _ in opened.stream { break }
                }
                // Then more callers than the pool holds: every connection they would open is refused.
                for _ in 0..<12 {
                    group.addTask { try #require(try await client.query("SELECT pg_backend_pid() AS pid FROM pg_sleep(0.2)").first).decode(Int.self, "pid") }
                }
                var pids: [Int] = []
                for try await pid in group { pids.append(pid) }
                return pids
            }
            #expect(pids.count == 14)
            #expect(Set(pids).count == 2)
            // With no connection of its own to wait for, every caller gets the server's refusal at once, those
            // that queued behind the pool's two attempts too (not "no connection came free" at the acquire timeout).
            try await limitConnections(0)
            let started = ContinuousClock.now
            let errors = await withTaskGroup(of: PostgresError?.self) { group in
                for _ in 0..<6 {
                    group.addTask {
                        do {
                            _ = try await refused.query("SELECT 1")
                            return nil
                        } catch {
                            return error as? PostgresError
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(errors.count == 6)
            #expect(errors.allSatisfy { $0?.isUnavailable == true && $0?.message.contains("too many connections") == true }, "\(errors)")
            #expect(ContinuousClock.now - started < .seconds(20), "they waited for the acquire timeout (40 s)")
        }
    }

    @Test(
        "callers waiting after a refused connection open new ones once the server takes them again, not only when a busy one comes free",
        .timeLimit(.minutes(1))
    )
    func refusedThenAdmitted() async throws {
        try await Self.withLimitedDatabase(pools: [4]) { limitConnections, clients in
            let client = clients[0]
            try await limitConnections(1)
            let served = AsyncStream<Void>.makeStream()
            try await withThrowingTaskGroup(of: Void.self) { group in
                // The one connection allowed, leased until the caller below is served (or 30 s have passed).
                let holding = AsyncStream<Void>.makeStream()
                group.addTask {
                    try await client.withConnection { session in
                        try await session.query("SELECT 1")
                        holding.continuation.yield()
                        let servedMeanwhile = await withTaskGroup(of: Bool.self) { race in
                            race.addTask { await served.stream.first { _ in true } != nil }
                            race.addTask { (try? await Task.sleep(for: .seconds(30))) == nil }
                            defer { race.cancelAll() }
                            return await race.next() ?? false
                        }
                        #expect(servedMeanwhile, "the caller was served only once the busy connection came free")
                    }
                }
                for await _ in holding.stream { break }
                // A caller whose connection is refused waits; once it has been refused, the server takes more again.
                group.addTask {
                    try await client.query("SELECT 1")
                    served.continuation.yield()
                }
                _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(20), "the caller's connection to be refused") {
                    client.openPausedUntil
                }
                try await limitConnections(-1)
                try await group.waitForAll()
            }
        }
    }

    @Test("a statement prepared before another process changed its result type runs again once re-prepared")
    func resultTypeChanged() async throws {
        let url = try await TestEnvironment.freshDatabase()
        let client = PostgresClient(url: url, connections: 1)
        let migrator = PostgresClient(url: url, connections: 1)
        try await migrator.withConnection { try await $0.runScript("CREATE TABLE titles (id int PRIMARY KEY, title varchar(10)); INSERT INTO titles VALUES (1, 'a')") }
        let select = "SELECT title FROM titles WHERE id = $1"
        #expect(try await client.query(select, [1]).rows.first?.decode(String.self, "title") == "a")
        #expect(try await client.query("UPDATE titles SET title = $2 WHERE id = $1 RETURNING title", [1, "b"]).rows.count == 1)

        // A migration of a newer release, while this process runs: the result type of both plans changes.
        try await migrator.withConnection { try await $0.runScript("ALTER TABLE titles ALTER COLUMN title TYPE varchar(200)") }
        // Outside a transaction, the statement is prepared again and run at once.
        #expect(try await client.query(select, [1]).rows.first?.decode(String.self, "title") == "b")
        // Inside one, the transaction has failed by then: this attempt fails, the next runs.
        let update = "UPDATE titles SET title = $2 WHERE id = $1 RETURNING title"
        await #expect(throws: PostgresError.self) {
            try await client.withTransaction { try await $0.query(update, [1, "c"]) }
        }
        let updated = try await client.withTransaction { try await $0.query(update, [1, "d"]) }
        #expect(try updated.rows.first?.decode(String.self, "title") == "d")
        // The server's copies of the two forgotten plans are gone: the select, the update and this query remain.
        #expect(try await client.query("SELECT name FROM pg_prepared_statements").rows.count == 3)
        await client.shutdown()
        await migrator.shutdown()
    }

    @Test("a data exception does not quote the value it refused", arguments: [
        ("SELECT $1::uuid", "22P02"), ("SELECT $1::int", "22P02"), ("SELECT $1::timestamptz", "22007"), ("SELECT $1::integer", "22003"),
    ])
    func dataExceptionUnquoted(sql: String, sqlState: String) async throws {
        let client = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 1)
        // A value may hold quotes of its own: none of it shows.
        let value = sqlState == "22003" ? "4242424242" : "Hunter\"quoted-\(Fixtures.suffix(6))"
        let error = await #expect(throws: PostgresError.self) { try await client.query(sql, [value]) }
        #expect(error?.sqlState == sqlState)
        #expect(error.map { "\($0)" }?.contains(value) == false)
        #expect(error.map { "\($0)" }?.contains("quoted") == false, "\(error.map { "\($0)" } ?? "")")
        #expect(error?.message.contains("\"…\"") == true)
        await client.shutdown()
    }

    @Test("COPY is refused, and its connection is replaced rather than left mid-COPY")
    func copyRefused() async throws {
        let client = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 1)
        try await client.withConnection { try await $0.runScript("CREATE TABLE copied (id int)") }
        for sql in ["COPY copied FROM STDIN", "COPY copied TO STDOUT"] {
            let error = await #expect(throws: PostgresError.self) { try await client.withConnection { try await $0.runScript(sql) } }
            #expect(error?.code == .connection)
            #expect(try await client.query("SELECT count(*) AS n FROM copied").rows.first?.decode(Int.self, "n") == 0)
        }
        await client.shutdown()
    }

    @Test("a session still leased when its client shuts down refuses work with .closed, off Swift's pool")
    func shutDownUnderALease() async throws {
        let client = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 1)
        try await client.withConnection { session in
            try await session.query("SELECT 1")
            await client.shutdown()
            let error = await #expect(throws: PostgresError.self) { try await session.query("SELECT 1") }
            #expect(error?.code == .closed)
        }
    }

    @Test("a URL libpq cannot read never shows its credentials in the error", arguments: [
        "postgres://tollgate:Hunter%zz2@127.0.0.1:1/tollgate", "postgres://tollgate:Hunter 2@127.0.0.1:1/tollgate",
        "postgres://tollgate:Hunter2@127.0.0.1:1/tollgate?sslmode=nonsense",
        // The password in the query, and an `@` after the credentials: libpq splits at the first one.
        "postgres://127.0.0.1:1/tollgate?password=Hunter%zz2", "postgres://127.0.0.1:1/tollgate?user=tollgate&password=Hunter%zz2&sslmode=x",
        "postgres://tollgate:Hunter%zz2@127.0.0.1:1/tollgate?application_name=api@eu",
        // A password holding a bare `&`: libpq reads the rest as parameters of their own, and quotes them.
        "postgres://127.0.0.1:1/tollgate?password=Hunter2&Hunter3", "postgres://127.0.0.1:1/tollgate?password=Hunter2&Hunter3=x&sslmode=require",
    ])
    func credentialsRedacted(url: String) async throws {
        let client = PostgresClient(url: url, connections: 1)
        let error = await #expect(throws: PostgresError.self) { try await client.query("SELECT 1") }
        let text = error.map { "\($0)" } ?? ""
        #expect(!text.isEmpty)
        #expect(!text.contains("Hunter"))
        await client.shutdown()
    }

    /// `url` with libpq parameters added to its query string.
    static func url(_ url: String, adding parameters: [URLQueryItem]) throws -> String {
        var components = try #require(URLComponents(string: url))
        components.queryItems = (components.queryItems ?? []) + parameters
        // URLComponents leaves `=` and `+` alone inside values; libpq reads the query percent-decoded.
        components.percentEncodedQuery = components.percentEncodedQuery?
            .replacingOccurrences(of: "+", with: "%2B")
        return try #require(components.string)
    }

    /// A one-connection client of a fresh database whose sessions have this statement timeout.
    static func client(statementTimeout: String) async throws -> PostgresClient {
        let base = try await TestEnvironment.freshDatabase()
        let url = try Self.url(base, adding: [URLQueryItem(name: "options", value: "-c statement_timeout=\(statementTimeout)")])
        return PostgresClient(url: url, connections: 1)
    }

    /// Two clients of a fresh database: one whose connections carry the application name `name`, and a
    /// one-connection observer that does not.
    static func clients(
        named name: String, connections: Int, settings: [URLQueryItem] = []
    ) async throws -> (named: PostgresClient, observer: PostgresClient) {
        let base = try await TestEnvironment.freshDatabase()
        let url = try Self.url(base, adding: [URLQueryItem(name: "application_name", value: name)] + settings)
        return (PostgresClient(url: url, connections: connections), PostgresClient(url: base, connections: 1))
    }

    /// The backends of this database whose application name is `name`.
    static func backends(_ client: PostgresClient, named name: String) async throws -> Int {
        try await client.query(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", [name]
        ).first?.decode(Int.self, "n") ?? 0
    }

    @Test("a caller that finds every connection busy past the acquire timeout gets an unavailable error, not a hang")
    func acquireTimeout() async throws {
        let url = try await TestEnvironment.freshDatabase()
        let client = PostgresClient(url: url, connections: 1, acquireTimeout: .milliseconds(300))
        try await TestEnvironment.using(client) {
            // Held until the caller has its answer: had it waited for the connection, it would get it, not an error.
            let holder = await client.holdConnection()
            let error = await #expect(throws: PostgresError.self) { try await client.query("SELECT 1") }
            #expect(error?.isUnavailable == true)
            #expect(error?.code == .busy, "PostgreSQL answers: not a connection failure")
            try await holder.release()
            #expect(await client.ping(), "the pool serves again once the connection is free")
        }
    }

    @Test("a caller waiting for a busy pool stops waiting when its task is cancelled (a worker's shutdown), and the pool serves on")
    func cancelledWhileWaiting() async throws {
        let client = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 1, acquireTimeout: .seconds(10))
        try await TestEnvironment.using(client) {
            // Held until the caller has its answer: had it gone on waiting, it would get "busy" at the acquire timeout.
            let holder = await client.holdConnection()
            let waiting = Task { try await client.query("SELECT 1") }
            // Cancelled while it waits, or (on a slow machine) before it began to: the same error either way.
            try await Task.sleep(for: .milliseconds(200))
            waiting.cancel()
            await #expect(throws: CancellationError.self) { try await waiting.value }
            try await holder.release()
            #expect(await client.ping(), "the pool serves the next caller")
        }
    }

    @Test("statements are bounded by a statement timeout (15 s unless the URL's options say otherwise); the URL's settings win over the defaults, not over UTC")
    func statementTimeoutAndURLSettings() async throws {
        let base = try await TestEnvironment.freshDatabase()
        let plain = PostgresClient(url: base, connections: 1)
        try await TestEnvironment.using(plain) {
            let row = try #require(try await plain.query("SHOW statement_timeout").first)
            #expect(try row.decode(String.self, "statement_timeout") == "15s")
        }
        let url = try Self.url(base, adding: [
            URLQueryItem(name: "options", value: "-c statement_timeout=200 -c TimeZone=Europe/Paris"),
            URLQueryItem(name: "application_name", value: "tollgate-test-settings"),
        ])
        let client = PostgresClient(url: url, connections: 1)
        try await TestEnvironment.using(client) {
            let error = await #expect(throws: PostgresError.self) { try await client.query("SELECT pg_sleep(2)") }
            #expect(error?.sqlState == "57014")
            #expect(error?.isUnavailable == true)
            let settings = try #require(try await client.query(
                "SELECT current_setting('TimeZone') AS zone, current_setting('application_name') AS name"
            ).first)
            #expect(try settings.decode(String.self, "zone") == "UTC", "values are parsed back as UTC")
            #expect(try settings.decode(String.self, "name") == "tollgate-test-settings")
        }
    }

    @Test("transactions run at READ COMMITTED, which the grants rely on, whatever isolation the database or the URL defaults to")
    func readCommittedWhateverTheDefault() async throws {
        let base = try await TestEnvironment.freshDatabase()
        let owner = PostgresClient(url: base, connections: 1)
        try await TestEnvironment.using(owner) {
            // The database's name is generated hex (TestEnvironment.freshDatabase), never input.
            let name = try #require(try await owner.query("SELECT current_database() AS name").first).decode(String.self, "name")
            try await owner.query("ALTER DATABASE \(name) SET default_transaction_isolation = 'repeatable read'")
        }
        let serializable = try Self.url(base, adding: [URLQueryItem(name: "options", value: "-c default_transaction_isolation=serializable")])
        for url in [base, serializable] {
            let client = PostgresClient(url: url, connections: 1)
            try await TestEnvironment.using(client) {
                let level = try await client.withTransaction { session in
                    try #require(try await session.query("SHOW transaction_isolation").first).decode(String.self, "transaction_isolation")
                }
                #expect(level == "read committed", "\(url == base ? "the database's default" : "the URL's options")")
            }
        }
    }

    @Test("a transaction whose connection broke is rolled back without opening a new connection for it")
    func rollbackAfterBrokenConnection() async throws {
        let name = "tollgate-test-rollback"
        let (client, killer) = try await Self.clients(named: name, connections: 1)
        try await TestEnvironment.using(killer) {
            try await TestEnvironment.using(client) {
                await #expect(throws: PostgresError.self) {
                    try await client.withTransaction { session in
                        try await session.query("SELECT 1")
                        try await killer.query(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", [name]
                        )
                        _ = try await Poll.until(timeout: .seconds(20), "the backend to exit") { () async throws -> Bool? in
                            try await Self.backends(killer, named: name) == 0 ? true : nil
                        }
                        try await session.query("SELECT 1")
                    }
                }
                let reopened = try await Self.backends(killer, named: name)
                #expect(reopened == 0, "no connection was opened to send ROLLBACK")
                #expect(await client.ping())
            }
        }
    }

    @Test("a connection that breaks during a lease is not replaced in it: the statements after it fail instead of running outside their transaction")
    func noReconnectWithinALease() async throws {
        let name = "tollgate-test-lease"
        let (client, killer) = try await Self.clients(named: name, connections: 1)
        try await TestEnvironment.using(killer, client) {
            try await client.withConnection { session in
                try await session.query("BEGIN")
                try await session.query("CREATE TABLE half (id int)")
                try await killer.query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", [name]
                )
                _ = try await Poll.until(timeout: .seconds(20), "the backend to exit") { () async throws -> Bool? in
                    try await Self.backends(killer, named: name) == 0 ? true : nil
                }
                await #expect(throws: PostgresError.self) { try await session.query("INSERT INTO half VALUES (1)") }
                let error = await #expect(throws: PostgresError.self) { try await session.query("COMMIT") }
                #expect(error?.code == .connection)
            }
            // The next lease connects again.
            #expect(await client.ping())
        }
    }

    @Test("shutting a client down closes its idle connections")
    func shutdownClosesIdleConnections() async throws {
        let name = "tollgate-test-shutdown"
        let (client, observer) = try await Self.clients(named: name, connections: 3)
        try await TestEnvironment.using(observer) {
            let leased = ExpiringCacheTests.Counter()
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Each holds its connection until all three are leased: three connections, however slow the machine.
                for _ in 0..<3 {
                    group.addTask {
                        try await client.withConnection { session in
                            try await session.query("SELECT 1")
                            leased.add()
                            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(10), "three connections leased") {
                                leased.value == 3 ? true : nil
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await Self.backends(observer, named: name) == 3)
            await client.shutdown()
            _ = try await Poll.until(timeout: .seconds(10), "the client's backends to end") { () async throws -> Bool? in
                try await Self.backends(observer, named: name) == 0 ? true : nil
            }
            // Closed by the shutdown, not by the client's release.
            withExtendedLifetime(client) {}
        }
    }

    @Test("a closed client refuses new work with .closed")
    func closedClient() async throws {
        let url = try await TestEnvironment.freshDatabase()
        let client = PostgresClient(url: url, connections: 1)
        #expect(await client.ping())
        await client.shutdown()
        let error = await #expect(throws: PostgresError.self) { try await client.query("SELECT 1") }
        #expect(error?.code == .closed)
    }

    @Test("a statement timeout is read from connection options as PostgreSQL reads them; the last one wins, 0 means none")
    func statementTimeoutOption() {
        let cases: [(String, Duration?)] = [
            ("-c statement_timeout=15s", .seconds(15)),
            ("-c statement_timeout=15s -c statement_timeout=200 -c TimeZone=UTC", .milliseconds(200)),
            ("--statement_timeout=2min", .seconds(120)),
            ("-c statement-timeout=1h", .seconds(3600)),
            ("-c statement_timeout=1d", .seconds(86400)),
            ("-c statement_timeout=500ms", .milliseconds(500)),
            ("-c statement_timeout=750us", .microseconds(750)),
            ("-c statement_timeout=15s -c statement_timeout=0", nil),
            ("-c statement_timeout=1.5s", nil),
            ("-c statement_timeout=15s -c statement_timeout=1.5min", nil),
            ("-c statement_timeout=15s -c statement_timeout=30000.0", nil),
            ("-c statement_timeout=15parsecs", nil),
            ("-c lock_timeout=5s", nil),
            ("", nil),
            // Past INT_MAX milliseconds PostgreSQL refuses the setting; none of these may trap.
            ("-c statement_timeout=2147483647", .milliseconds(2_147_483_647)),
            ("-c statement_timeout=2147483648", nil),
            ("-c statement_timeout=25d", nil),
            ("-c statement_timeout=200000000000000d", nil),
            ("-c statement_timeout=9223372036854775807s", nil),
            ("-c statement_timeout=9223372036854775807", nil),
        ]
        for (options, expected) in cases {
            #expect(PostgresConnection.statementTimeout(in: options) == expected, "\(options)")
        }
    }

    /// PostgreSQL times each statement of a pipeline on its own (each Execute) and sends the results at the
    /// sync point, so a pipeline may run for longer than one statement timeout before anything arrives.
    @Test("a pipeline whose statements each end within the statement timeout runs to its end, past one timeout and its grace")
    func pipelineLongerThanOneTimeout() async throws {
        let client = try await Self.client(statementTimeout: "5s")
        try await TestEnvironment.using(client) {
            // Twenty-four statements of 0.5 s: 12 s in all, past the 5 s timeout and its 5 s grace taken once; each
            // one 4.5 s inside the timeout, so a busy machine's scheduling cannot push one past it.
            let results = try await client.withConnection { session in
                try await session.pipeline(Array(repeating: ("SELECT pg_sleep(0.5)", []), count: 24))
            }
            #expect(results.count == 24)
            // One statement past the timeout is still cancelled by the server.
            let error = await #expect(throws: PostgresError.self) { try await client.query("SELECT pg_sleep(7)") }
            #expect(error?.sqlState == "57014")
        }
    }

    @Test("a server that stops answering mid-call ends the call at the statement timeout and its grace, not never; the client then serves again")
    func silentServer() async throws {
        let client = try await Self.client(statementTimeout: "1s")
        try await TestEnvironment.using(client) {
            let backend = Int32(try #require(try await client.query("SELECT pg_backend_pid() AS pid").first?.decode(Int.self, "pid")))
            // The backend stops: the socket stays open and the kernel acknowledges, but nothing answers.
            try #require(kill(backend, SIGSTOP) == 0, "cannot stop PostgreSQL's backend (is the test database local?)")
            let clock = ContinuousClock()
            let asked = clock.now
            enum Outcome: Sendable { case answered, failed(PostgresError, Duration), stillWaiting }
            let outcome = try await withThrowingTaskGroup(of: Outcome.self) { group in
                group.addTask {
                    do {
                        try await client.query("SELECT 1")
                        return .answered
                    } catch let error as PostgresError {
                        return .failed(error, clock.now - asked)
                    }
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(30))
                    return .stillWaiting
                }
                let first = try #require(try await group.next())
                kill(backend, SIGCONT)
                group.cancelAll()
                return first
            }
            kill(backend, SIGCONT)
            guard case .failed(let error, let after) = outcome else {
                Issue.record("the call did not fail at its deadline: \(outcome)")
                return
            }
            #expect(error.isUnavailable, "\(error)")
            #expect(after >= .seconds(1) + PostgresConnection.answerGrace, "it gave up at \(after)")
            #expect(after < .seconds(20), "it gave up at \(after)")
            // The connection was given up; the next call gets a fresh one.
            let fresh = Int32(try #require(try await client.query("SELECT pg_backend_pid() AS pid").first?.decode(Int.self, "pid")))
            #expect(fresh != backend)
        }
    }

    @Test("a lease that left its session inside a transaction does not hand that transaction to the next lease")
    func leaseLeftInTransaction() async throws {
        let client = PostgresClient(url: try await TestEnvironment.freshDatabase(), connections: 1)
        try await TestEnvironment.using(client) {
            try await client.withConnection { session in
                try await session.query("BEGIN")
                try await session.query("CREATE TABLE left_open (id int)")
            }
            // Inside that transaction, the table it created would be there; outside it, it never was.
            #expect(
                try await client.query("SELECT to_regclass('left_open') IS NULL AS gone").first?.decode(Bool.self, "gone") == true,
                "the statement ran inside the earlier lease's transaction"
            )
        }
    }

    @Test("a migration's session has no statement timeout and no answer deadline; both come back after it")
    func withoutStatementTimeout() async throws {
        let client = try await Self.client(statementTimeout: "300")
        try await TestEnvironment.using(client) {
            try await client.withConnection { session in
                try await session.withoutStatementTimeout {
                    // Longer than the statement timeout and its grace together.
                    try await session.query("SELECT pg_sleep(5.5)")
                    #expect(try await session.query("SHOW statement_timeout").first?.decode(String.self, "statement_timeout") == "0")
                }
                #expect(try await session.query("SHOW statement_timeout").first?.decode(String.self, "statement_timeout") == "300ms")
                let error = await #expect(throws: PostgresError.self) { try await session.query("SELECT pg_sleep(2)") }
                #expect(error?.sqlState == "57014")
            }
        }
    }

    @Test("a session refuses a second task while a statement runs, and any use after its lease ended, without harming the connection")
    func sessionIsOneCallersAtATime() async throws {
        try await TestDatabase.withFresh(connections: 2) { client, url in
            // The slow statement waits for a lock another connection holds, for as long as the test needs:
            // a statement that merely sleeps could end before a loaded machine sees it run.
            let locker = PostgresClient(url: url, connections: 1)
            try await TestEnvironment.using(locker) {
                try await locker.query("SELECT pg_advisory_lock(424242)")
                try await client.withConnection { session in
                    let slow = Task { try await session.query("SELECT pg_advisory_lock(424242) AS locked") }
                    _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(10), "the slow statement to wait") {
                        try await client.query(
                            "SELECT 1 AS waiting FROM pg_stat_activity WHERE datname = current_database() AND query = 'SELECT pg_advisory_lock(424242) AS locked' AND wait_event_type = 'Lock'"
                        ).first != nil ? true : nil
                    }
                    let error = await #expect(throws: PostgresError.self) { try await session.query("SELECT 1") }
                    #expect(error?.code == .misuse)
                    try await locker.query("SELECT pg_advisory_unlock(424242)")
                    _ = try await slow.value
                    // The refused call left the session as it was: it serves its caller again.
                    #expect(try await session.query("SELECT pg_advisory_unlock(424242) AS n").first?.decode(Bool.self, "n") == true)
                }
            }
            let escaped = try await client.withConnection { $0 }
            let error = await #expect(throws: PostgresError.self) { try await escaped.query("SELECT 1") }
            #expect(error?.code == .misuse)
            #expect(try await client.query("SELECT 3 AS n").first?.decode(Int.self, "n") == 3)
        }
    }

    @Test("a kept session's rollback after its lease ended leaves the connection's next lease and its transaction alone")
    func keptSessionRollbackIsRefused() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, _ in
            try await client.query("CREATE TABLE kept_rows (n int)")
            let kept = try await client.withConnection { $0 }
            // The one connection: this transaction runs on the connection the kept session once leased.
            try await client.withTransaction { session in
                try await session.query("INSERT INTO kept_rows VALUES (1)")
                await kept.rollback()
                #expect(try await session.query("SELECT count(*)::int AS n FROM kept_rows").first?.decode(Int.self, "n") == 1)
                try await session.query("INSERT INTO kept_rows VALUES (2)")
            }
            #expect(try await client.query("SELECT count(*)::int AS n FROM kept_rows").first?.decode(Int.self, "n") == 2)
        }
    }

    @Test(
        "a statement timeout a session could not restore (another of its calls ran) is not handed to the next lease",
        .timeLimit(.minutes(1))
    )
    func statementTimeoutNotRestoredIsDropped() async throws {
        let base = try await TestEnvironment.freshDatabase()
        let client = PostgresClient(
            url: try Self.url(base, adding: [URLQueryItem(name: "options", value: "-c statement_timeout=20s")]), connections: 1
        )
        let locker = PostgresClient(url: base, connections: 1)
        try await TestEnvironment.using(client, locker) {
            try await locker.query("SELECT pg_advisory_lock(434343)")
            try await client.withConnection { session in
                let stray = try await session.withoutStatementTimeout {
                    // A statement of the lease still runs when the timeout should come back: the reset must not
                    // run beside it on the same connection.
                    let stray = Task { try await session.query("SELECT pg_advisory_lock(434343) AS locked") }
                    _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(5), "the stray statement to start") {
                        session.slot.use.withLock { $0.busy } ? true : nil
                    }
                    return stray
                }
                try await locker.query("SELECT pg_advisory_unlock(434343)")
                _ = try await stray.value
            }
            #expect(try await client.query("SHOW statement_timeout").first?.decode(String.self, "statement_timeout") == "20s")
        }
    }

    @Test(
        "an answer whose last TLS record libpq could read only part of is read at once, not given up at the deadline",
        .timeLimit(.minutes(2))
    )
    func tlsRecordLargerThanTheRoomLeft() async throws {
        let base = try await TestEnvironment.freshDatabase()
        let proxy = try await TLSRecordProxy(upstreamPort: try #require(URLComponents(string: base)?.port))
        var components = try #require(URLComponents(string: base))
        components.port = proxy.port
        // A statement timeout gives every call a deadline, so the client waits on the socket itself (libpq's
        // own wait, without one, looks inside OpenSSL first). Its 10 s (15 s with the grace) leave the proxy
        // room on a loaded machine; the old defect still fails the call, at that deadline.
        let url = try Self.url(
            try #require(components.string),
            adding: [URLQueryItem(name: "sslmode", value: "require"), URLQueryItem(name: "options", value: "-c statement_timeout=10s")]
        )
        let client = PostgresClient(url: url, connections: 1)
        try await TestEnvironment.using(client, proxy) {
            // Rows of 5 KB: the answer's last 16 KB record starts part-way through a row, and libpq's 16 KB
            // buffer, holding that row's beginning, has less room than the record.
            for _ in 0..<3 {
                let result = try await client.query("SELECT repeat('x', 5000) AS x FROM generate_series(1, 20)")
                #expect(result.rows.count == 20)
                #expect(try result.first?.decode(String.self, "x").count == 5000)
            }
        }
    }

    @Test("a statement a kept session started inside its lease ends before the connection serves the next lease")
    func leaseEndsAfterItsLastCall() async throws {
        try await TestDatabase.withFresh(connections: 1) { client, url in
            // The stray statement waits for a lock another connection holds until the test has seen it run: a
            // statement that merely sleeps could end before a loaded machine sees it.
            let locker = PostgresClient(url: url, connections: 1)
            try await TestEnvironment.using(locker) {
                try await locker.query("SELECT pg_advisory_lock(454545)")
                let stray = try await client.withConnection { session in
                    let stray = Task { try await session.query("SELECT pg_advisory_lock(454545) AS locked") }
                    _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(5), "the stray statement to start") {
                        session.slot.use.withLock { $0.busy } ? true : nil
                    }
                    // Let go while the lease ends: its end waits for the stray statement.
                    Task { try await locker.query("SELECT pg_advisory_unlock(454545)") }
                    return stray
                }
                // The one connection: the next lease waits for the stray statement, instead of meeting it.
                #expect(try await client.query("SELECT 3 AS n").first?.decode(Int.self, "n") == 3)
                _ = try await stray.value
            }
        }
    }
}
