import Testing
@testable import Shared

@Suite("RedisConfiguration(url:)")
struct RedisConfigurationTests {
    @Test("host, port and database")
    func hostPortDatabase() throws {
        let configuration = try RedisConfiguration(url: "redis://cache.internal:6380/5")
        #expect(configuration.host == "cache.internal")
        #expect(configuration.port == 6380)
        #expect(configuration.database == 5)
        #expect(configuration.username == nil)
        #expect(configuration.password == nil)
    }

    @Test("a password without a user")
    func passwordOnly() throws {
        let configuration = try RedisConfiguration(url: "redis://:s3cret@127.0.0.1:6379/0")
        #expect(configuration.password == "s3cret")
        #expect(configuration.username == nil)
        #expect(configuration.database == 0)
    }

    @Test("a user and a password")
    func userAndPassword() throws {
        let configuration = try RedisConfiguration(url: "redis://alice:s3cret@127.0.0.1:6379/3")
        #expect(configuration.username == "alice")
        #expect(configuration.password == "s3cret")
        #expect(configuration.database == 3)
    }

    @Test("a percent-encoded password is decoded")
    func percentEncodedPassword() throws {
        let configuration = try RedisConfiguration(url: "redis://:p%40ss%3Aw0rd@127.0.0.1:6379/0")
        #expect(configuration.password == "p@ss:w0rd")
    }

    @Test("port 6379 and database 0 when the URL omits them", arguments: ["redis://localhost", "redis://localhost/", "redis://:pw@localhost"])
    func defaults(url: String) throws {
        let configuration = try RedisConfiguration(url: url)
        #expect(configuration.host == "localhost")
        #expect(configuration.port == 6379)
        #expect(configuration.database == 0)
    }

    @Test(
        "malformed URLs throw naming the variable",
        arguments: [
            "http://localhost:6379", "redis://", "redis://localhost/abc", "redis://localhost/-1", "redis://localhost:0", "", "localhost:6379",
            // A user name without a password: no AUTH would be sent, and every command refused later.
            "redis://worker@localhost:6379", "redis://worker:@localhost:6379/0",
        ]
    )
    func malformed(url: String) {
        let error = #expect(throws: ConfigurationError.self) { try RedisConfiguration(url: url, variable: "MY_REDIS") }
        #expect(error?.variable == "MY_REDIS")
    }
}
