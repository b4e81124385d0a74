import Foundation

/// Everything a Tollgate process reads from its environment (CONTRACT.md, "Configuration").
///
/// Parsing validates every value up front, so a process with a bad value stops at start with one
/// ``ConfigurationError`` naming the variable, not later in the middle of a request.
public struct Configuration: Sendable {
    /// `TOLLGATE_DATABASE_URL`.
    public var databaseURL: String
    /// `TOLLGATE_REDIS_URL`, parsed.
    public var redis: RedisConfiguration
    /// `TOLLGATE_HTTP_HOST`.
    public var httpHost: String
    /// `TOLLGATE_HTTP_PORT` (0 picks a free port).
    public var httpPort: Int
    /// `TOLLGATE_HTTP_IDLE_TIMEOUT_S`: a connection to the API or a worker's metrics port that sends nothing for
    /// this long, while idle or half-way through a request, is closed, as is one whose request body has not
    /// arrived whole this long after its head.
    public var httpIdleTimeoutSeconds: Int
    /// `TOLLGATE_ADMIN_TOKEN`; `nil` disables the admin routes.
    public var adminToken: String?
    /// `TOLLGATE_APPLE_PRODUCTION_URL`.
    public var appleProductionURL: String
    /// `TOLLGATE_APPLE_SANDBOX_URL`.
    public var appleSandboxURL: String
    /// `TOLLGATE_APPLE_TIMEOUT_MS`.
    public var appleTimeoutMilliseconds: Int
    /// `TOLLGATE_WORKER_CONCURRENCY`.
    public var workerConcurrency: Int
    /// `TOLLGATE_QUEUE_PREFIX`.
    public var queuePrefix: String
    /// `TOLLGATE_METRICS_PORT` (worker; 0 picks a free port).
    public var metricsPort: Int
    /// `TOLLGATE_LOG_LEVEL`.
    public var logLevel: LogLevel
    /// `TOLLGATE_LOG_FORMAT`.
    public var logFormat: LogFormat
    /// `TOLLGATE_RETRY_BASE_MS`, `TOLLGATE_RETRY_MAX_DELAY_MS`, `TOLLGATE_RETRY_MAX_ATTEMPTS`, `TOLLGATE_RETRY_MAX_AGE_S`.
    public var retry: RetryPolicy
    /// `TOLLGATE_CLAIM_MIN_IDLE_MS`.
    public var claimMinIdleMilliseconds: Int
    /// `TOLLGATE_SHUTDOWN_GRACE_S`.
    public var shutdownGraceSeconds: Int
    /// `TOLLGATE_TOKEN_SECRET`; `nil` refuses customer tokens.
    public var tokenSecret: String?
    /// `TOLLGATE_CUSTOMER_TOKEN_TTL_S`: how long a customer token is valid (default 15 minutes).
    public var customerTokenLifetimeSeconds: Int
    /// `TOLLGATE_ACCESS_CACHE_TTL_S`: how long the API serves an access status from memory at most
    /// (default 30 s; 0 turns the cache off). Changes reach the cache at once through Redis pub/sub; the
    /// lifetime only bounds what a missed change could cost.
    public var accessCacheLifetimeSeconds: Int
    /// `TOLLGATE_RATE_LIMIT_PER_S` (0 disables the limit).
    public var rateLimitPerSecond: Int
    /// `TOLLGATE_RATE_LIMIT_BURST` (0 disables the limit too).
    public var rateLimitBurst: Int
    /// `TOLLGATE_WORKER_NAME`: the consumer name in the stream's group. Defaults to host-pid-random, unique
    /// per process; give a stable one (as systemd units do) to let a restarted worker resume its own entries.
    public var workerName: String
    /// `TOLLGATE_JOB_RETENTION_S`: how long a finished job's status stays in Redis (default 7 days).
    public var jobRetentionSeconds: Int
    /// `TOLLGATE_HTTP_PORT_FILE` / `TOLLGATE_METRICS_PORT_FILE`: where to write the port actually bound.
    public var portFile: String?
    /// `TOLLGATE_DATABASE_POOL_SIZE`: PostgreSQL connections of an API process (default 16).
    public var databasePoolSize: Int
    /// PostgreSQL connections of a worker process: `TOLLGATE_DATABASE_POOL_SIZE` when set, else one per 16
    /// verifications in flight and at least 16 (16 at the default concurrency of 256, 32 at 512).
    ///
    /// Every grant holds a connection for two round trips, and a worker that keeps more jobs in flight
    /// commits more grants at once: one worker at 512 in flight granted 8 % more receipts per second
    /// with 32 connections than with 16, whose grants queued for a connection (ops/bench-profile.md).
    public var workerDatabasePoolSize: Int
    /// `TOLLGATE_REDIS_POOL_SIZE`: pipelined Redis connections per process.
    public var redisPoolSize: Int
    /// Values that are valid but unwise (a short secret), for the process to log once it can: never a value.
    public var warnings: [String] = []

    /// Log verbosity.
    public enum LogLevel: String, Sendable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical
    }

    /// Log line format.
    public enum LogFormat: String, Sendable, CaseIterable {
        case json, text
    }

    /// Reads and validates the configuration.
    /// - Parameters:
    ///   - environment: the variables (the process environment by default).
    ///   - portFileVariable: which `*_PORT_FILE` variable this process honours.
    public init(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        portFileVariable: String = "TOLLGATE_HTTP_PORT_FILE"
    ) throws {
        let reader = EnvironmentReader(environment)
        self.databaseURL = try reader.string("TOLLGATE_DATABASE_URL", default: "postgres://tollgate@127.0.0.1:5432/tollgate")
        // libpq reads the rest, including what URLComponents cannot: a Unix socket (postgres:///db?host=/run/postgresql)
        // and several hosts for failover (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write).
        guard self.databaseURL.hasPrefix("postgres://") || self.databaseURL.hasPrefix("postgresql://") else {
            throw ConfigurationError(variable: "TOLLGATE_DATABASE_URL", "expected postgres://user:pass@host:port/db")
        }
        if let problem = PostgresClient.problem(in: self.databaseURL) {
            throw ConfigurationError(variable: "TOLLGATE_DATABASE_URL", problem)
        }
        if let warning = PostgresClient.transportWarning(in: self.databaseURL, environment: environment) {
            self.warnings.append(warning)
        }
        self.redis = try RedisConfiguration(url: reader.string("TOLLGATE_REDIS_URL", default: "redis://127.0.0.1:6379/0"))
        self.httpHost = try reader.host("TOLLGATE_HTTP_HOST", default: "127.0.0.1")
        self.httpPort = try reader.int("TOLLGATE_HTTP_PORT", default: 8080, range: 0...65535)
        self.httpIdleTimeoutSeconds = try reader.int("TOLLGATE_HTTP_IDLE_TIMEOUT_S", default: 75, range: 1...3600)
        self.adminToken = try reader.optionalSecret("TOLLGATE_ADMIN_TOKEN", recommendedLength: 16, warnings: &self.warnings)
        self.appleProductionURL = try reader.url("TOLLGATE_APPLE_PRODUCTION_URL", default: "https://buy.itunes.apple.com/verifyReceipt")
        self.appleSandboxURL = try reader.url("TOLLGATE_APPLE_SANDBOX_URL", default: "https://sandbox.itunes.apple.com/verifyReceipt")
        // Whoever answers these decides every grant, and receives every receipt and app's shared secret: say so at start
        // when it is not Apple (the emulator, a proxy, or a changed ConfigMap), so that it is seen in the logs.
        for (name, url, host) in [
            ("TOLLGATE_APPLE_PRODUCTION_URL", self.appleProductionURL, "buy.itunes.apple.com"),
            ("TOLLGATE_APPLE_SANDBOX_URL", self.appleSandboxURL, "sandbox.itunes.apple.com"),
        ] {
            let components = URLComponents(string: url)
            guard components?.scheme != "https" || components?.host?.lowercased() != host else { continue }
            self.warnings.append(
                "\(name) is not Apple's (\(EnvironmentReader.withoutCredentials(url))): that server decides every grant and receives "
                    + "every receipt and shared secret\(components?.scheme == "https" ? "" : ", in clear text")"
            )
        }
        self.appleTimeoutMilliseconds = try reader.int("TOLLGATE_APPLE_TIMEOUT_MS", default: 15_000, range: 1...600_000)
        self.workerConcurrency = try reader.int("TOLLGATE_WORKER_CONCURRENCY", default: 256, range: 1...100_000)
        self.queuePrefix = try reader.string("TOLLGATE_QUEUE_PREFIX", default: "tollgate")
        // Any printable text: only spaces and control characters (which redis-cli and logs mangle) and braces
        // (every key carries the `{q}` hash tag, which a brace before it would replace) are refused.
        guard self.queuePrefix.utf8.count <= 256,
            self.queuePrefix.unicodeScalars.allSatisfy({ !$0.properties.isWhitespace && $0.properties.generalCategory != .control && $0 != "{" && $0 != "}" })
        else {
            throw ConfigurationError(variable: "TOLLGATE_QUEUE_PREFIX", "use at most 256 bytes of printable text without spaces or braces")
        }
        self.metricsPort = try reader.int("TOLLGATE_METRICS_PORT", default: 9464, range: 0...65535)
        self.logLevel = try reader.choice(
            "TOLLGATE_LOG_LEVEL", default: .info, aliases: ["warn": .warning, "err": .error, "crit": .critical, "fatal": .critical]
        )
        self.logFormat = try reader.choice("TOLLGATE_LOG_FORMAT", default: .json)
        let base = try reader.int("TOLLGATE_RETRY_BASE_MS", default: 1000, range: 0...86_400_000)
        let maxDelay = try reader.int("TOLLGATE_RETRY_MAX_DELAY_MS", default: 300_000, range: 0...86_400_000)
        let attempts = try reader.int("TOLLGATE_RETRY_MAX_ATTEMPTS", default: 15, range: 1...1000)
        let age = try reader.int("TOLLGATE_RETRY_MAX_AGE_S", default: 86_400, range: 1...31_536_000)
        self.retry = RetryPolicy(baseMilliseconds: base, maxDelayMilliseconds: maxDelay, maxAttempts: attempts, maxAgeSeconds: age)
        self.claimMinIdleMilliseconds = try reader.int("TOLLGATE_CLAIM_MIN_IDLE_MS", default: 60_000, range: 1...86_400_000)
        self.shutdownGraceSeconds = try reader.int("TOLLGATE_SHUTDOWN_GRACE_S", default: 25, range: 0...3600)
        self.tokenSecret = try reader.optionalSecret("TOLLGATE_TOKEN_SECRET", recommendedLength: 32, warnings: &self.warnings)
        self.customerTokenLifetimeSeconds = try reader.int("TOLLGATE_CUSTOMER_TOKEN_TTL_S", default: 900, range: 60...86_400)
        self.accessCacheLifetimeSeconds = try reader.int("TOLLGATE_ACCESS_CACHE_TTL_S", default: 30, range: 0...3600)
        self.rateLimitPerSecond = try reader.int("TOLLGATE_RATE_LIMIT_PER_S", default: 1000, range: 0...10_000_000)
        self.rateLimitBurst = try reader.int("TOLLGATE_RATE_LIMIT_BURST", default: 2000, range: 0...10_000_000)
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "worker"
        let suffix = Hex.encode((0..<3).map { _ in UInt8.random(in: 0...255) })
        self.workerName = try reader.string("TOLLGATE_WORKER_NAME", default: "\(host)-\(getpid())-\(suffix)")
        self.jobRetentionSeconds = try reader.int("TOLLGATE_JOB_RETENTION_S", default: 604_800, range: 86_400...31_536_000)
        self.portFile = environment[portFileVariable].flatMap { $0.isEmpty ? nil : $0 }
        let poolSize = try reader.optionalInt("TOLLGATE_DATABASE_POOL_SIZE", range: 1...1000)
        self.databasePoolSize = poolSize ?? 16
        // One connection per 16 verifications in flight, 16 to 64: a worker at 100,000 in flight would
        // otherwise open 6,250 connections (and threads), past what the variable itself allows and any
        // server's `max_connections`.
        self.workerDatabasePoolSize = poolSize ?? min(64, max(16, self.workerConcurrency / 16))
        self.redisPoolSize = try reader.int("TOLLGATE_REDIS_POOL_SIZE", default: 4, range: 1...256)
    }
}

/// Reads typed values from environment variables, each failure naming its variable.
struct EnvironmentReader {
    let environment: [String: String]

    init(_ environment: [String: String]) { self.environment = environment }

    private func raw(_ name: String) -> String? {
        guard let value = self.environment[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        return value
    }

    func string(_ name: String, default defaultValue: String) throws -> String {
        self.raw(name) ?? defaultValue
    }

    func int(_ name: String, default defaultValue: Int, range: ClosedRange<Int>) throws -> Int {
        try self.optionalInt(name, range: range) ?? defaultValue
    }

    /// A whole number in `range`, or nil when the variable is unset or empty.
    func optionalInt(_ name: String, range: ClosedRange<Int>) throws -> Int? {
        guard let text = self.raw(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError(variable: name, "expected a whole number in \(range.lowerBound)...\(range.upperBound), got '\(text)'")
        }
        return value
    }

    /// An address to listen on: an IPv4 or IPv6 literal, or a host name (letters, digits and hyphens in
    /// dot-separated labels of at most 63 characters, 253 in all, the last not all digits: `256.1.1.1` and
    /// `1.2.3` are bad addresses, not names, and would fail only when binding).
    func host(_ name: String, default defaultValue: String) throws -> String {
        let text = self.raw(name) ?? defaultValue
        var address = in6_addr()
        if inet_pton(AF_INET, text, &address) == 1 || inet_pton(AF_INET6, text, &address) == 1 { return text }
        let labels = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        let hyphen = UInt8(ascii: "-")
        let valid = text.utf8.count <= 253 && labels.allSatisfy { label in
            (1...63).contains(label.count) && label.first != hyphen && label.last != hyphen
                && label.allSatisfy { $0 == hyphen || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                    || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0 | 0x20) }
        } && labels.last?.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } == false
        guard valid else {
            throw ConfigurationError(variable: name, "expected an IP address or a host name to listen on, got '\(text)'")
        }
        return text
    }

    func url(_ name: String, default defaultValue: String) throws -> String {
        let text = self.raw(name) ?? defaultValue
        guard let components = URLComponents(string: text), ["http", "https"].contains(components.scheme ?? ""),
            components.host?.isEmpty == false
        else {
            throw ConfigurationError(variable: name, "expected an http(s) URL, got '\(Self.withoutCredentials(text))'")
        }
        return text
    }

    /// `text` with what could be a URL's credentials (up to its last `@`) shown as `***`.
    static func withoutCredentials(_ text: String) -> String {
        guard let at = text.lastIndex(of: "@") else { return text }
        let start = text.range(of: "://").map(\.upperBound) ?? text.startIndex
        return start <= at ? text[..<start] + "***" + text[at...] : text
    }

    func choice<T: RawRepresentable & CaseIterable>(
        _ name: String, default defaultValue: T, aliases: [String: T] = [:]
    ) throws -> T where T.RawValue == String {
        guard let text = self.raw(name) else { return defaultValue }
        guard let value = T(rawValue: text.lowercased()) ?? aliases[text.lowercased()] else {
            let allowed = T.allCases.map(\.rawValue).joined(separator: ", ")
            throw ConfigurationError(variable: name, "expected one of \(allowed), got '\(text)'")
        }
        return value
    }

    /// A secret: any value is accepted (CONTRACT.md sets no length), one shorter than `recommendedLength`
    /// with a warning that names the variable, never the value. The one exception is the deployment
    /// examples' placeholder, exactly `CHANGE-ME` as they spell it, so an example copied as it is cannot
    /// run with a token anyone can read; any other text (`changeme`, `change-me`) is a token like another.
    func optionalSecret(_ name: String, recommendedLength: Int, warnings: inout [String]) throws -> String? {
        guard let text = self.raw(name) else { return nil }
        if text == "CHANGE-ME" {
            throw ConfigurationError(variable: name, "is still the example's placeholder; set a long random value")
        }
        if text.utf8.count < recommendedLength {
            warnings.append("\(name) is shorter than \(recommendedLength) characters, so it is easy to guess; use a long random value")
        }
        return text
    }
}
