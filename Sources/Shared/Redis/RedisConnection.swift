import CHiredis
import Foundation

/// The one file that touches hiredis: a connection for ``RedisSubscriber``'s own thread, and the protocol
/// reader that ``RedisPipeline``'s event-loop connections parse replies with.
///
/// One hiredis connection whose methods wait for the socket, so they must only be called from a thread of
/// their own, never from Swift's cooperative pool. Every wait also watches a `wake` descriptor of the
/// owner's, so a stop is never held up by a Redis that takes connections and does not answer.
final class RedisConnection {
    private var context: UnsafeMutablePointer<redisContext>?
    private let configuration: RedisConfiguration
    private let wake: Int32
    /// The addresses of a host name, in the resolver's order; throws why it has none.
    typealias Resolver = @Sendable (_ host: String) throws -> [String]

    /// Why a host name gave no address (`getaddrinfo`'s own words).
    struct ResolutionError: Error, CustomStringConvertible {
        let description: String
    }
    private let resolve: Resolver

    /// Connects, authenticates and selects the database. `wake` (a pipe or eventfd) becoming readable
    /// ends any wait for Redis. Each address the host name resolves to is tried in turn, as the pipelined
    /// client's connections do (hiredis tries only the first).
    init(configuration: RedisConfiguration, wake: Int32, resolve: @escaping Resolver = RedisConnection.addresses) throws {
        self.configuration = configuration
        self.wake = wake
        self.resolve = resolve
        try self.connect()
    }

    /// The numeric addresses `host` resolves to, in `getaddrinfo`'s order. Resolved once: hiredis is given the
    /// addresses, so a name whose lookup waits out the resolver's timeout does not wait twice. Blocks: own thread only.
    static func addresses(of host: String) throws -> [String] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let code = getaddrinfo(host, nil, &hints, &list)
        guard code == 0, let list else { throw ResolutionError(description: String(cString: gai_strerror(code))) }
        defer { freeaddrinfo(list) }
        var found: [String] = []
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let current = entry {
            var name = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(current.pointee.ai_addr, current.pointee.ai_addrlen, &name, socklen_t(name.count), nil, 0, NI_NUMERICHOST) == 0 {
                let address = String(cString: name)
                if !found.contains(address) { found.append(address) }
            }
            entry = current.pointee.ai_next
        }
        guard !found.isEmpty else { throw ResolutionError(description: "no address") }
        return found
    }

    deinit {
        if let context { redisFree(context) }
    }

    /// Sends a batch of commands in one write and reads their replies in order (pipelining), each within
    /// the configured timeout.
    ///
    /// The outer result fails when the connection broke, a reply was late, or `wake` fired; the inner
    /// ones carry each command's own reply or error reply.
    func execute(_ commands: [[String]]) -> Result<[Result<RedisValue, RedisError>], RedisError> {
        if self.context == nil {
            do { try self.connect() } catch let error as RedisError { return .failure(error) } catch {
                return .failure(RedisError(.connection, "\(error)"))
            }
        }
        for command in commands {
            if let error = self.append(command) { return .failure(error) }
        }
        if let error = self.flush() { return .failure(error) }
        var replies: [Result<RedisValue, RedisError>] = []
        replies.reserveCapacity(commands.count)
        for _ in commands {
            switch self.nextReply(timeoutMilliseconds: self.timeoutMilliseconds) {
            case .failure(let error):
                return .failure(error)
            case .success(.reply(let reply)):
                replies.append(reply)
            case .success(.idle):
                self.drop()
                return .failure(RedisError(.connection, "no reply within \(self.configuration.timeoutMilliseconds) ms"))
            case .success(.woken):
                self.drop()
                return .failure(RedisError(.connection, "stopped while waiting for Redis"))
            }
        }
        return .success(replies)
    }

    /// What ``awaitPush(timeoutMilliseconds:)`` saw.
    enum Push {
        /// A whole reply (in subscribe mode: a message, a subscription confirmation or a `pong`).
        case reply(RedisValue)
        /// Nothing arrived within the timeout.
        case idle
        /// The `wake` descriptor became readable.
        case woken
    }

    /// Waits for the next reply of a connection in subscribe mode, for at most `timeoutMilliseconds`,
    /// or until `wake` becomes readable. An error reply fails. Blocks: own thread only.
    func awaitPush(timeoutMilliseconds: Int32) -> Result<Push, RedisError> {
        switch self.nextReply(timeoutMilliseconds: timeoutMilliseconds) {
        case .failure(let error): return .failure(error)
        case .success(.reply(.success(let value))): return .success(.reply(value))
        case .success(.reply(.failure(let error))): return .failure(error)
        case .success(.idle): return .success(.idle)
        case .success(.woken): return .success(.woken)
        }
    }

    private enum Wait {
        case reply(Result<RedisValue, RedisError>)
        case idle
        case woken
    }

    /// The next whole reply (a value or Redis' error reply), nothing within `timeoutMilliseconds`, or
    /// `wake`; fails when the connection broke.
    private func nextReply(timeoutMilliseconds: Int32) -> Result<Wait, RedisError> {
        guard let context = self.context else { return .failure(RedisError(.connection, "not connected")) }
        while true {
            var raw: UnsafeMutableRawPointer?
            guard redisGetReplyFromReader(context, &raw) == REDIS_OK else {
                let error = RedisError(.protocolViolation, Self.contextError(context))
                self.drop()
                return .failure(error)
            }
            if let raw {
                defer { freeReplyObject(raw) }
                return .success(.reply(Self.decode(raw.assumingMemoryBound(to: redisReply.self))))
            }
            switch self.wait(for: POLLIN, on: context.pointee.fd, timeoutMilliseconds: timeoutMilliseconds) {
            case .failure(let error):
                self.drop()
                return .failure(error)
            case .success(.timedOut): return .success(.idle)
            case .success(.woken): return .success(.woken)
            case .success(.ready): break
            }
            guard redisBufferRead(context) == REDIS_OK else {
                let error = RedisError(.connection, Self.contextError(context))
                self.drop()
                return .failure(error)
            }
        }
    }

    /// Sends one command without waiting for its reply (subscribe mode: the reply arrives as a push).
    func write(_ command: [String]) -> RedisError? {
        self.append(command) ?? self.flush()
    }

    private func append(_ command: [String]) -> RedisError? {
        guard let context = self.context else { return RedisError(.connection, "not connected") }
        if let error = Self.append(command, to: context) {
            self.drop()
            return error
        }
        return nil
    }

    /// Writes what the commands appended so far left in hiredis' buffer.
    private func flush() -> RedisError? {
        guard let context = self.context else { return RedisError(.connection, "not connected") }
        var done: Int32 = 0
        while true {
            guard redisBufferWrite(context, &done) == REDIS_OK else {
                let error = RedisError(.connection, Self.contextError(context))
                self.drop()
                return error
            }
            if done != 0 { return nil }
            // The socket's buffer is full (it never blocks): wait until it takes more.
            let waited = self.wait(for: POLLOUT, on: context.pointee.fd, timeoutMilliseconds: self.timeoutMilliseconds)
            switch waited {
            case .success(.ready): continue
            case .success(.timedOut): self.drop(); return RedisError(.connection, "could not send to Redis within \(self.timeoutMilliseconds) ms")
            case .success(.woken): self.drop(); return RedisError(.connection, "stopped while sending to Redis")
            case .failure(let error): self.drop(); return error
            }
        }
    }

    private var timeoutMilliseconds: Int32 { Int32(clamping: self.configuration.timeoutMilliseconds) }

    private enum Readiness {
        case ready
        case timedOut
        case woken
    }

    /// Polls `descriptor` for `events`, beside `wake`, for at most `timeoutMilliseconds` in all.
    private func wait(for events: Int32, on descriptor: Int32, timeoutMilliseconds: Int32) -> Result<Readiness, RedisError> {
        let deadline = ContinuousClock.now + .milliseconds(timeoutMilliseconds)
        var left = timeoutMilliseconds
        while true {
            var descriptors = [pollfd(fd: descriptor, events: Int16(events), revents: 0), pollfd(fd: self.wake, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&descriptors, 2, left)
            if ready < 0 {
                if errno == EINTR {
                    let remaining = ContinuousClock.now.duration(to: deadline).components
                    left = Int32(clamping: max(0, remaining.seconds * 1000 + remaining.attoseconds / 1_000_000_000_000_000))
                    continue
                }
                return .failure(RedisError(.connection, "poll failed: errno \(errno)"))
            }
            if ready == 0 { return .success(.timedOut) }
            if descriptors[1].revents != 0 { return .success(.woken) }
            return .success(.ready)
        }
    }

    /// Connects without blocking past `wake`, to each address of the host in turn until one takes the
    /// connection: an address that drops the attempt is given the configured timeout. The socket stays
    /// non-blocking; every read and write waits in ``wait(for:on:timeoutMilliseconds:)``. Only resolving the
    /// host name (`getaddrinfo`) cannot be cut short.
    private func connect() throws {
        let candidates: [String]
        do {
            candidates = try self.resolve(self.configuration.host)
        } catch {
            throw RedisError(.connection, "\(self.configuration.host):\(self.configuration.port): \(error)")
        }
        var context: UnsafeMutablePointer<redisContext>?
        var failures: [String] = []
        for candidate in candidates where context == nil {
            do {
                context = try self.open(candidate)
            } catch let error as RedisError {
                failures.append(error.message)
                // Stopped meanwhile: no other address either.
                if self.isWoken { break }
            }
        }
        guard let context else {
            throw RedisError(.connection, failures.joined(separator: "; "))
        }
        _ = redisEnableKeepAlive(context)
        self.context = context
        try self.setUp()
    }

    /// A non-blocking connection to one numeric address, within the configured timeout.
    private func open(_ host: String) throws -> UnsafeMutablePointer<redisContext> {
        let address = host == self.configuration.host
            ? "\(host):\(self.configuration.port)" : "\(self.configuration.host) (\(host)):\(self.configuration.port)"
        guard let context = redisConnectNonBlock(host, Int32(self.configuration.port)) else {
            throw RedisError(.connection, "cannot allocate a hiredis context")
        }
        if context.pointee.err != 0 {
            let message = Self.contextError(context)
            redisFree(context)
            throw RedisError(.connection, "\(address): \(message)")
        }
        let fd = context.pointee.fd
        var failure: String?
        switch self.wait(for: POLLOUT, on: fd, timeoutMilliseconds: self.timeoutMilliseconds) {
        case .failure(let error): failure = error.message
        case .success(.timedOut): failure = "no connection within \(self.configuration.timeoutMilliseconds) ms"
        case .success(.woken): failure = "stopped while connecting"
        case .success(.ready):
            var code: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            if getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length) != 0 { code = errno }
            if code != 0 { failure = String(cString: strerror(code)) }
        }
        if let failure {
            redisFree(context)
            throw RedisError(.connection, "\(address): \(failure)")
        }
        return context
    }

    /// Whether `wake` is readable now (the owner stops).
    private var isWoken: Bool {
        var descriptor = pollfd(fd: self.wake, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, 0) > 0
    }

    /// Authenticates and selects the database on the new connection.
    private func setUp() throws {
        var setup: [[String]] = []
        if let password = self.configuration.password {
            if let username = self.configuration.username {
                setup.append(["AUTH", username, password])
            } else {
                setup.append(["AUTH", password])
            }
        }
        if self.configuration.database != 0 {
            setup.append(["SELECT", String(self.configuration.database)])
        }
        guard !setup.isEmpty else { return }
        switch self.execute(setup) {
        case .failure(let error):
            throw error
        case .success(let replies):
            for case .failure(let error) in replies {
                self.drop()
                // Redis' own text ("WRONGPASS …"), without the arguments it may quote.
                throw RedisError.setupFailed(error.message)
            }
        }
    }

    private func drop() {
        if let context { redisFree(context) }
        self.context = nil
    }

    private static func append(_ command: [String], to context: UnsafeMutablePointer<redisContext>) -> RedisError? {
        // One contiguous buffer for all arguments (copied whole from each string's UTF-8); hiredis copies
        // it into its output buffer at once.
        var bytes: [UInt8] = []
        var offsets: [Int] = []
        var lengths: [Int] = []
        offsets.reserveCapacity(command.count)
        lengths.reserveCapacity(command.count)
        bytes.reserveCapacity(command.reduce(1) { $0 + $1.utf8.count })
        for argument in command {
            offsets.append(bytes.count)
            lengths.append(argument.utf8.count)
            bytes.append(contentsOf: argument.utf8)
        }
        if bytes.isEmpty { bytes.append(0) }
        let status = bytes.withUnsafeBytes { raw -> Int32 in
            guard let base = raw.baseAddress?.assumingMemoryBound(to: CChar.self) else { return REDIS_ERR }
            var argv: [UnsafePointer<CChar>?] = offsets.map { base + $0 }
            return argv.withUnsafeMutableBufferPointer { argvBuffer in
                lengths.withUnsafeBufferPointer { lengthBuffer in
                    redisAppendCommandArgv(context, Int32(command.count), argvBuffer.baseAddress, lengthBuffer.baseAddress)
                }
            }
        }
        return status == REDIS_OK ? nil : RedisError(.connection, Self.contextError(context))
    }

    /// Converts a hiredis reply tree; the caller frees it.
    static func decode(_ reply: UnsafeMutablePointer<redisReply>) -> Result<RedisValue, RedisError> {
        let node = reply.pointee
        switch node.type {
        case REDIS_REPLY_ERROR:
            return .failure(RedisError(.server, Self.text(node)))
        case REDIS_REPLY_STATUS:
            return .success(.status(Self.text(node)))
        case REDIS_REPLY_STRING:
            guard let string = node.str else { return .success(.bulk([])) }
            let buffer = UnsafeRawBufferPointer(start: string, count: Int(node.len))
            return .success(.bulk(Array(buffer)))
        case REDIS_REPLY_INTEGER:
            return .success(.integer(Int(node.integer)))
        case REDIS_REPLY_NIL:
            return .success(.null)
        case REDIS_REPLY_ARRAY:
            var values: [RedisValue] = []
            values.reserveCapacity(Int(node.elements))
            for index in 0..<Int(node.elements) {
                guard let element = node.element[index] else {
                    values.append(.null)
                    continue
                }
                switch Self.decode(element) {
                case .success(let value): values.append(value)
                // An error nested in an array (e.g. inside EXEC) fails the whole reply.
                case .failure(let error): return .failure(error)
                }
            }
            return .success(.array(values))
        default:
            return .failure(RedisError(.protocolViolation, "unexpected reply type \(node.type)"))
        }
    }

    private static func text(_ node: redisReply) -> String {
        guard let string = node.str else { return "" }
        let buffer = UnsafeRawBufferPointer(start: string, count: Int(node.len))
        return String(decoding: buffer, as: UTF8.self)
    }

    private static func contextError(_ context: UnsafeMutablePointer<redisContext>) -> String {
        withUnsafeBytes(of: context.pointee.errstr) { raw in
            let bytes = raw.prefix { $0 != 0 }
            let message = String(decoding: bytes, as: UTF8.self)
            return message.isEmpty ? "connection lost" : message
        }
    }
}

/// hiredis' protocol reader: bytes in, whole replies out, whatever way the bytes were split.
///
/// Not thread-safe; owned by one connection's handler on its event loop.
final class RedisReplyReader {
    /// What ``next()`` found.
    enum Next {
        /// A whole reply: a value, or Redis' error reply.
        case reply(Result<RedisValue, RedisError>)
        /// The bytes so far end mid-reply.
        case incomplete
        /// The bytes are not the Redis protocol; the connection cannot go on.
        case failed(RedisError)
    }

    private let reader: UnsafeMutablePointer<redisReader>

    init() {
        guard let reader = redisReaderCreate() else { fatalError("hiredis could not allocate a reader") }
        self.reader = reader
    }

    deinit {
        redisReaderFree(self.reader)
    }

    /// Appends bytes read from the socket; false when the reader is out of memory.
    func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return true }
        return redisReaderFeed(self.reader, base.assumingMemoryBound(to: CChar.self), bytes.count) == REDIS_OK
    }

    /// The next whole reply, if the bytes fed so far hold one.
    func next() -> Next {
        var raw: UnsafeMutableRawPointer?
        guard redisReaderGetReply(self.reader, &raw) == REDIS_OK else {
            let message = withUnsafeBytes(of: self.reader.pointee.errstr) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            return .failed(RedisError(.protocolViolation, message.isEmpty ? "unreadable reply" : message))
        }
        guard let raw else { return .incomplete }
        defer { freeReplyObject(raw) }
        return .reply(RedisConnection.decode(raw.assumingMemoryBound(to: redisReply.self)))
    }
}
