import Foundation

/// Where and how to reach Redis, parsed from a `redis://[[user]:password@]host:port[/db]` URL.
public struct RedisConfiguration: Sendable, Equatable {
    /// Host name or address.
    public var host: String
    /// TCP port.
    public var port: Int
    /// ACL user name, when the URL names one.
    public var username: String?
    /// Password, when the URL carries one.
    public var password: String?
    /// Logical database index.
    public var database: Int
    /// Timeout for connecting and for each reply, in milliseconds.
    public var timeoutMilliseconds: Int = 10_000

    /// Parses a Redis URL.
    /// - Throws: ``ConfigurationError`` naming `variable` when the URL is malformed.
    public init(url: String, variable: String = "TOLLGATE_REDIS_URL") throws {
        guard let components = URLComponents(string: url), components.scheme == "redis",
            let host = components.host, !host.isEmpty
        else {
            throw ConfigurationError(variable: variable, "expected redis://[:password@]host:port[/db]")
        }
        self.host = host
        self.port = components.port ?? 6379
        guard (1...65535).contains(self.port) else {
            throw ConfigurationError(variable: variable, "port must be 1-65535")
        }
        self.username = components.user.flatMap { $0.isEmpty ? nil : $0 }
        self.password = components.password.flatMap { $0.isEmpty ? nil : $0 }
        // Clients read `redis://word@host` differently (a user name, or a password): neither is guessed,
        // since either guess would connect without the password meant and fail every command later.
        if self.username != nil, self.password == nil {
            throw ConfigurationError(
                variable: variable, "a user name needs a password: redis://user:password@host, or redis://:password@host for a password alone"
            )
        }
        let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        if path.isEmpty {
            self.database = 0
        } else if let database = Int(path), database >= 0 {
            self.database = database
        } else {
            throw ConfigurationError(variable: variable, "the database after the host must be a number")
        }
    }
}
