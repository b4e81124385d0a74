import Foundation
import Testing
import TestSupport
@testable import Shared

@Suite("RedisClient against a real Redis")
struct RedisClientTests {
    /// Runs `body` with a client and a key prefix of its own, then deletes the prefix's keys and shuts down.
    static func withClient<T>(connections: Int = 2, _ body: (RedisClient, String) async throws -> T) async throws -> T {
        let client = try TestEnvironment.redis(connections: connections)
        let prefix = TestEnvironment.uniquePrefix()
        do {
            let value = try await body(client, prefix)
            try? await Self.deleteKeys(prefix: prefix, client: client)
            await client.shutdown()
            return value
        } catch {
            try? await Self.deleteKeys(prefix: prefix, client: client)
            await client.shutdown()
            throw error
        }
    }

    static func deleteKeys(prefix: String, client: RedisClient) async throws {
        var cursor = "0"
        repeat {
            let reply = try await client.send("SCAN", cursor, "MATCH", "\(prefix):*", "COUNT", "1000")
            guard let parts = reply.array, parts.count == 2, let next = parts[0].string else { return }
            let keys = (parts[1].array ?? []).compactMap(\.string)
            if !keys.isEmpty { try await client.send(["DEL"] + keys) }
            cursor = next
        } while cursor != "0"
    }

    @Test("SET/GET round-trips binary-safe values: NUL, CR LF, every ASCII byte, multi-byte UTF-8")
    func binarySafeRoundTrip() async throws {
        try await Self.withClient { client, prefix in
            let ascii = String(decoding: (0...127).map { UInt8($0) }, as: UTF8.self)
            let values = ["", "\u{0}", "a\u{0}b\r\n$3\r\nfoo\r\n", ascii, "naïve ☃ 𝄞 日本語", "*1\r\n$-1\r\n", " leading and trailing "]
            for (index, value) in values.enumerated() {
                let key = "\(prefix):bin:\(index)"
                let reply = try await client.send("SET", key, value)
                #expect(reply == .status("OK"))
                #expect(try await client.send("GET", key) == .bulk(Array(value.utf8)), "value #\(index)")
                #expect(try await client.send("STRLEN", key) == .integer(value.utf8.count))
            }
            #expect(try await client.send("GET", "\(prefix):missing") == .null)
        }
    }

    @Test("a 1 MiB value round-trips intact")
    func largeValue() async throws {
        try await Self.withClient { client, prefix in
            var generator = SeededGenerator(seed: 1 << 20)
            let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\r\n\u{0}".utf8)
            let bytes = (0..<(1 << 20)).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] }
            let value = String(decoding: bytes, as: UTF8.self)
            let key = "\(prefix):large"
            try await client.send("SET", key, value)
            let reply = try await client.send("GET", key)
            guard case .bulk(let read) = reply else {
                Issue.record("expected a bulk reply, got \(reply)")
                return
            }
            #expect(read.count == 1 << 20)
            #expect(read == bytes)
            #expect(try await client.send("STRLEN", key) == .integer(1 << 20))
        }
    }

    @Test("an error reply throws RedisError .server with Redis' message")
    func errorReply() async throws {
        try await Self.withClient { client, prefix in
            let key = "\(prefix):string"
            try await client.send("SET", key, "x")
            let error = await #expect(throws: RedisError.self) { try await client.send("LPUSH", key, "y") }
            #expect(error?.code == .server)
            #expect(error?.message.hasPrefix("WRONGTYPE") == true)
            #expect(error?.isConnectionFailure == false)
            let unknown = await #expect(throws: RedisError.self) { try await client.send("NOSUCHCOMMAND", "x") }
            #expect(unknown?.code == .server)
            #expect(unknown?.message.hasPrefix("ERR") == true)
            // The connection stays usable after error replies.
            #expect(try await client.send("GET", key) == .bulk(Array("x".utf8)))
        }
    }

    @Test("500 concurrent sends each get their own reply", arguments: [1, 3])
    func pipeliningCorrectness(connections: Int) async throws {
        try await Self.withClient(connections: connections) { client, prefix in
            let wrong = try await withThrowingTaskGroup(of: [String].self) { group in
                for index in 0..<500 {
                    group.addTask {
                        var problems: [String] = []
                        let payload = "payload-\(index)-" + String(repeating: "x", count: index % 37)
                        if try await client.send("ECHO", payload) != .bulk(Array(payload.utf8)) { problems.append("echo \(index)") }
                        if try await client.send("INCRBY", "\(prefix):counter:\(index)", String(index)).int != index {
                            problems.append("incrby \(index)")
                        }
                        if try await client.send("GET", "\(prefix):counter:\(index)").string != String(index) { problems.append("get \(index)") }
                        return problems
                    }
                }
                var all: [String] = []
                for try await problems in group { all += problems }
                return all
            }
            #expect(wrong.isEmpty)
        }
    }

    @Test("run(script) loads on first use and again after SCRIPT FLUSH")
    func scriptsSurviveFlush() async throws {
        // A server of its own: SCRIPT FLUSH on the shared one would empty the script cache under every other
        // test running meanwhile.
        let server = try await DedicatedRedis()
        let client = RedisClient(configuration: try RedisConfiguration(url: server.url), connections: 2)
        let prefix = TestEnvironment.uniquePrefix()
        try await TestEnvironment.using(client, server) {
            // A source no other test uses, so Redis cannot know it before.
            let script = RedisScript(name: "test", source: "-- \(prefix)\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])")
            let key = "\(prefix):script"
            #expect(try await client.send("SCRIPT", "EXISTS", script.sha) == .array([.integer(0)]))
            #expect(try await client.run(script, keys: [key], arguments: ["2"]) == .integer(2))
            #expect(try await client.send("SCRIPT", "EXISTS", script.sha) == .array([.integer(1)]))
            try await client.send("SCRIPT", "FLUSH")
            #expect(try await client.send("SCRIPT", "EXISTS", script.sha) == .array([.integer(0)]))
            #expect(try await client.run(script, keys: [key], arguments: ["3"]) == .integer(5))
            // A script error is a server error, not a NOSCRIPT loop.
            let failing = RedisScript(name: "failing", source: "-- \(prefix)\nreturn redis.error_reply('BOOM nope')")
            let error = await #expect(throws: RedisError.self) { try await client.run(failing, keys: [], arguments: []) }
            #expect(error?.code == .server)
            #expect(error?.message.contains("BOOM") == true)
        }
    }

    /// Creates an ACL user allowed everything, runs `body` with it, then deletes it.
    static func withACLUser<T>(_ body: (_ user: String, _ password: String) async throws -> T) async throws -> T {
        let admin = try TestEnvironment.redis(connections: 1)
        let user = "tg_test_\(Fixtures.suffix())"
        let password = "pw-\(Fixtures.suffix(8))"
        return try await TestEnvironment.using(admin) {
            try await admin.send("ACL", "SETUSER", user, "on", ">\(password)", "~*", "+@all")
            do {
                let value = try await body(user, password)
                _ = try? await admin.send("ACL", "DELUSER", user)
                return value
            } catch {
                _ = try? await admin.send("ACL", "DELUSER", user)
                throw error
            }
        }
    }

    @Test("after CLIENT KILL ID of its connection the client reconnects by itself")
    func reconnectsAfterKill() async throws {
        try await Self.withClient(connections: 1) { client, prefix in
            let admin = try TestEnvironment.redis(connections: 1)
            try await TestEnvironment.using(admin) {
                try await client.send("SET", "\(prefix):k", "before")
                let firstId = try #require(try await client.send("CLIENT", "ID").int)
                #expect(try await admin.send("CLIENT", "KILL", "ID", String(firstId)) == .integer(1))

                var failures: [RedisError] = []
                let secondId = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(20), "the client to reconnect") { () async throws -> Int? in
                    do {
                        return try await client.send("CLIENT", "ID").int
                    } catch let error as RedisError where error.code == .connection {
                        failures.append(error)
                        return nil
                    }
                }
                #expect(secondId != firstId)
                #expect(failures.count <= 2, "\(failures)")
                #expect(try await client.send("GET", "\(prefix):k") == .bulk(Array("before".utf8)))
            }
        }
    }

    @Test("a command whose connection is cut while Redis holds it fails as one that may have run; Redis' own answers never do")
    func cutInFlightMayHaveRun() async throws {
        // A reply timeout far past any stall of the test process, so that the kill, not the client, ends the BLPOP.
        var configuration = try RedisConfiguration(url: try TestEnvironment.redisURL())
        configuration.timeoutMilliseconds = 60_000
        let client = RedisClient(configuration: configuration, connections: 1)
        let prefix = TestEnvironment.uniquePrefix()
        let admin = try TestEnvironment.redis(connections: 1)
        try await TestEnvironment.using(admin, client) {
            let id = try #require(try await client.send("CLIENT", "ID").int)
            let blocked = Task { try await client.send("BLPOP", "\(prefix):never", "0") }
            _ = try await Poll.until(timeout: .seconds(30), interval: .milliseconds(10), "the BLPOP to block") { () async throws -> Bool? in
                let list = try await admin.send("CLIENT", "LIST", "ID", String(id)).string ?? ""
                return list.contains("cmd=blpop") ? true : nil
            }
            #expect(try await admin.send("CLIENT", "KILL", "ID", String(id)) == .integer(1))
            let error = await #expect(throws: RedisError.self) { try await blocked.value }
            #expect(error?.code == .connection)
            #expect(error?.mayHaveRun == true)
            let refused = await #expect(throws: RedisError.self) { try await client.send("INCR", "\(prefix):text", "extra") }
            #expect(refused?.code == .server)
            #expect(refused?.mayHaveRun == false, "Redis answered")
        }
    }

    @Test("a script Redis did not know, whose load is cut in flight, fails as a call that never ran: only the load went out")
    func cutScriptLoadNotSent() async throws {
        let shared = try #require(URLComponents(string: try TestEnvironment.redisURL()))
        let prefix = TestEnvironment.uniquePrefix()
        // A script of its own, so Redis answers NOSCRIPT; its SHA is the one answer holding it (`SCRIPT LOAD`'s).
        let script = RedisScript(name: "count", source: "-- \(prefix)\nreturn redis.call('INCR', KEYS[1])")
        let proxy = try await ReplyDroppingProxy(upstreamPort: try #require(shared.port), pattern: script.sha)
        var throughProxy = shared
        throughProxy.port = proxy.port
        var configuration = try RedisConfiguration(url: try #require(throughProxy.string))
        configuration.timeoutMilliseconds = 60_000
        let client = RedisClient(configuration: configuration, connections: 1)
        let admin = try TestEnvironment.redis(connections: 1)
        try await TestEnvironment.using(proxy, client, admin) {
            #expect(try await client.send("PING").string == "PONG")
            try await proxy.arm()
            let error = await #expect(throws: RedisError.self) { try await client.run(script, keys: ["\(prefix):count"], arguments: []) }
            #expect(proxy.dropped == 1, "the load's answer was the one dropped")
            #expect(error?.code == .connection)
            #expect(error?.mayHaveRun == false, "only SCRIPT LOAD was in flight; the script was never called")
            #expect(try await admin.send("EXISTS", "\(prefix):count") == .integer(0))
            // Loaded by the call that was cut, the script runs on the next call.
            #expect(try await admin.send("SCRIPT", "EXISTS", script.sha) == .array([.integer(1)]))
            #expect(try await client.run(script, keys: ["\(prefix):count"], arguments: []) == .integer(1))
        }
    }

    @Test("a server demoted to a replica (READONLY) makes the client reconnect, so a failover's new primary can be reached")
    func reconnectsAfterReadOnly() async throws {
        let server = try await DedicatedRedis()
        let client = RedisClient(configuration: try RedisConfiguration(url: server.url), connections: 1)
        let admin = RedisClient(configuration: try RedisConfiguration(url: server.url), connections: 1)
        try await TestEnvironment.using(client, admin, server) {
            try await client.send("SET", "k", "before")
            let firstId = try #require(try await client.send("CLIENT", "ID").int)
            // A replica of a primary that is not there: it keeps its data and refuses writes.
            try await admin.send("REPLICAOF", "127.0.0.1", String(try DedicatedRedis.closedPort()))
            let error = await #expect(throws: RedisError.self) { try await client.send("SET", "k", "during") }
            #expect(error?.isReadOnly == true)
            #expect(error?.isUnavailable == true)
            try await admin.send("REPLICAOF", "NO", "ONE")
            let secondId = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(20), "the client to answer again") { () async throws -> Int? in
                do {
                    return try await client.send("CLIENT", "ID").int
                } catch let error as RedisError where error.code == .connection {
                    return nil
                }
            }
            #expect(secondId != firstId, "the client kept the connection to the replica")
            try await client.send("SET", "k", "after")
            #expect(try await client.send("GET", "k") == .bulk(Array("after".utf8)))
        }
    }

    @Test("CLIENT KILL TYPE normal of all the client's connections: the next commands recover")
    func reconnectsAfterKillByType() async throws {
        // The kill is narrowed to a user of this test's own, so tests running alongside keep their connections.
        try await Self.withACLUser { user, password in
            let client = RedisClient(
                configuration: try RedisConfiguration(url: try TestEnvironment.redisURL(user: user, password: password, database: 0)), connections: 3
            )
            let admin = try TestEnvironment.redis(connections: 1)
            let prefix = TestEnvironment.uniquePrefix()
            try await TestEnvironment.using(client, admin) {
                // Open every pipeline's connection.
                let before = try await withThrowingTaskGroup(of: Int?.self) { group in
                    for _ in 0..<3 { group.addTask { try await client.send("CLIENT", "ID").int } }
                    var ids = Set<Int>()
                    for try await id in group { if let id { ids.insert(id) } }
                    return ids
                }
                #expect(before.count == 3)
                let killed = try await admin.send("CLIENT", "KILL", "TYPE", "normal", "USER", user).int
                #expect(killed == 3)

                let after = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(20), "every connection to reconnect") { () async throws -> Set<Int>? in
                    do {
                        let ids = try await withThrowingTaskGroup(of: Int?.self) { group in
                            for _ in 0..<3 { group.addTask { try await client.send("CLIENT", "ID").int } }
                            var ids = Set<Int>()
                            for try await id in group { if let id { ids.insert(id) } }
                            return ids
                        }
                        return ids.count == 3 ? ids : nil
                    } catch let error as RedisError where error.code == .connection {
                        return nil
                    }
                }
                #expect(after.isDisjoint(with: before))
                try await client.send("SET", "\(prefix):after", "1")
                #expect(try await client.send("GET", "\(prefix):after") == .bulk(Array("1".utf8)))
                try await client.send("DEL", "\(prefix):after")
            }
        }
    }

    @Test("the database in the URL is selected")
    func selectsDatabase() async throws {
        let prefix = TestEnvironment.uniquePrefix()
        let key = "\(prefix):db"
        let three = RedisClient(configuration: try RedisConfiguration(url: try TestEnvironment.redisURL(database: 3)), connections: 1)
        let threeAgain = RedisClient(configuration: try RedisConfiguration(url: try TestEnvironment.redisURL(database: 3)), connections: 1)
        let zero = RedisClient(configuration: try RedisConfiguration(url: try TestEnvironment.redisURL(database: 0)), connections: 1)
        try await TestEnvironment.using(three, threeAgain, zero) {
            try await three.send("SET", key, "in-three")
            #expect(try await threeAgain.send("GET", key) == .bulk(Array("in-three".utf8)))
            #expect(try await zero.send("GET", key) == .null)
            #expect(try await zero.send("EXISTS", key) == .integer(0))
            // CLIENT INFO names the selected database.
            #expect(try await threeAgain.send("CLIENT", "INFO").string?.contains(" db=3 ") == true)
            #expect(try await zero.send("CLIENT", "INFO").string?.contains(" db=0 ") == true)
            try await three.send("DEL", key)
        }
    }

    @Test("a database the server does not have: commands fail, and none of them runs in database 0")
    func missingDatabaseWritesNothing() async throws {
        let prefix = TestEnvironment.uniquePrefix()
        let keys = (0..<20).map { "\(prefix):lost-\($0)" }
        // Redis has 16 databases unless configured otherwise; SELECT 9999 fails.
        let missing = RedisClient(configuration: try RedisConfiguration(url: try TestEnvironment.redisURL(database: 9999)), connections: 1)
        let zero = RedisClient(configuration: try RedisConfiguration(url: try TestEnvironment.redisURL(database: 0)), connections: 1)
        try await TestEnvironment.using(missing, zero) {
            // Concurrent commands are parked while the connection opens; they must wait for SELECT's answer.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for key in keys {
                    group.addTask {
                        let error = await #expect(throws: RedisError.self) { try await missing.send("SET", key, "written") }
                        #expect(error?.code == .refused)
                        #expect(error?.isAccessRefused == true)
                        #expect(error?.message.contains("DB index") == true)
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await zero.send(["EXISTS"] + keys) == .integer(0))
            try await zero.send(["DEL"] + keys)
        }
    }

    @Test("an ACL user and password in the URL authenticate; a wrong password is a refusal that hides it")
    func aclUser() async throws {
        try await Self.withACLUser { user, password in
            let good = RedisClient(configuration: try RedisConfiguration(url: try TestEnvironment.redisURL(user: user, password: password, database: 0)), connections: 1)
            try await TestEnvironment.using(good) { () async throws in
                #expect(try await good.send("ACL", "WHOAMI").string == user)
                #expect(await good.ping())
            }

            let wrongPassword = "wrong-\(Fixtures.suffix(8))"
            let bad = RedisClient(configuration: try RedisConfiguration(url: try TestEnvironment.redisURL(user: user, password: wrongPassword, database: 0)), connections: 1)
            try await TestEnvironment.using(bad) {
                let error = await #expect(throws: RedisError.self) { try await bad.send("PING") }
                #expect(error?.code == .refused)
                #expect(error?.isAccessRefused == true)
                #expect(error?.message.contains(wrongPassword) == false)
                #expect(error.map { "\($0)" }?.contains(wrongPassword) == false)
                #expect(error?.message.contains("WRONGPASS") == true)
                #expect(await bad.ping() == false)
            }
        }
    }

    @Test("a Redis that does not know AUTH refuses the connection without quoting the password")
    func authUnknown() async throws {
        // Renamed away, as some hardened setups do; a proxy that lacks AUTH answers alike.
        let redis = try await DedicatedRedis(arguments: ["--rename-command", "AUTH", ""])
        let password = "secret-\(Fixtures.suffix(8))"
        let client = RedisClient(configuration: try RedisConfiguration(url: "redis://:\(password)@127.0.0.1:\(redis.port)/0"), connections: 1)
        try await TestEnvironment.using(client, redis) {
            let error = await #expect(throws: RedisError.self) { try await client.send("PING") }
            #expect(error?.code == .refused)
            #expect(error?.message.contains("unknown command") == true)
            #expect(error.map { "\($0)" }?.contains(password) == false)
        }
    }

    @Test("a server at maxclients answers AUTH with its error: an outage that ends when a client leaves, not a refusal")
    func maxClientsAtAuth() async throws {
        let password = "secret-\(Fixtures.suffix(8))"
        let redis = try await DedicatedRedis(arguments: ["--maxclients", "1", "--requirepass", password])
        let url = "redis://:\(password)@127.0.0.1:\(redis.port)/0"
        let holder = RedisClient(configuration: try RedisConfiguration(url: url), connections: 1)
        let late = RedisClient(configuration: try RedisConfiguration(url: url), connections: 1)
        try await TestEnvironment.using(late, holder, redis) {
            // The one slot may still be held for a moment by the connection that saw the server start.
            _ = try await Poll.until(timeout: .seconds(20), "the holder's connection") {
                try? await holder.send("PING") == .status("PONG") ? true : nil
            }
            let error = await #expect(throws: RedisError.self) { try await late.send("PING") }
            #expect(error?.message.contains("max number of clients") == true)
            #expect(error?.isAccessRefused == false)
            #expect(error?.isUnavailable == true)
            await holder.shutdown()
            _ = try await Poll.until(timeout: .seconds(20), "a connection once the first client left") {
                try? await late.send("PING") == .status("PONG") ? true : nil
            }
        }
    }

    @Test("connecting to a closed port is a connection error")
    func closedPort() async throws {
        let port = try DedicatedRedis.closedPort()
        let client = RedisClient(configuration: try RedisConfiguration(url: "redis://127.0.0.1:\(port)/0"), connections: 1)
        let error = await #expect(throws: RedisError.self) { try await client.send("PING") }
        #expect(error?.code == .connection)
        #expect(error?.isConnectionFailure == true)
        #expect(error?.mayHaveRun == false, "never sent: it cannot have run")
        #expect(await client.ping() == false)
        await client.shutdown()
    }

    @Test(
        "a server that accepts but never answers: the command fails after the reply timeout, and the next one tries again",
        .timeLimit(.minutes(1))
    )
    func silentServer() async throws {
        try await SilentListener.with { redis in
            // The same timeout bounds the connect, which the kernel completes at once; a whole second keeps a
            // busy machine (a parallel build, CI) from turning a late connect event into a connect timeout.
            let configuration = try redis.redisConfiguration(timeoutMilliseconds: 1000)
            let client = RedisClient(configuration: configuration, connections: 1)
            for _ in 0..<2 {
                let error = await #expect(throws: RedisError.self) { try await client.send("PING") }
                #expect(error?.code == .connection)
                #expect(error?.message.contains("no reply within 1000 ms") == true, "\(String(describing: error))")
                #expect(error?.mayHaveRun == true, "sent and never answered: it may have run")
            }
            await client.shutdown()
        }
    }

    @Test(
        "a stalled server fails a command a little past the reply timeout, however long the connection sat idle before it",
        .timeLimit(.minutes(1))
    )
    func stalledAfterIdle() async throws {
        let server = try await DedicatedRedis()
        var configuration = try RedisConfiguration(url: server.url)
        configuration.timeoutMilliseconds = 20_000
        let client = RedisClient(configuration: configuration, connections: 1)
        try await TestEnvironment.using(client, server) {
            #expect(await client.ping())
            // Just over half the timeout since the last reply. The check used to run every half of the timeout,
            // counted from the last read, so this command failed about 29 s after it was sent here; the bound
            // leaves 3.5 s on either side of it, a loaded machine's room.
            try await Task.sleep(for: .milliseconds(11_000))
            server.pause()
            defer { server.resume() }
            let sent = ContinuousClock.now
            let error = await #expect(throws: RedisError.self) { try await client.send("PING") }
            let waited = ContinuousClock.now - sent
            #expect(error?.message.contains("no reply within 20000 ms") == true, "\(String(describing: error))")
            #expect(waited >= .milliseconds(19_900) && waited < .milliseconds(25_500), "failed after \(waited)")
        }
    }

    @Test("after shutdown, commands fail with .closed")
    func closedAfterShutdown() async throws {
        let client = try TestEnvironment.redis(connections: 1)
        #expect(await client.ping())
        await client.shutdown()
        let error = await #expect(throws: RedisError.self) { try await client.send("PING") }
        #expect(error?.code == .closed)
    }
}
