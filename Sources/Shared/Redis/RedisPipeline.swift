import NIOCore
import NIOPosix

/// One Redis connection shared by many concurrent callers through automatic pipelining, driven by a
/// SwiftNIO event loop.
///
/// Commands queued within one turn of the loop leave in one write, and their replies (parsed by hiredis'
/// reader) come back in order. Nothing blocks: the socket is non-blocking and owned by the event loop,
/// and no thread of the client's own sits between the caller and the socket.
/// Connects lazily and again after a failure; commands in flight when the connection broke fail with a
/// ``RedisError`` of code `.connection`.
final class RedisPipeline: Sendable {
    /// The loop that owns the connection.
    let eventLoop: any EventLoop
    private let core: Core

    init(configuration: RedisConfiguration, eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
        self.core = Core(configuration: configuration, eventLoop: eventLoop)
    }

    /// Sends one command and waits for its reply.
    func send(_ command: [String]) async throws -> RedisValue {
        try await withCheckedThrowingContinuation { continuation in
            if self.eventLoop.inEventLoop {
                self.core.enqueue(command, continuation)
            } else {
                self.eventLoop.execute { self.core.enqueue(command, continuation) }
            }
        }
    }

    /// Fails queued commands, refuses new ones and closes the connection.
    func close() async {
        let closed = self.eventLoop.flatSubmit { self.core.close() }
        try? await closed.get()
    }
}

/// The pipeline's state. Confined to its event loop: every method runs there, which is what makes the
/// unchecked `Sendable` sound.
private final class Core: @unchecked Sendable {
    private enum State {
        case idle
        case connecting
        /// Connected, `AUTH`/`SELECT` sent, their replies not all read: commands stay parked until they
        /// are, so that none runs unauthenticated or in database 0 when `SELECT` fails.
        case settingUp(any Channel, RedisReplyHandler)
        case connected(any Channel, RedisReplyHandler)
        case closed
    }

    private typealias Parked = (command: [String], continuation: CheckedContinuation<RedisValue, any Error>)

    private let configuration: RedisConfiguration
    private let eventLoop: any EventLoop
    private var state = State.idle
    /// Commands waiting for the connection to open.
    private var parked: [Parked] = []
    /// Encoded commands waiting for the end of this turn of the loop.
    private var outbound = ByteBuffer()
    private var flushScheduled = false

    init(configuration: RedisConfiguration, eventLoop: any EventLoop) {
        self.configuration = configuration
        self.eventLoop = eventLoop
    }

    func enqueue(_ command: [String], _ continuation: CheckedContinuation<RedisValue, any Error>) {
        self.eventLoop.assertInEventLoop()
        switch self.state {
        case .connected(_, let handler):
            self.write(command, waiter: .caller(continuation), handler: handler)
        case .connecting, .settingUp:
            self.parked.append((command, continuation))
        case .idle:
            self.parked.append((command, continuation))
            self.connect()
        case .closed:
            continuation.resume(throwing: RedisError(.closed, "the Redis client is shut down"))
        }
    }

    func close() -> EventLoopFuture<Void> {
        self.eventLoop.assertInEventLoop()
        let previous = self.state
        self.state = .closed
        self.failParked(RedisError(.closed, "the Redis client is shut down"))
        let channel: any Channel
        let handler: RedisReplyHandler
        switch previous {
        case .connected(let open, let current), .settingUp(let open, let current):
            (channel, handler) = (open, current)
        case .idle, .connecting, .closed:
            return self.eventLoop.makeSucceededVoidFuture()
        }
        handler.closeReason = RedisError(.closed, "the Redis client is shut down")
        return channel.close().recover { _ in }
    }

    private func write(_ command: [String], waiter: RedisReplyHandler.Waiter, handler: RedisReplyHandler) {
        if let error = handler.expect(waiter) {
            waiter.fail(error)
            return
        }
        RESP.encode(command, into: &self.outbound)
        guard !self.flushScheduled else { return }
        self.flushScheduled = true
        // Everything queued until this task runs leaves in one write.
        self.eventLoop.execute { self.flush() }
    }

    private func flush() {
        self.flushScheduled = false
        guard self.outbound.readableBytes > 0 else { return }
        let channel: any Channel
        switch self.state {
        case .connected(let open, _), .settingUp(let open, _): channel = open
        case .idle, .connecting, .closed: return
        }
        let bytes = self.outbound
        self.outbound = channel.allocator.buffer(capacity: 1024)
        channel.writeAndFlush(bytes, promise: nil)
    }

    private func connect() {
        self.state = .connecting
        let configuration = self.configuration
        let timeout = TimeAmount.milliseconds(Int64(configuration.timeoutMilliseconds))
        ClientBootstrap(group: self.eventLoop)
            .connectTimeout(timeout)
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // The idle check runs every tenth of the timeout, counted from the last read, so a command sent
                    // just after one fails at most a tenth past its timeout (a half made that up to half).
                    try channel.pipeline.syncOperations.addHandlers(
                        IdleStateHandler(readTimeout: .nanoseconds(timeout.nanoseconds / 10)),
                        RedisReplyHandler(timeout: timeout)
                    )
                }
            }
            .connect(host: configuration.host, port: configuration.port)
            .whenComplete { result in self.connected(result) }
    }

    private func connected(_ result: Result<any Channel, any Error>) {
        guard case .connecting = self.state else {
            // Closed while connecting.
            if case .success(let channel) = result { channel.close(promise: nil) }
            return
        }
        let channel: any Channel
        let handler: RedisReplyHandler
        do {
            channel = try result.get()
            handler = try channel.pipeline.syncOperations.handler(type: RedisReplyHandler.self)
        } catch {
            self.state = .idle
            let address = "\(self.configuration.host):\(self.configuration.port)"
            self.failParked(RedisError(.connection, "\(address): \(error)"))
            return
        }
        handler.onClose = { [weak handler] in
            // Only the current connection's end makes the next command reconnect.
            switch self.state {
            case .connected(_, let current) where current === handler:
                self.state = .idle
                self.outbound.clear()
            case .settingUp(_, let current) where current === handler:
                // AUTH or SELECT failed (or the connection broke before they answered): the commands
                // waiting for them were never sent, and fail with the reason.
                self.state = .idle
                self.outbound.clear()
                self.failParked(handler?.closeReason ?? RedisError(.connection, "connection lost during AUTH/SELECT"))
            default:
                return
            }
        }
        var setup: [[String]] = []
        if let password = self.configuration.password {
            setup.append(self.configuration.username.map { ["AUTH", $0, password] } ?? ["AUTH", password])
        }
        if self.configuration.database != 0 {
            setup.append(["SELECT", String(self.configuration.database)])
        }
        guard !setup.isEmpty else {
            self.state = .connected(channel, handler)
            return self.sendParked(handler)
        }
        self.state = .settingUp(channel, handler)
        for (index, command) in setup.enumerated() {
            let done: (() -> Void)? = index == setup.count - 1 ? { self.setUp(handler) } : nil
            self.write(command, waiter: .setup(done), handler: handler)
        }
    }

    /// The last setup reply was a success: the connection takes commands.
    private func setUp(_ handler: RedisReplyHandler) {
        guard case .settingUp(let channel, let current) = self.state, current === handler else { return }
        self.state = .connected(channel, handler)
        self.sendParked(handler)
    }

    private func sendParked(_ handler: RedisReplyHandler) {
        let parked = self.parked
        self.parked = []
        for (command, continuation) in parked {
            self.write(command, waiter: .caller(continuation), handler: handler)
        }
    }

    private func failParked(_ error: RedisError) {
        let parked = self.parked
        self.parked = []
        for (_, continuation) in parked { continuation.resume(throwing: error) }
    }
}

/// Matches replies to the commands written on one connection, in order, and fails the ones still
/// waiting when the connection ends. A reply that waits longer than the timeout closes the connection.
final class RedisReplyHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    /// Who waits for a reply.
    enum Waiter {
        case caller(CheckedContinuation<RedisValue, any Error>)
        /// `AUTH` or `SELECT` sent on connecting: an error reply ends the connection; a success runs the
        /// closure (given to the last of them).
        case setup((() -> Void)?)

        func fail(_ error: RedisError) {
            if case .caller(let continuation) = self { continuation.resume(throwing: error) }
        }
    }

    private var waiters = CircularBuffer<Waiter>(initialCapacity: 64)
    private let reader = RedisReplyReader()
    private let timeout: TimeAmount
    private var lastProgress = NIODeadline.now()
    private var ended = false
    /// Why the connection is being closed, given to the commands still waiting.
    var closeReason: RedisError?
    /// Called once the connection has ended and every waiter has been failed.
    var onClose: (() -> Void)?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    /// Registers the next reply's waiter; returns the error to fail it with when the connection ended.
    func expect(_ waiter: Waiter) -> RedisError? {
        if self.ended { return self.closeReason ?? RedisError(.connection, "connection lost") }
        if self.waiters.isEmpty { self.lastProgress = .now() }
        self.waiters.append(waiter)
        return nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = self.unwrapInboundIn(data)
        self.lastProgress = .now()
        guard buffer.withUnsafeReadableBytes({ self.reader.feed($0) }) else {
            return self.fail(context, RedisError(.protocolViolation, "hiredis' reader refused the reply bytes"))
        }
        while true {
            switch self.reader.next() {
            case .incomplete:
                return
            case .failed(let error):
                return self.fail(context, error)
            case .reply(let reply):
                guard let waiter = self.waiters.popFirst() else {
                    return self.fail(context, RedisError(.protocolViolation, "a reply arrived that no command waits for"))
                }
                switch (waiter, reply) {
                case (.caller(let continuation), _):
                    continuation.resume(with: reply.mapError { $0 })
                    if case .failure(let error) = reply, error.isReadOnly {
                        // A failover demoted this server and its address still leads here: reconnect, so the
                        // next commands resolve the address again and reach the new primary. The commands
                        // still waiting get a retryable connection error.
                        return self.fail(context, RedisError(.connection, "Redis became a read-only replica: reconnecting"))
                    }
                case (.setup, .failure(let error)):
                    // Redis' own text ("WRONGPASS …"), without the arguments it may quote.
                    return self.fail(context, RedisError.setupFailed(error.message))
                case (.setup(let done), .success):
                    done?()
                }
            }
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let idle = event as? IdleStateHandler.IdleStateEvent, idle == .read else {
            return context.fireUserInboundEventTriggered(event)
        }
        if !self.waiters.isEmpty, self.lastProgress + self.timeout <= .now() {
            self.fail(context, RedisError(.connection, "no reply within \(self.timeout.nanoseconds / 1_000_000) ms"))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.fail(context, RedisError(.connection, "\(error)"))
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.ended = true
        // Every waiter's command was written, or queued to be, on this connection: it may have run.
        let error = (self.closeReason ?? RedisError(.connection, "connection lost")).inFlight()
        while let waiter = self.waiters.popFirst() { waiter.fail(error) }
        self.onClose?()
        self.onClose = nil
        context.fireChannelInactive()
    }

    private func fail(_ context: ChannelHandlerContext, _ error: RedisError) {
        if self.closeReason == nil { self.closeReason = error }
        context.close(promise: nil)
    }
}

/// The Redis protocol's request side: an array of bulk strings.
enum RESP {
    static func encode(_ command: [String], into buffer: inout ByteBuffer) {
        buffer.writeStaticString("*")
        buffer.writeString(String(command.count))
        buffer.writeStaticString("\r\n")
        for argument in command {
            buffer.writeStaticString("$")
            buffer.writeString(String(argument.utf8.count))
            buffer.writeStaticString("\r\n")
            buffer.writeString(argument)
            buffer.writeStaticString("\r\n")
        }
    }
}
