/// A reply from Redis, decoded from hiredis into plain Swift values.
///
/// Error replies never appear here: they are thrown as ``RedisError``.
public enum RedisValue: Sendable, Equatable {
    /// The nil reply (a missing key, a timed-out blocking read).
    case null
    /// An integer reply.
    case integer(Int)
    /// A bulk string reply, as raw bytes.
    case bulk([UInt8])
    /// A simple string (status) reply such as `OK`.
    case status(String)
    /// An array reply.
    case array([RedisValue])

    /// The reply as text: bulk and status replies decode as UTF-8, integers print in decimal.
    public var string: String? {
        switch self {
        case .bulk(let bytes): String(decoding: bytes, as: UTF8.self)
        case .status(let text): text
        case .integer(let value): String(value)
        case .null, .array: nil
        }
    }

    /// The reply as an integer: integer replies, and bulk strings that hold a decimal integer.
    public var int: Int? {
        switch self {
        case .integer(let value): value
        case .bulk, .status: self.string.flatMap { Int($0) }
        case .null, .array: nil
        }
    }

    /// The elements of an array reply; `nil` for every other kind.
    public var array: [RedisValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    /// Whether this is the nil reply.
    public var isNull: Bool { self == .null }
}
