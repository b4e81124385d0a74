import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes

extension HTTPServerBuilder {
    /// HTTP/1.1 as the API and the worker serve it. A connection that goes quiet is closed after
    /// `idleTimeoutSeconds` (`TOLLGATE_HTTP_IDLE_TIMEOUT_S`): one left open by a client that vanished, or one
    /// stalled half-way through a request head or body, would otherwise hold its file descriptor for good. A
    /// request's body must also arrive whole within that time of its head (``RequestDeadlineHandler``). A
    /// request read whole is never cut while the server works on it.
    public static func tollgate(idleTimeoutSeconds: Int, logger: Logger) -> HTTPServerBuilder {
        let timeout = TimeAmount.seconds(Int64(idleTimeoutSeconds))
        return .http1(configuration: .init(
            additionalChannelHandlers: [RequestDeadlineHandler(timeout: timeout, logger: logger)],
            idleTimeout: timeout
        ))
    }
}

/// Closes a connection whose request has not arrived whole `timeout` after its head did.
///
/// Hummingbird's idle timeout counts from the last part read, and every piece of a body is a part: a client
/// that sends a body a byte a minute would hold its connection, and the body read so far (up to 1 MiB), for
/// good, and a few thousand such clients need no credentials. With this handler a request's body must follow
/// its head within the timeout.
///
/// Only the client's time counts: while the server holds reads back (its handler has not got to the body
/// yet, and the channel stops reading), the deadline moves on by as long. A request read whole is never cut
/// while the server works on it, a response still owed for an earlier pipelined request is written before
/// the connection closes, and a keep-alive connection between requests is left to the idle timeout.
///
/// Add one per connection, after the HTTP codec (Hummingbird's `additionalChannelHandlers`).
public final class RequestDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart
    public typealias OutboundIn = HTTPResponsePart
    public typealias OutboundOut = HTTPResponsePart

    private let timeout: TimeAmount
    private let logger: Logger
    /// When the request being read must be whole, in the client's time; nil when none is being read.
    private var deadline: NIODeadline?
    /// Since when the server has held reads back, while a request is being read.
    private var heldSince: NIODeadline?
    private var timer: Scheduled<Void>?
    /// Request heads read, and responses ended: in order, so the responses owed are the difference.
    private var heads = 0
    private var answered = 0
    /// The deadline passed while an earlier request's response was owed: close once it is written.
    private var closeOnceAnswered = false

    public init(timeout: TimeAmount, logger: Logger) {
        self.timeout = timeout
        self.logger = logger
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head:
            self.heads += 1
            self.deadline = context.eventLoop.now + self.timeout
            self.heldSince = nil
            self.arm(context: context)
        case .body:
            break
        case .end:
            self.deadline = nil
            self.heldSince = nil
            self.closeOnceAnswered = false
            self.disarm()
        }
        context.fireChannelRead(data)
    }

    /// A read cycle ended: until the server asks for more, it holds reads back, and the time is its own.
    public func channelReadComplete(context: ChannelHandlerContext) {
        if self.deadline != nil, self.heldSince == nil {
            self.heldSince = context.eventLoop.now
            self.disarm()
        }
        context.fireChannelReadComplete()
    }

    public func read(context: ChannelHandlerContext) {
        if let held = self.heldSince, let deadline = self.deadline {
            self.deadline = deadline + (context.eventLoop.now - held)
            self.heldSince = nil
            self.arm(context: context)
        }
        context.read()
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .end = self.unwrapOutboundIn(data) else { return context.write(data, promise: promise) }
        self.answered += 1
        guard self.closeOnceAnswered, self.answered >= self.heads - 1 else { return context.write(data, promise: promise) }
        context.writeAndFlush(data, promise: promise)
        self.close(context: context)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        self.disarm()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        self.disarm()
    }

    private func arm(context: ChannelHandlerContext) {
        self.disarm()
        guard let deadline = self.deadline else { return }
        self.timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            self.timer = nil
            // Responses owed for earlier requests (pipelined) are written first.
            if self.answered < self.heads - 1 {
                self.closeOnceAnswered = true
            } else {
                self.close(context: context)
            }
        }
    }

    private func close(context: ChannelHandlerContext) {
        // The peer's address only: what it sent may be a receipt.
        self.logger.debug("request body not received whole in time, connection closed", metadata: [
            "timeout_s": "\(self.timeout.nanoseconds / 1_000_000_000)",
            "peer": "\(context.channel.remoteAddress?.description ?? "?")",
        ])
        context.close(promise: nil)
    }

    private func disarm() {
        self.timer?.cancel()
        self.timer = nil
    }
}
