import Testing
@testable import Shared

@Suite("RedisError")
struct RedisErrorTests {
    @Test("Redis that cannot serve yet counts as unavailable (503), a refused command does not", arguments: [
        ("LOADING Redis is loading the dataset in memory", true),
        ("MASTERDOWN Link with MASTER is down", true),
        ("TRYAGAIN Multiple keys request during rehashing of slot", true),
        ("CLUSTERDOWN The cluster is down", true),
        ("READONLY You can't write against a read only replica.", true),
        ("OOM command not allowed when used memory > 'maxmemory'.", true),
        ("OOM command not allowed when used memory > 'maxmemory'. script: 5e1b, on @user_script:32.", true),
        ("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", true),
        ("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", true),
        ("NOREPLICAS Not enough good replicas to write.", true),
        ("BUSYGROUP Consumer Group name already exists", false),
        // Redis 6.2 wraps a command refused inside a script.
        ("ERR Error running script (call to f_5e1b): @user_script:32: @user_script: 32: -OOM command not allowed when used memory > 'maxmemory'.", true),
        ("ERR Error running script (call to f_5e1b): @user_script:1: @user_script: 1: -NOREPLICAS Not enough good replicas to write.", true),
        ("ERR Error running script (call to f_5e1b): @user_script:9: @user_script: 9: -WRONGTYPE Operation against a key holding the wrong kind of value", false),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", false),
        ("ERR unknown command", false),
        ("NOSCRIPT No matching script", false),
        ("ERR max number of clients reached", true),
    ])
    func unavailable(message: String, expected: Bool) {
        #expect(RedisError(.server, message).isUnavailable == expected)
    }

    @Test("a read-only replica is told apart, inside a script too", arguments: [
        ("READONLY You can't write against a read only replica.", true),
        ("ERR Error running script (call to f_5e1b): @user_script:3: @user_script: 3: -READONLY You can't write against a read only replica.", true),
        ("ERR READONLY is not a command", false),
        ("OOM command not allowed when used memory > 'maxmemory'.", false),
    ])
    func readOnly(message: String, expected: Bool) {
        #expect(RedisError(.server, message).isReadOnly == expected)
        #expect(!RedisError(.connection, message).isReadOnly)
    }

    @Test("a refusal of Tollgate's credentials, database or permissions is told apart, and counts as unavailable", arguments: [
        ("NOAUTH Authentication required.", true),
        ("NOPERM User tg has no permissions to run the 'xadd' command", true),
        ("WRONGPASS invalid username-password pair or user is disabled.", true),
        ("NOPERM this user has no permissions to access one of the keys used as arguments", true),
        // Redis 6.2 wraps a command refused inside a script.
        ("ERR Error running script (call to f_5e1b): @user_script:4: @user_script: 4: -NOPERM this user has no permissions to run the 'hset' command", true),
        ("ERR unknown command", false),
        ("ERR NOAUTH is not a command", false),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", false),
    ])
    func accessRefused(message: String, expected: Bool) {
        #expect(RedisError(.server, message).isAccessRefused == expected)
        #expect(RedisError(.server, message).isUnavailable == expected)
        #expect(!RedisError(.connection, message).isAccessRefused)
    }

    @Test("a connection's AUTH or SELECT answered by a server that cannot serve anyone is an outage, not a refusal", arguments: [
        ("ERR max number of clients reached", false),
        ("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", false),
        ("LOADING Redis is loading the dataset in memory", false),
        ("WRONGPASS invalid username-password pair or user is disabled.", true),
        ("ERR DB index is out of range", true),
        ("ERR invalid password", true),
        ("ERR unknown command 'AUTH', with args beginning with: 'hunter2' ", true),
    ])
    func setupFailed(reply: String, refused: Bool) {
        let error = RedisError.setupFailed(reply)
        #expect(error.isAccessRefused == refused)
        #expect(error.code == (refused ? .refused : .connection))
        #expect(error.isUnavailable)
        #expect(!error.message.contains("hunter2"))
    }

    @Test("connection failures and a closed client are unavailable")
    func connection() {
        #expect(RedisError(.connection, "Connection refused").isUnavailable)
        #expect(RedisError(.closed, "shut down").isUnavailable)
        #expect(RedisError(.refused, "ERR DB index is out of range").isUnavailable)
        #expect(RedisError(.refused, "ERR DB index is out of range").isAccessRefused)
        #expect(!RedisError(.protocolViolation, "odd reply").isUnavailable)
    }
}
