import CLibPQ
import Foundation

/// One libpq connection: the only place in Tollgate that touches a `PGconn`.
///
/// Every method blocks, so it is called only from a thread of ``PostgresClient``'s own pool, and by one
/// thread at a time (the pool leases a connection to one caller).
final class PostgresConnection {
    private let handle: OpaquePointer
    /// The server said it is ending the session (a FATAL message while the connection was idle: a
    /// restart, a terminated backend), though the socket may not be closed yet.
    private var ending = false
    /// Statements prepared on this session, by SQL text: parsed and planned once per connection, not per call.
    private var prepared: [String: String] = [:]
    /// Statements prepared so far, for unique names: one forgotten (its plan changed) is not prepared again
    /// under its name while the server may still hold it.
    private var preparedNames = 0
    /// Prepared statements forgotten inside a transaction, deallocated once the session is idle again.
    private var stalePrepared: [String] = []
    /// Tollgate's statements are fixed strings; past this many, further texts run unprepared.
    private static let maxPrepared = 512

    /// A statement running longer fails (SQLSTATE 57014) instead of holding its caller, its connection
    /// and the callers waiting for one; the URL's `options` may set another (`-c statement_timeout=…`).
    static let defaultStatementTimeout = "15s"
    /// How long past its statement timeout a call waits for the server's answer before it gives the
    /// connection up: the server enforces the timeout itself (on each statement of a pipeline), so a
    /// server that says nothing by then is not running the statement (a stopped backend, a proxy whose
    /// other side froze) and never will.
    static let answerGrace = Duration.seconds(5)

    /// The session's statement timeout when it connected (`nil`: none, or a value this cannot read).
    let statementTimeout: Duration?
    /// How long a call waits for the server's answer, from when it is sent; `nil` waits as long as it takes.
    var answerDeadline: Duration? = nil
    /// The wait that follows the session's statement timeout.
    var defaultAnswerDeadline: Duration? { self.statementTimeout.map { $0 + Self.answerGrace } }

    /// Connects with a `postgres://` URL; sessions run in UTC with ISO dates, hex bytea and UTF-8 so
    /// values parse back, and at READ COMMITTED. Defaults the URL may override: TCP keepalives and a user
    /// timeout, which end a call to a server that vanished (a failover, a dropped network) in about 30 s
    /// rather than hours, the connect timeout, the application name, and ``defaultStatementTimeout``.
    init(url: String) throws {
        // expand_dbname = 1: the first "dbname" is a URL; what it sets overrides the keywords before it,
        // and the keywords after it override what it sets. Only `options` comes after: the URL's own
        // options, then the settings values are parsed back with and the isolation level, which must win.
        let keywords = [
            "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "application_name", "connect_timeout",
            "dbname", "client_encoding", "options",
        ]
        let options = [
            "-c statement_timeout=\(Self.defaultStatementTimeout)", Self.urlOptions(url), "-c TimeZone=UTC -c DateStyle=ISO -c bytea_output=hex",
            // The grants' SQL relies on each statement seeing what committed before it (the purchase locks):
            // a role's or database's REPEATABLE READ default would let a refund miss the grant it waited on.
            #"-c default_transaction_isolation=read\ committed"#,
        ].filter { !$0.isEmpty }.joined(separator: " ")
        self.statementTimeout = Self.statementTimeout(in: options)
        let values = ["10", "5", "3", "30000", "tollgate", "10", url, "UTF8", options]
        let handle = Self.withCStrings(keywords) { keywordPointers in
            Self.withCStrings(values) { valuePointers in
                PQconnectdbParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let handle else { throw PostgresError(.connection, "cannot allocate a libpq connection") }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = Self.redacting(url, in: Self.message(PQerrorMessage(handle)))
            PQfinish(handle)
            throw PostgresError(.connection, message)
        }
        self.handle = handle
        self.answerDeadline = self.defaultAnswerDeadline
        // Server notices ("relation … already exists, skipping") are not errors; libpq would print them to
        // stderr. Only a FATAL one matters: libpq reports the error a server sends before it closes an idle
        // session as a notice. The receiver runs inside libpq calls on this connection, while it is alive.
        PQsetNoticeReceiver(handle, { context, result in
            guard let context, let result, let severity = PQresultErrorField(result, Int32(UInt8(ascii: "V"))) else { return }
            if ["FATAL", "PANIC"].contains(String(cString: severity)) {
                Unmanaged<PostgresConnection>.fromOpaque(context).takeUnretainedValue().ending = true
            }
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit {
        PQfinish(self.handle)
    }

    /// The `options` the URL sets, or "" (also for a URL libpq cannot read: connecting reports that).
    private static func urlOptions(_ url: String) -> String {
        guard let options = PQconninfoParse(url, nil) else { return "" }
        defer { PQconninfoFree(options) }
        var option = options
        while let keyword = option.pointee.keyword {
            if String(cString: keyword) == "options", let value = option.pointee.val { return String(cString: value) }
            option += 1
        }
        return ""
    }

    /// The last `statement_timeout` that connection options set (`-c statement_timeout=15s`,
    /// `--statement_timeout=500`), as PostgreSQL reads it: a bare number is milliseconds. `nil` for 0
    /// (no timeout) and for what this cannot read (which then has no deadline on the client's side either).
    static func statementTimeout(in options: String) -> Duration? {
        // The last setting wins, as in PostgreSQL; one this cannot read means no deadline, never the earlier one.
        guard let setting = options.matches(of: /statement[_-]timeout=(\S*)/).last?.1,
            let match = setting.wholeMatch(of: /(\d+)(us|ms|s|min|h|d)?/),
            let amount = Int64(match.1), amount > 0
        else { return nil }
        let microsecondsPerUnit: Int64 =
            switch match.2 {
            case "us": 1
            case "s": 1_000_000
            case "min": 60_000_000
            case "h": 3_600_000_000
            case "d": 86_400_000_000
            default: 1000
            }
        // PostgreSQL takes at most INT_MAX milliseconds (24.8 days) and refuses the connection past that.
        let (microseconds, overflow) = amount.multipliedReportingOverflow(by: microsecondsPerUnit)
        guard !overflow, microseconds <= Int64(Int32.max) * 1000 else { return nil }
        return .microseconds(microseconds)
    }

    /// Why libpq could not use this URL (an unknown parameter, a bad escape, an `sslmode` it does not
    /// know), credentials redacted; `nil` when it reads it. Parses only: no network, no blocking.
    static func problem(in url: String) -> String? {
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(url, &error) else {
            defer { if let error { PQfreemem(error) } }
            return Self.redacting(url, in: Self.message(error))
        }
        defer { PQconninfoFree(options) }
        var option = options
        while let keyword = option.pointee.keyword {
            if String(cString: keyword) == "sslmode", let value = option.pointee.val {
                let mode = String(cString: value)
                let known = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]
                if !known.contains(mode) { return "invalid sslmode value: \"\(mode)\" (expected one of \(known.joined(separator: ", ")))" }
            }
            option += 1
        }
        return nil
    }

    /// A warning when `url` reaches a server on another machine without verifying it: an `sslmode` short of
    /// `verify-ca`, so the connection may be unencrypted, or encrypted to whoever answers. Where the URL leaves
    /// them out, libpq's environment variables (`PGHOST`, `PGHOSTADDR`, `PGSSLMODE`, `PGSSLROOTCERT`) count, then
    /// its defaults (a Unix socket, `prefer`). `require` with a root certificate named is `verify-ca` to libpq.
    /// `nil` for Unix sockets, loopback hosts and URLs libpq cannot read. Never shows the URL's credentials.
    static func transportWarning(in url: String, environment: [String: String]) -> String? {
        guard let options = PQconninfoParse(url, nil) else { return nil }
        defer { PQconninfoFree(options) }
        var values: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { values[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        let host = values["hostaddr"] ?? values["host"] ?? environment["PGHOSTADDR"] ?? environment["PGHOST"] ?? ""
        let hosts = host.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
        let remote = hosts.filter { host in
            !(host.isEmpty || host.hasPrefix("/") || host == "localhost" || host == "::1" || host.hasPrefix("127."))
        }
        let mode = values["sslmode"] ?? environment["PGSSLMODE"] ?? "prefer"
        let rootCertificate = values["sslrootcert"] ?? environment["PGSSLROOTCERT"]
        guard let first = remote.first, !["verify-ca", "verify-full"].contains(mode), !(mode == "require" && rootCertificate != nil) else { return nil }
        let risk = mode == "require" ? "encrypted, but to whichever server answers" : "possibly unencrypted, to whichever server answers"
        // A password holding a raw `@` ends, for libpq, at the first one, and the rest reads as part of the host:
        // a host that is not a plain name or address is not shown.
        let shown = first.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || ".-:".contains($0)) }) ? first : "a host the URL names"
        return Self.redacting(url, in: "TOLLGATE_DATABASE_URL reaches \(shown) with sslmode=\(mode): \(risk); use sslmode=verify-full (ops/OPERATIONS.md, PostgreSQL)")
    }

    /// libpq quotes the part of a URL it cannot read (a password with a bare `%` or a space, say) in its
    /// error: the URL, its credentials and its password, raw or decoded, become `***` before the text
    /// reaches an error or a log. The credentials end at the first `@` (as libpq reads them) or the last
    /// (as a password holding an `@` would); a password may also come as a `password=` parameter, in the
    /// query or in a `key=value` connection string, where the parameters after it may be parts of it.
    static func redacting(_ url: String, in message: String) -> String {
        var secrets = [url]
        if let scheme = url.range(of: "://") {
            let rest = url[scheme.upperBound...]
            for at in [rest.firstIndex(of: "@"), rest.lastIndex(of: "@")].compactMap({ $0 }) {
                let credentials = rest[..<at]
                secrets.append(String(credentials))
                if let colon = credentials.firstIndex(of: ":") { secrets.append(String(credentials[credentials.index(after: colon)...])) }
            }
        }
        for match in url.matches(of: /password\s*=\s*([^&\s]+)/) {
            secrets.append(String(match.1))
            if let decoded = String(match.1).removingPercentEncoding { secrets.append(decoded) }
            // A bare `&` in the password ends it early: libpq quotes what follows as parameters (or their
            // names) it cannot read, so every parameter after it counts as a part of the password.
            for parameter in url[match.range.upperBound...].split(separator: "&") {
                secrets.append(String(parameter))
                if let name = parameter.split(separator: "=").first { secrets.append(String(name)) }
            }
        }
        if let password = URLComponents(string: url)?.password { secrets.append(password) }
        var text = message
        for secret in secrets.sorted(by: { $0.count > $1.count }) where secret.count >= 2 {
            text = text.replacingOccurrences(of: secret, with: "***")
        }
        return text
    }

    /// Whether the server connection is still good, as far as libpq has seen.
    var isHealthy: Bool { PQstatus(self.handle) == CONNECTION_OK }

    /// Whether the server connection is still good after reading, without blocking (libpq's sockets are
    /// non-blocking), what the server sent while it was idle: a server that restarts or terminates the
    /// backend sends a FATAL error, then closes the socket (libpq then marks the connection bad).
    var isAlive: Bool {
        guard self.isHealthy, PQconsumeInput(self.handle) == 1 else { return false }
        _ = PQisBusy(self.handle)  // parses what arrived: a FATAL error reaches the notice receiver
        return !self.ending && self.isHealthy
    }

    /// Whether the session is inside a transaction block that was not closed (after an error mid-way).
    var isInTransaction: Bool { PQtransactionStatus(self.handle) != PQTRANS_IDLE }

    /// Runs one statement with `$1…` parameters bound as text; values are never spliced into SQL.
    ///
    /// Queries and data changes are prepared once per connection (the server keeps their plans);
    /// anything else (BEGIN, COMMIT, DDL) runs as is.
    ///
    /// A prepared statement whose result type changed since it was prepared (a newer release's migration
    /// altered a column it returns, while this process runs) fails with 0A000, on every call, until it is
    /// prepared again: it is forgotten then, and run again at once outside a transaction (the failed call
    /// changed nothing); inside one, the transaction has failed, and the caller's next attempt prepares it.
    func execute(_ sql: String, _ parameters: [String?]) throws -> PostgresResult {
        try Self.refuseNUL(parameters)
        do {
            return try self.executeOnce(sql, parameters)
        } catch let error as PostgresError where self.forgetChangedPlans(error, of: [sql]) && !self.isInTransaction {
            return try self.executeOnce(sql, parameters)
        }
    }

    /// Forgets the prepared statements among `texts` when `error` says a plan's result type changed
    /// (0A000, "cached plan must not change result type"); whether it did.
    private func forgetChangedPlans(_ error: PostgresError, of texts: [String]) -> Bool {
        guard error.code == .server, error.sqlState == "0A000" else { return false }
        var forgot = false
        for sql in texts {
            guard let name = self.prepared.removeValue(forKey: sql) else { continue }
            self.stalePrepared.append(name)
            forgot = true
        }
        return forgot
    }

    /// Releases the server's copies of forgotten statements, once no transaction is open (in a failed one
    /// the server would refuse the command).
    private func deallocateStale() throws {
        guard !self.stalePrepared.isEmpty, !self.isInTransaction else { return }
        let names = self.stalePrepared
        self.stalePrepared = []
        for name in names { _ = try self.executeOnce("DEALLOCATE \(name)", []) }
    }

    private func executeOnce(_ sql: String, _ parameters: [String?]) throws -> PostgresResult {
        try self.deallocateStale()
        let statement = try self.preparedName(for: sql, parameterCount: parameters.count)
        let deadline = self.deadline()
        return try self.sending(mayCommit: Self.mayCommit([sql], inTransaction: self.isInTransaction)) {
            let sent = Self.withOptionalCStrings(parameters) { values in
                if let statement {
                    PQsendQueryPrepared(self.handle, statement, Int32(parameters.count), values, nil, nil, 0)
                } else {
                    PQsendQueryParams(self.handle, sql, Int32(parameters.count), nil, values, nil, nil, 0)
                }
            }
            guard sent == 1 else { throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle))) }
            return try Self.checkCommit(sql, self.results(until: deadline))
        }
    }

    /// Runs `call`, which sends statements and reads their answers. When the connection is lost on the way and
    /// the statements may commit a change, the error says the change may have been made
    /// (``PostgresError/outcomeUnknown``). A send that failed counts too: part of it may have gone out, and a
    /// `COMMIT` takes effect on its `Execute` message, before the `Sync` that ends it.
    private func sending<T>(mayCommit: Bool, _ call: () throws -> T) throws -> T {
        do {
            return try call()
        } catch let error as PostgresError where mayCommit && error.code == .connection {
            throw PostgresError(error.code, sqlState: error.sqlState, error.message, outcomeUnknown: true)
        }
    }

    /// Whether running `statements` in order, from a session inside a transaction block or not, may commit a
    /// change: a `COMMIT` (or `END`) of an open block, or, outside one, any statement but a read (`SELECT`,
    /// `SHOW`, `VALUES`, `TABLE`) or one that changes nothing durable (`BEGIN`, `ROLLBACK`, `SET`, …). What runs
    /// inside a block commits only with it. A statement whose first word this does not know counts as a change.
    static func mayCommit(_ statements: [String], inTransaction: Bool) -> Bool {
        var open = inTransaction
        for sql in statements {
            switch Self.keyword(of: sql) {
            case "BEGIN", "START":
                open = true
            case "COMMIT", "END":
                // `COMMIT PREPARED` commits a prepared transaction from outside any block.
                if open || Self.keyword(of: String(sql.drop { $0.isWhitespace }.drop { $0.isLetter })) == "PREPARED" { return true }
            case "ROLLBACK", "ABORT":
                // `ROLLBACK TO SAVEPOINT` keeps the block open: taking it as closed only makes what follows
                // count as a change.
                open = false
            case "SELECT", "SHOW", "VALUES", "TABLE", "SET", "RESET", "DEALLOCATE", "DISCARD":
                break
            default:
                if !open { return true }
            }
        }
        return false
    }

    /// Whether a script (several statements, not split here: dollar quotes and comments make that a parser's
    /// work) may commit a change: outside a transaction block always, inside one when its text names `COMMIT`
    /// anywhere. A migration runs inside its own block, and names none.
    static func scriptMayCommit(_ sql: String, inTransaction: Bool) -> Bool {
        !inTransaction || sql.range(of: "COMMIT", options: .caseInsensitive) != nil
    }

    /// The statement's first word, in capitals (`""` when it starts with anything else, a comment say).
    static func keyword(of sql: String) -> String {
        let letters = sql.utf8.drop { $0 == 0x20 || $0 == 0x0a || $0 == 0x09 || $0 == 0x0d }.prefix { (0x41...0x5a).contains($0 & 0xdf) }
        return String(decoding: letters, as: UTF8.self).uppercased()
    }

    /// A `COMMIT` of a transaction in which a statement failed is answered `ROLLBACK`, not an error: had
    /// the failure been caught and the transaction carried on, its writes would vanish without a word.
    /// That answer is an error here (25P02, "in failed SQL transaction").
    static func checkCommit(_ sql: String, _ result: PostgresResult) throws -> PostgresResult {
        guard result.commandTag == "ROLLBACK", Self.keyword(of: sql) == "COMMIT" else { return result }
        throw PostgresError(.server, sqlState: "25P02", "COMMIT rolled the transaction back: a statement in it had failed")
    }

    /// When the answer to a call sent now is due.
    private func deadline(statements: Int = 1) -> ContinuousClock.Instant? {
        self.answerDeadline.map { ContinuousClock.now + $0 + (self.statementTimeout ?? .zero) * (statements - 1) }
    }

    /// Reads every result of the call just sent (one per statement of its text), up to the NULL that ends
    /// them: the last one's rows, or the first error.
    private func results(until deadline: ContinuousClock.Instant?) throws -> PostgresResult {
        let (rows, error) = try self.readResults(until: deadline)
        if let error { throw error }
        guard self.isHealthy else { throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle))) }
        return rows ?? PostgresResult(rows: [], affectedRows: 0)
    }

    /// Reads results up to the NULL that ends a call's (or one pipelined statement's): the last rows and
    /// the first error, if any. A statement the server skipped after an earlier failure in a pipeline
    /// (`PIPELINE_ABORTED`) has neither.
    private func readResults(until deadline: ContinuousClock.Instant?) throws -> (rows: PostgresResult?, error: PostgresError?) {
        var rows: PostgresResult?
        var firstError: PostgresError?
        while let result = try self.nextResult(until: deadline) {
            defer { PQclear(result) }
            switch PQresultStatus(result) {
            case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
                rows = Self.rows(of: result)
            case PGRES_PIPELINE_ABORTED:
                break
            case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
                // libpq would hand out this result again and again, never the NULL that ends the call: the
                // session is mid-COPY, and is given up (a `.connection` error: the pool drops it).
                throw PostgresError(.connection, "COPY is not supported through this client")
            default:
                if firstError == nil { firstError = Self.error(from: result, healthy: self.isHealthy) }
            }
        }
        return (rows, firstError)
    }

    /// `PQgetResult`, which blocks until the server's next answer, once that answer is in; past `deadline`
    /// the connection is given up instead (a `.connection` error: the pool drops it).
    private func nextResult(until deadline: ContinuousClock.Instant?) throws -> OpaquePointer? {
        if let deadline {
            while PQisBusy(self.handle) == 1 {
                // The rest of a TLS record libpq read only part of (its buffer had less room) waits inside
                // OpenSSL, not on the socket: when it ends the answer, a poll would wait until the deadline.
                if tollgate_pq_tls_pending(self.handle) > 0 {
                    guard PQconsumeInput(self.handle) == 1 else { throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle))) }
                    continue
                }
                let left = deadline - ContinuousClock.now
                guard left > .zero else {
                    throw PostgresError(.connection, "PostgreSQL sent no answer within \(self.answerDeadline ?? .zero) (statement timeout and grace)")
                }
                let (seconds, attoseconds) = left.components
                let milliseconds = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
                var socket = pollfd(fd: PQsocket(self.handle), events: Int16(POLLIN), revents: 0)
                let ready = poll(&socket, 1, milliseconds)
                if ready < 0, errno != EINTR {
                    throw PostgresError(.connection, "cannot wait for PostgreSQL's answer: \(String(cString: strerror(errno)))")
                }
                if ready > 0, PQconsumeInput(self.handle) != 1 {
                    throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle)))
                }
            }
        }
        return PQgetResult(self.handle)
    }

    /// Runs several statements in one round trip (libpq's pipeline mode): all are sent, then all results
    /// are read. After a failing statement the rest are skipped by the server; the first error is thrown
    /// (inside a transaction, the caller rolls back as after any failed statement).
    func executePipeline(_ statements: [(sql: String, parameters: [String?])]) throws -> [PostgresResult] {
        for statement in statements { try Self.refuseNUL(statement.parameters) }
        do {
            return try self.executePipelineOnce(statements)
        } catch let error as PostgresError where self.forgetChangedPlans(error, of: statements.map(\.sql)) && !self.isInTransaction {
            return try self.executePipelineOnce(statements)
        }
    }

    private func executePipelineOnce(_ statements: [(sql: String, parameters: [String?])]) throws -> [PostgresResult] {
        try self.deallocateStale()
        // Preparing is a round trip of its own, done before the pipeline (once per connection and text).
        let names = try statements.map { try self.preparedName(for: $0.sql, parameterCount: $0.parameters.count) }
        let mayCommit = Self.mayCommit(statements.map(\.sql), inTransaction: self.isInTransaction)
        guard PQenterPipelineMode(self.handle) == 1 else {
            throw PostgresError(.connection, "cannot enter pipeline mode: \(Self.message(PQerrorMessage(self.handle)))")
        }
        defer { PQexitPipelineMode(self.handle) }
        return try self.sending(mayCommit: mayCommit) {
            try self.runPipeline(statements, names: names)
        }
    }

    /// Sends a pipeline's statements, prepared under `names` (or not), and reads their results.
    private func runPipeline(_ statements: [(sql: String, parameters: [String?])], names: [String?]) throws -> [PostgresResult] {
        for (index, statement) in statements.enumerated() {
            let sent = Self.withOptionalCStrings(statement.parameters) { values in
                if let name = names[index] {
                    PQsendQueryPrepared(self.handle, name, Int32(statement.parameters.count), values, nil, nil, 0)
                } else {
                    PQsendQueryParams(self.handle, statement.sql, Int32(statement.parameters.count), nil, values, nil, nil, 0)
                }
            }
            guard sent == 1 else { throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle))) }
        }
        guard PQpipelineSync(self.handle) == 1 else { throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle))) }
        // PostgreSQL times each statement of a pipeline on its own, and sends their results together at the
        // sync point: the wait allows every statement its timeout.
        let deadline = self.deadline(statements: statements.count)

        var results: [PostgresResult] = []
        var firstError: PostgresError?
        for _ in statements {
            // Each statement's results end with a NULL; the first error is thrown after the sync point.
            let (answer, error) = try self.readResults(until: deadline)
            if firstError == nil { firstError = error }
            guard self.isHealthy else { throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle))) }
            if firstError == nil, let answer {
                do { _ = try Self.checkCommit(statements[results.count].sql, answer) } catch let error as PostgresError { firstError = error }
            }
            results.append(answer ?? PostgresResult(rows: [], affectedRows: 0))
        }
        // Then the sync point.
        while let result = try self.nextResult(until: deadline) {
            let status = PQresultStatus(result)
            PQclear(result)
            if status == PGRES_PIPELINE_SYNC { break }
        }
        if let firstError { throw firstError }
        return results
    }

    /// The name of `sql` prepared on this session (preparing it now if needed), or `nil` to run it unprepared.
    private func preparedName(for sql: String, parameterCount: Int) throws -> String? {
        if let name = self.prepared[sql] { return name }
        guard self.prepared.count < Self.maxPrepared, Self.isPreparable(sql) else { return nil }
        self.preparedNames += 1
        let name = "tg_\(self.preparedNames)"
        let deadline = self.deadline()
        guard PQsendPrepare(self.handle, name, sql, Int32(parameterCount), nil) == 1 else {
            throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle)))
        }
        _ = try self.results(until: deadline)
        self.prepared[sql] = name
        return name
    }

    /// Plannable statements: SELECT, INSERT, UPDATE, DELETE, WITH.
    static func isPreparable(_ sql: String) -> Bool {
        ["SELECT", "INSERT", "UPDATE", "DELETE", "WITH"].contains(Self.keyword(of: sql))
    }

    /// Runs SQL text with no parameters, several statements allowed (migrations). Values are never
    /// spliced into it: anything carrying a value goes through ``execute(_:_:)``.
    func executeScript(_ sql: String) throws {
        let deadline = self.deadline()
        try self.sending(mayCommit: Self.scriptMayCommit(sql, inTransaction: self.isInTransaction)) {
            guard PQsendQuery(self.handle, sql) == 1 else {
                throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle)))
            }
            _ = try self.results(until: deadline)
        }
    }

    private static func error(from result: OpaquePointer, healthy: Bool) -> PostgresError {
        let sqlState = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
        var message = primary ?? Self.message(PQresultErrorMessage(result))
        if sqlState?.hasPrefix("22") == true {
            // Data exceptions quote the value refused (`invalid input syntax for type uuid: "…"`), which
            // came from a request or from Apple: it does not go on to an error or a log. From the first
            // quote to the last, since the value may hold quotes of its own.
            message = message.replacing(/"(?s:.*)"/, with: "\"…\"")
        }
        // A FATAL or PANIC error ends the session, though libpq may not have seen the socket close yet.
        let severity = PQresultErrorField(result, Int32(UInt8(ascii: "V"))).map { String(cString: $0) }
        let ending = severity == "FATAL" || severity == "PANIC"
        return PostgresError(healthy && !ending ? .server : .connection, sqlState: sqlState, message)
    }

    private static func rows(of result: OpaquePointer) -> PostgresResult {
        let rowCount = Int(PQntuples(result))
        let columnCount = Int(PQnfields(result))
        let names = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
        let columns = PostgresColumns(names: names)
        var rows: [PostgresRow] = []
        rows.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var values: [String?] = []
            values.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    values.append(nil)
                } else {
                    values.append(String(cString: PQgetvalue(result, Int32(row), Int32(column))))
                }
            }
            rows.append(PostgresRow(columns: columns, values: values))
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PostgresResult(rows: rows, affectedRows: affected, commandTag: String(cString: PQcmdStatus(result)))
    }

    private static func message(_ pointer: UnsafeMutablePointer<CChar>?) -> String {
        guard let pointer else { return "unknown libpq error" }
        return String(cString: pointer).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Parameters go to libpq as C strings, which end at the first NUL, and PostgreSQL text cannot hold
    /// one anyway: such a value is refused whole (SQLSTATE 22021, as the server refuses it) instead of
    /// being stored cut short. The value itself is not quoted, since parameters may be secrets.
    private static func refuseNUL(_ parameters: [String?]) throws {
        if let index = parameters.firstIndex(where: { $0?.utf8.contains(0) == true }) {
            throw PostgresError(.server, sqlState: "22021", "parameter $\(index + 1) contains a NUL character, which text cannot hold")
        }
    }

    private static func withCStrings<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        Self.withOptionalCStrings(strings) { pointers in
            body(pointers + [nil])
        }
    }

    private static func withOptionalCStrings<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        let duplicates = strings.map { $0.flatMap { strdup($0) } }
        defer { duplicates.forEach { free($0) } }
        return body(duplicates.map { $0.map { UnsafePointer($0) } })
    }
}
