import Foundation
import NIOCore
import Testing
@testable import Shared

@Suite("Configuration")
struct ConfigurationTests {
    @Test("an empty environment gives CONTRACT.md's defaults")
    func defaults() throws {
        let configuration = try Configuration(environment: [:])
        #expect(configuration.databaseURL == "postgres://tollgate@127.0.0.1:5432/tollgate")
        #expect(configuration.redis.host == "127.0.0.1")
        #expect(configuration.redis.port == 6379)
        #expect(configuration.redis.database == 0)
        #expect(configuration.redis.password == nil)
        #expect(configuration.redis.username == nil)
        #expect(configuration.redis == (try RedisConfiguration(url: "redis://127.0.0.1:6379/0")))
        #expect(configuration.httpHost == "127.0.0.1")
        #expect(configuration.httpPort == 8080)
        #expect(configuration.adminToken == nil)
        #expect(configuration.appleProductionURL == "https://buy.itunes.apple.com/verifyReceipt")
        #expect(configuration.appleSandboxURL == "https://sandbox.itunes.apple.com/verifyReceipt")
        #expect(configuration.appleTimeoutMilliseconds == 15_000)
        #expect(configuration.workerConcurrency == 256)
        #expect(configuration.queuePrefix == "tollgate")
        #expect(configuration.metricsPort == 9464)
        #expect(configuration.logLevel == .info)
        #expect(configuration.logFormat == .json)
        #expect(configuration.retry == RetryPolicy(baseMilliseconds: 1000, maxDelayMilliseconds: 300_000, maxAttempts: 15, maxAgeSeconds: 86_400))
        #expect(configuration.claimMinIdleMilliseconds == 60_000)
        #expect(configuration.shutdownGraceSeconds == 25)
        #expect(configuration.tokenSecret == nil)
        #expect(configuration.rateLimitPerSecond == 1000)
        #expect(configuration.rateLimitBurst == 2000)
        #expect(configuration.httpIdleTimeoutSeconds == 75)
        #expect(configuration.databasePoolSize == 16)
        #expect(configuration.workerDatabasePoolSize == 16)
        #expect(configuration.redisPoolSize == 4)
    }

    @Test("every variable is read")
    func valuesAreRead() throws {
        let configuration = try Configuration(environment: [
            "TOLLGATE_DATABASE_URL": "postgresql://u:p@db.internal:6543/x?sslmode=require",
            "TOLLGATE_REDIS_URL": "redis://:pw@cache:6380/2",
            "TOLLGATE_HTTP_HOST": "0.0.0.0",
            "TOLLGATE_HTTP_PORT": "0",
            "TOLLGATE_HTTP_IDLE_TIMEOUT_S": "30",
            "TOLLGATE_ADMIN_TOKEN": "0123456789abcdef0123",
            "TOLLGATE_APPLE_PRODUCTION_URL": "http://127.0.0.1:9000/verifyReceipt",
            "TOLLGATE_APPLE_SANDBOX_URL": "http://127.0.0.1:9000/sandbox/verifyReceipt",
            "TOLLGATE_APPLE_TIMEOUT_MS": "2500",
            "TOLLGATE_WORKER_CONCURRENCY": "8",
            "TOLLGATE_QUEUE_PREFIX": "test-1",
            "TOLLGATE_METRICS_PORT": "9999",
            "TOLLGATE_LOG_LEVEL": "DEBUG",
            "TOLLGATE_LOG_FORMAT": "text",
            "TOLLGATE_RETRY_BASE_MS": "10",
            "TOLLGATE_RETRY_MAX_DELAY_MS": "500",
            "TOLLGATE_RETRY_MAX_ATTEMPTS": "4",
            "TOLLGATE_RETRY_MAX_AGE_S": "60",
            "TOLLGATE_CLAIM_MIN_IDLE_MS": "1000",
            "TOLLGATE_SHUTDOWN_GRACE_S": "5",
            "TOLLGATE_TOKEN_SECRET": String(repeating: "s", count: 32),
            "TOLLGATE_RATE_LIMIT_PER_S": "0",
            "TOLLGATE_RATE_LIMIT_BURST": "10",
        ])
        #expect(configuration.databaseURL == "postgresql://u:p@db.internal:6543/x?sslmode=require")
        #expect(configuration.redis.host == "cache")
        #expect(configuration.redis.port == 6380)
        #expect(configuration.redis.database == 2)
        #expect(configuration.redis.password == "pw")
        #expect(configuration.httpHost == "0.0.0.0")
        #expect(configuration.httpPort == 0)
        #expect(configuration.httpIdleTimeoutSeconds == 30)
        #expect(configuration.adminToken == "0123456789abcdef0123")
        #expect(configuration.appleProductionURL == "http://127.0.0.1:9000/verifyReceipt")
        #expect(configuration.appleSandboxURL == "http://127.0.0.1:9000/sandbox/verifyReceipt")
        #expect(configuration.appleTimeoutMilliseconds == 2500)
        #expect(configuration.workerConcurrency == 8)
        #expect(configuration.queuePrefix == "test-1")
        #expect(configuration.metricsPort == 9999)
        #expect(configuration.logLevel == .debug)
        #expect(configuration.logFormat == .text)
        #expect(configuration.retry == RetryPolicy(baseMilliseconds: 10, maxDelayMilliseconds: 500, maxAttempts: 4, maxAgeSeconds: 60))
        #expect(configuration.claimMinIdleMilliseconds == 1000)
        #expect(configuration.shutdownGraceSeconds == 5)
        #expect(configuration.tokenSecret == String(repeating: "s", count: 32))
        #expect(configuration.rateLimitPerSecond == 0)
        #expect(configuration.rateLimitBurst == 10)
    }

    @Test(
        "a bad value throws a ConfigurationError naming its variable",
        arguments: [
            ("TOLLGATE_HTTP_PORT", "abc"),
            ("TOLLGATE_HTTP_PORT", "70000"),
            ("TOLLGATE_HTTP_PORT", "-1"),
            ("TOLLGATE_HTTP_IDLE_TIMEOUT_S", "0"),
            ("TOLLGATE_METRICS_PORT", "65536"),
            ("TOLLGATE_LOG_LEVEL", "loud"),
            ("TOLLGATE_LOG_FORMAT", "xml"),
            ("TOLLGATE_REDIS_URL", "http://127.0.0.1:6379/0"),
            ("TOLLGATE_REDIS_URL", "redis://"),
            ("TOLLGATE_REDIS_URL", "redis://127.0.0.1:6379/zero"),
            ("TOLLGATE_REDIS_URL", "not a url"),
            ("TOLLGATE_DATABASE_URL", "mysql://tollgate@127.0.0.1:3306/tollgate"),
            ("TOLLGATE_DATABASE_URL", "tollgate"),
            ("TOLLGATE_DATABASE_URL", "postgres://tollgate@127.0.0.1:5432/tollgate?sslmode=bogus"),
            ("TOLLGATE_DATABASE_URL", "postgres://tollgate@127.0.0.1:5432/tollgate?no_such_option=1"),
            ("TOLLGATE_HTTP_HOST", "not a host"),
            ("TOLLGATE_HTTP_HOST", "-bad-.example"),
            ("TOLLGATE_HTTP_HOST", "127.0.0.1:8080"),
            ("TOLLGATE_HTTP_HOST", "256.1.1.1"),
            ("TOLLGATE_HTTP_HOST", "1.2.3"),
            ("TOLLGATE_APPLE_PRODUCTION_URL", "ftp://apple.example/verifyReceipt"),
            ("TOLLGATE_APPLE_TIMEOUT_MS", "0"),
            ("TOLLGATE_RETRY_MAX_ATTEMPTS", "many"),
            ("TOLLGATE_RETRY_MAX_ATTEMPTS", "0"),
            ("TOLLGATE_RETRY_BASE_MS", "-1"),
            ("TOLLGATE_RETRY_BASE_MS", "1s"),
            ("TOLLGATE_RETRY_MAX_DELAY_MS", "86400001"),
            ("TOLLGATE_RETRY_MAX_AGE_S", "0"),
            ("TOLLGATE_CLAIM_MIN_IDLE_MS", "0"),
            ("TOLLGATE_SHUTDOWN_GRACE_S", "3601"),
            ("TOLLGATE_SHUTDOWN_GRACE_S", "x"),
            ("TOLLGATE_RATE_LIMIT_PER_S", "-5"),
            ("TOLLGATE_RATE_LIMIT_BURST", "lots"),
            // Below a day, the contract's 24 hours of dedup and claims would not hold.
            ("TOLLGATE_JOB_RETENTION_S", "3600"),
            ("TOLLGATE_CUSTOMER_TOKEN_TTL_S", "59"),
            ("TOLLGATE_ACCESS_CACHE_TTL_S", "3601"),
            ("TOLLGATE_WORKER_CONCURRENCY", "0"),
            ("TOLLGATE_REDIS_POOL_SIZE", "257"),
            ("TOLLGATE_QUEUE_PREFIX", "has space"),
            ("TOLLGATE_QUEUE_PREFIX", "tab\there"),
            ("TOLLGATE_QUEUE_PREFIX", "a{b}"),
            ("TOLLGATE_QUEUE_PREFIX", String(repeating: "p", count: 257)),
            ("TOLLGATE_DATABASE_POOL_SIZE", "0"),
            ("TOLLGATE_DATABASE_POOL_SIZE", "sixteen"),
            ("TOLLGATE_ADMIN_TOKEN", "CHANGE-ME"),
            ("TOLLGATE_TOKEN_SECRET", "CHANGE-ME"),
        ]
    )
    func badValue(variable: String, value: String) {
        let error = #expect(throws: ConfigurationError.self) {
            try Configuration(environment: [variable: value])
        }
        #expect(error?.variable == variable)
        #expect(error?.description.contains(variable) == true)
    }

    @Test("a refused Apple URL is shown without its credentials", arguments: [
        "ftp://apple:Hunter2@apple.example/verifyReceipt", "https://apple:Hunter2@", "apple:Hunter2@apple.example",
    ])
    func appleURLCredentialsHidden(value: String) {
        let error = #expect(throws: ConfigurationError.self) {
            try Configuration(environment: ["TOLLGATE_APPLE_SANDBOX_URL": value])
        }
        #expect(error?.variable == "TOLLGATE_APPLE_SANDBOX_URL")
        #expect(error?.description.contains("Hunter2") == false, "\(error?.description ?? "")")
        #expect(error?.description.contains("***@") == true, "\(error?.description ?? "")")
    }

    @Test(
        "a queue prefix may be any printable text without spaces or braces (the contract sets no form)",
        arguments: ["ci/run-42", "acceptance-\(String(repeating: "0123456789abcdef", count: 8))", "tollgate@eu#1", "préfixe", "t"]
    )
    func queuePrefix(value: String) throws {
        #expect(try Configuration(environment: ["TOLLGATE_QUEUE_PREFIX": value]).queuePrefix == value)
    }

    @Test(
        "a short secret is accepted with a warning that names the variable, never the value",
        arguments: [
            ("TOLLGATE_ADMIN_TOKEN", "Sh0rtAdm1nTok"), ("TOLLGATE_TOKEN_SECRET", "Sh0rtT0kenSecretValue-1234"),
            // Only the examples' exact placeholder is refused: the contract lets a token be any text.
            ("TOLLGATE_ADMIN_TOKEN", "changeme"), ("TOLLGATE_ADMIN_TOKEN", "change-me"), ("TOLLGATE_TOKEN_SECRET", "changeme"),
        ]
    )
    func shortSecret(variable: String, value: String) throws {
        let configuration = try Configuration(environment: [variable: value])
        #expect(variable == "TOLLGATE_ADMIN_TOKEN" ? configuration.adminToken == value : configuration.tokenSecret == value)
        #expect(configuration.warnings.count == 1)
        #expect(configuration.warnings.allSatisfy { $0.contains(variable) && !$0.contains(value) })
        let long = try Configuration(environment: [variable: String(repeating: "k", count: 32)])
        #expect(long.warnings.isEmpty)
    }

    @Test(
        "an Apple URL that is not Apple's starts with a warning naming the variable, without the URL's credentials",
        arguments: [
            ("TOLLGATE_APPLE_PRODUCTION_URL", "http://127.0.0.1:9090/verifyReceipt", true),
            ("TOLLGATE_APPLE_SANDBOX_URL", "https://user:s3cr3t@proxy.example.com/verifyReceipt", false),
            ("TOLLGATE_APPLE_PRODUCTION_URL", "http://buy.itunes.apple.com/verifyReceipt", true),
            ("TOLLGATE_APPLE_PRODUCTION_URL", "https://sandbox.itunes.apple.com/verifyReceipt", false),
        ]
    )
    func appleURLNotApple(variable: String, value: String, clearText: Bool) throws {
        let configuration = try Configuration(environment: [variable: value])
        #expect(configuration.warnings.count == 1)
        let warning = try #require(configuration.warnings.first)
        #expect(warning.hasPrefix("\(variable) is not Apple's"))
        #expect(!warning.contains("s3cr3t"))
        #expect(warning.contains("clear text") == clearText)
        #expect(try Configuration(environment: [:]).warnings.isEmpty)
        #expect(try Configuration(environment: ["TOLLGATE_APPLE_PRODUCTION_URL": "https://BUY.itunes.apple.com/verifyReceipt"]).warnings.isEmpty)
    }

    @Test(
        "a database on another machine reached without sslmode=verify-ca or verify-full starts with a warning, without the password",
        arguments: [
            ("postgres://tollgate:s3cr3t@db.example.com:5432/tollgate", nil, "sslmode=prefer: possibly unencrypted"),
            ("postgres://tollgate:s3cr3t@db.example.com/tollgate?sslmode=require", nil, "sslmode=require: encrypted, but"),
            ("postgres://tollgate@127.0.0.1,db2.example.com/tollgate?target_session_attrs=read-write", nil, "reaches db2.example.com"),
            ("postgres://tollgate@10.0.0.5/tollgate", "disable", "sslmode=disable"),
            ("postgres://tollgate@db.example.com/tollgate?sslmode=verify-full", nil, nil),
            ("postgres://tollgate@db.example.com/tollgate", "verify-ca", nil),
            ("postgres://tollgate@127.0.0.1:5432/tollgate", nil, nil),
            ("postgres://tollgate@localhost/tollgate", nil, nil),
            ("postgres:///tollgate?host=/run/postgresql", nil, nil),
            ("postgres://tollgate@[::1]/tollgate", nil, nil),
            // A password with a raw `@`: libpq reads the rest of it as the host; the line shows none of it.
            ("postgres://tollgate:ab@s3cr3t@db.example.com/tollgate", nil, "sslmode=prefer"),
            // require with a root certificate is verify-ca to libpq.
            ("postgres://tollgate@db.example.com/tollgate?sslmode=require&sslrootcert=/etc/ssl/certs/ca-certificates.crt", nil, nil),
            // The host from libpq's environment, where the URL names none.
            ("postgres:///tollgate", "PGHOST=db.example.com", "reaches db.example.com"),
            ("postgres:///tollgate", "PGHOSTADDR=10.0.0.5", "reaches 10.0.0.5"),
            ("postgres://tollgate@db.example.com/tollgate", "PGSSLROOTCERT=/ca.crt", "sslmode=prefer"),
        ] as [(String, String?, String?)]
    )
    func databaseTransport(url: String, environmentVariable: String?, expected: String?) throws {
        var environment = ["TOLLGATE_DATABASE_URL": url]
        if let variable = environmentVariable?.split(separator: "=", maxSplits: 1), variable.count == 2 {
            environment[String(variable[0])] = String(variable[1])
        } else if let mode = environmentVariable {
            environment["PGSSLMODE"] = mode
        }
        let warnings = try Configuration(environment: environment).warnings
        if let expected {
            #expect(warnings.count == 1, "\(warnings)")
            #expect(warnings.allSatisfy { $0.hasPrefix("TOLLGATE_DATABASE_URL reaches") && $0.contains(expected) && !$0.contains("s3cr3t") }, "\(warnings)")
        } else {
            #expect(warnings.isEmpty, "\(warnings)")
        }
    }

    @Test(
        "values the contract allows that are unusual still start",
        arguments: [
            ("TOLLGATE_RETRY_BASE_MS", "0"), ("TOLLGATE_RETRY_MAX_DELAY_MS", "0"), ("TOLLGATE_CLAIM_MIN_IDLE_MS", "1"),
            ("TOLLGATE_LOG_LEVEL", "warn"), ("TOLLGATE_LOG_LEVEL", "WARNING"), ("TOLLGATE_LOG_LEVEL", "fatal"),
            ("TOLLGATE_RATE_LIMIT_BURST", "0"), ("TOLLGATE_ADMIN_TOKEN", "admin"),
            ("TOLLGATE_HTTP_HOST", "0.0.0.0"), ("TOLLGATE_HTTP_HOST", "::1"), ("TOLLGATE_HTTP_HOST", "::"),
            ("TOLLGATE_HTTP_HOST", "localhost"), ("TOLLGATE_HTTP_HOST", "api-1.internal.example"),
            ("TOLLGATE_DATABASE_URL", "postgres://tollgate:p%40ss@db.example:5432/tollgate?sslmode=verify-full&connect_timeout=5"),
            ("TOLLGATE_DATABASE_URL", "postgres:///tollgate?host=/run/postgresql"),
            ("TOLLGATE_DATABASE_URL", "postgres://tollgate@db1:5432,db2:5432/tollgate?target_session_attrs=read-write"),
        ]
    )
    func unusualValues(variable: String, value: String) throws {
        let configuration = try Configuration(environment: [variable: value])
        switch value {
        case "warn", "WARNING": #expect(configuration.logLevel == .warning)
        case "fatal": #expect(configuration.logLevel == .critical)
        default: break
        }
        if variable == "TOLLGATE_RETRY_BASE_MS" { #expect(configuration.retry.delay(afterAttempt: 70) == 0) }
    }

    @Test(
        "a worker's PostgreSQL pool follows its concurrency unless the pool size is set",
        arguments: [
            (["TOLLGATE_WORKER_CONCURRENCY": "8"], 16, 16),
            (["TOLLGATE_WORKER_CONCURRENCY": "256"], 16, 16),
            (["TOLLGATE_WORKER_CONCURRENCY": "300"], 16, 18),
            (["TOLLGATE_WORKER_CONCURRENCY": "512"], 16, 32),
            (["TOLLGATE_WORKER_CONCURRENCY": "1024"], 16, 64),
            (["TOLLGATE_WORKER_CONCURRENCY": "100000"], 16, 64),
            (["TOLLGATE_WORKER_CONCURRENCY": "100000", "TOLLGATE_DATABASE_POOL_SIZE": "200"], 200, 200),
            (["TOLLGATE_WORKER_CONCURRENCY": "512", "TOLLGATE_DATABASE_POOL_SIZE": "12"], 12, 12),
            (["TOLLGATE_WORKER_CONCURRENCY": "8", "TOLLGATE_DATABASE_POOL_SIZE": "40"], 40, 40),
            (["TOLLGATE_WORKER_CONCURRENCY": "512", "TOLLGATE_DATABASE_POOL_SIZE": " "], 16, 32),
        ]
    )
    func workerPoolSize(environment: [String: String], api: Int, worker: Int) throws {
        let configuration = try Configuration(environment: environment)
        #expect(configuration.databasePoolSize == api)
        #expect(configuration.workerDatabasePoolSize == worker)
    }

    @Test("an empty value means the default")
    func emptyMeansDefault() throws {
        let configuration = try Configuration(environment: ["TOLLGATE_HTTP_PORT": "", "TOLLGATE_ADMIN_TOKEN": "", "TOLLGATE_LOG_LEVEL": "  "])
        #expect(configuration.httpPort == 8080)
        #expect(configuration.adminToken == nil)
        #expect(configuration.logLevel == .info)
        #expect(configuration.jobRetentionSeconds == 604_800)
        #expect(configuration.customerTokenLifetimeSeconds == 900)
        #expect(configuration.accessCacheLifetimeSeconds == 30)
        #expect(configuration.httpIdleTimeoutSeconds == 75)
        #expect(configuration.workerConcurrency == 256)
    }

    @Test("a listen address the system refuses as such names the variable to correct; a port another process holds does not")
    func refusedListen() {
        func refused(_ error: any Error) -> ConfigurationError? {
            ConfigurationError.refusedListen(error, host: "h", port: 80, hostVariable: "HOST_VAR", portVariable: "PORT_VAR")
        }
        #expect(refused(SocketAddressError.unknown(host: "h", port: 80))?.variable == "HOST_VAR")
        #expect(refused(IOError(errnoCode: EADDRNOTAVAIL, reason: "bind"))?.variable == "HOST_VAR")
        #expect(refused(IOError(errnoCode: EACCES, reason: "bind"))?.variable == "PORT_VAR")
        #expect(refused(IOError(errnoCode: EADDRINUSE, reason: "bind")) == nil, "it may come free: exit 1, for a supervisor to retry")
        #expect(refused(CancellationError()) == nil)
    }
}
