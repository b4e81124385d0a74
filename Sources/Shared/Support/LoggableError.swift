import AsyncHTTPClient

/// What a log line or a dead letter may say of an error.
public enum LoggableError {
    /// The text of Tollgate's own client errors, written to hold no request data or secret (credentials
    /// redacted, Redis keys hashed, no statement parameters), and of async-http-client's (a code, no URL or
    /// body); only the type of any other error, whose text could quote a body, a header or a URL.
    public static func describe(_ error: any Error) -> String {
        switch error {
        case let error as PostgresError: "\(error)"
        case let error as RedisError: "\(error)"
        case let error as HTTPClientError: "\(error)"
        default: String(describing: type(of: error))
        }
    }
}
