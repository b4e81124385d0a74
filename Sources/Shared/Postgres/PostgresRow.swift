import Foundation

/// One row of a result, in PostgreSQL's text format, decoded to Swift types on demand.
public struct PostgresRow: Sendable {
    let columns: PostgresColumns
    let values: [String?]

    /// Decodes the column `name`.
    /// - Throws: ``PostgresError`` (`.decoding`) when the column is missing or the value does not decode.
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, _ name: String) throws -> T {
        guard let index = self.columns.index[name] else {
            throw PostgresError(.decoding, "no column \(name)")
        }
        return try self.decode(type, at: index, name: name)
    }

    /// Decodes the column at `index` (0-based).
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, at index: Int) throws -> T {
        try self.decode(type, at: index, name: "#\(index)")
    }

    private func decode<T: PostgresDecodable>(_ type: T.Type, at index: Int, name: String) throws -> T {
        guard self.values.indices.contains(index) else { throw PostgresError(.decoding, "no column \(name)") }
        guard let value = T.decode(postgresText: self.values[index]) else {
            throw PostgresError(.decoding, "column \(name) does not decode as \(T.self)")
        }
        return value
    }
}

/// Column names of a result, shared by its rows.
final class PostgresColumns: Sendable {
    let names: [String]
    let index: [String: Int]

    init(names: [String]) {
        self.names = names
        var index: [String: Int] = [:]
        for (position, name) in names.enumerated() where index[name] == nil { index[name] = position }
        self.index = index
    }
}

/// The rows a statement returned, and how many rows it touched.
public struct PostgresResult: Sendable {
    /// The rows, in order.
    public let rows: [PostgresRow]
    /// `INSERT`/`UPDATE`/`DELETE` row count (0 for other statements).
    public let affectedRows: Int
    /// The server's command tag (`INSERT 0 1`, `COMMIT`, `ROLLBACK`, …); empty when none came.
    public let commandTag: String

    init(rows: [PostgresRow], affectedRows: Int, commandTag: String = "") {
        self.rows = rows
        self.affectedRows = affectedRows
        self.commandTag = commandTag
    }

    /// The first row, if any.
    public var first: PostgresRow? { self.rows.first }
}
