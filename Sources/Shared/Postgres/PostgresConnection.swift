import CLibPQ
import Foundation

/// One libpq connection: the only place in Tollgate that touches a `PGconn`.
///
/// Every method blocks, so it is called only from a thread of ``PostgresClient``'s own pool, and by one
/// thread at a time (the pool leases a connection to one caller).
final class PostgresConnection {
    private let handle: OpaquePointer

    /// Connects with a `postgres://` URL; sessions run in UTC with ISO dates so timestamps parse back.
    init(url: String) throws {
        let keywords = ["dbname", "application_name", "options", "connect_timeout"]
        let values = [url, "tollgate", "-c TimeZone=UTC -c DateStyle=ISO", "10"]
        let handle = Self.withCStrings(keywords) { keywordPointers in
            Self.withCStrings(values) { valuePointers in
                // expand_dbname = 1: the first "dbname" is a URL; later keywords override its parts.
                PQconnectdbParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let handle else { throw PostgresError(.connection, "cannot allocate a libpq connection") }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = Self.message(PQerrorMessage(handle))
            PQfinish(handle)
            throw PostgresError(.connection, message)
        }
        // Server notices ("relation … already exists, skipping") are not errors; libpq would print them to stderr.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
        self.handle = handle
    }

    deinit {
        PQfinish(self.handle)
    }

    /// Whether the server connection is still good.
    var isHealthy: Bool { PQstatus(self.handle) == CONNECTION_OK }

    /// Whether the session is inside a transaction block that was not closed (after an error mid-way).
    var isInTransaction: Bool { PQtransactionStatus(self.handle) != PQTRANS_IDLE }

    /// Runs one statement with `$1…` parameters bound as text; values are never spliced into SQL.
    func execute(_ sql: String, _ parameters: [String?]) throws -> PostgresResult {
        let result = Self.withOptionalCStrings(parameters) { values in
            PQexecParams(self.handle, sql, Int32(parameters.count), nil, values, nil, nil, 0)
        }
        guard let result else {
            throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle)))
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return Self.rows(of: result)
        default:
            throw Self.error(from: result, healthy: self.isHealthy)
        }
    }

    /// Runs SQL text with no parameters, several statements allowed (migrations). Values are never
    /// spliced into it: anything carrying a value goes through ``execute(_:_:)``.
    func executeScript(_ sql: String) throws {
        guard let result = PQexec(self.handle, sql) else {
            throw PostgresError(.connection, Self.message(PQerrorMessage(self.handle)))
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return
        default:
            throw Self.error(from: result, healthy: self.isHealthy)
        }
    }

    private static func error(from result: OpaquePointer, healthy: Bool) -> PostgresError {
        let sqlState = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
        let message = primary ?? Self.message(PQresultErrorMessage(result))
        return PostgresError(healthy ? .server : .connection, sqlState: sqlState, message)
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
        return PostgresResult(rows: rows, affectedRows: affected)
    }

    private static func message(_ pointer: UnsafeMutablePointer<CChar>?) -> String {
        guard let pointer else { return "unknown libpq error" }
        return String(cString: pointer).trimmingCharacters(in: .whitespacesAndNewlines)
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
