import AsyncHTTPClient
import Foundation
import NIOCore
import Synchronization

/// Calls Apple's verifyReceipt (or the emulator) and classifies each answer.
///
/// TLS certificates are always verified (async-http-client's default); there is no switch to turn that off.
public struct VerifyReceiptClient: Sendable {
    /// Apple's two endpoints.
    public enum Environment: String, Sendable {
        case production = "Production"
        case sandbox = "Sandbox"
    }

    private let http: HTTPClient
    private let productionURL: String
    private let sandboxURL: String
    private let timeout: TimeAmount
    /// The largest answer read; receipts with hundreds of entries are far below it.
    private let maxAnswerBytes = 16 << 20
    /// What every call of this client (and its copies) may hold of answers being read at once: with
    /// hundreds of calls in flight, ``maxAnswerBytes`` each would be gigabytes.
    private let answers: AnswerBudget

    /// Creates a client over a shared `HTTPClient`; `answerBudgetBytes` bounds the answers its calls read
    /// at once (a call whose answer does not fit is a transport failure, retried later).
    public init(http: HTTPClient, productionURL: String, sandboxURL: String, timeoutMilliseconds: Int, answerBudgetBytes: Int = 128 << 20) {
        self.http = http
        self.productionURL = productionURL
        self.sandboxURL = sandboxURL
        self.timeout = .milliseconds(Int64(timeoutMilliseconds))
        self.answers = AnswerBudget(bytes: answerBudgetBytes)
    }

    /// The HTTP client the worker calls Apple with: a connection pool sized for
    /// `TOLLGATE_WORKER_CONCURRENCY` calls in flight, connect and read timeouts, and async-http-client's
    /// default TLS configuration, which verifies certificates against the system's trust roots. Nothing in
    /// the configuration can turn verification off.
    ///
    /// Redirects are not followed: Apple does not send them, and following one would re-send the receipt
    /// and the shared secret wherever `Location` points (or, on a 301-303, drop the body and ask with GET,
    /// which Apple answers 21000, a final rejection). A redirect is a failed call, retried like a 503.
    ///
    /// The read timeout (no byte for `TOLLGATE_APPLE_TIMEOUT_MS`) stops a connection that falls silent;
    /// ``verify(receiptData:password:excludeOldTransactions:environment:)`` bounds the whole call, a body
    /// that trickles after its head included.
    public static func makeHTTPClient(configuration: Configuration) -> HTTPClient {
        var http = HTTPClient.Configuration()
        http.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: configuration.workerConcurrency)
        http.timeout = .init(
            connect: .milliseconds(Int64(min(configuration.appleTimeoutMilliseconds, 10_000))),
            read: .milliseconds(Int64(configuration.appleTimeoutMilliseconds))
        )
        http.redirectConfiguration = .disallow
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: http)
    }

    /// The request body Apple documents ("requestBody"), written by hand as every body on the hot path is.
    static func requestBody(receiptData: String, password: String?, excludeOldTransactions: Bool) -> [UInt8] {
        var object = JSONObjectWriter()
        if excludeOldTransactions { object.add("exclude-old-transactions", true) }
        if let password { object.add("password", password) }
        object.add("receipt-data", receiptData)
        return object.bytes
    }

    /// One call to one environment, classified. Never throws: every failure is a verdict.
    public func verify(
        receiptData: String, password: String?, excludeOldTransactions: Bool, environment: Environment
    ) async -> AppleVerdict {
        let url = environment == .production ? self.productionURL : self.sandboxURL
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Accept", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: Self.requestBody(
            receiptData: receiptData, password: password, excludeOldTransactions: excludeOldTransactions
        )))
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        // The answer's bytes count against the budget until it is classified.
        let reservation = AnswerBudget.Reservation(self.answers)
        defer { reservation.release() }
        do {
            // One deadline for the whole call: async-http-client's ends when the head arrives.
            let deadline = NIODeadline.now() + self.timeout
            response = try await self.http.execute(request, deadline: deadline)
            bytes = try await Self.collect(response.body, upTo: self.maxAnswerBytes, reserving: reservation, before: deadline)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            return .transportFailure("\(environment.rawValue): timeout")
        } catch is AnswerBudget.TooLarge {
            return .transportFailure("\(environment.rawValue): answer larger than \(self.maxAnswerBytes) bytes")
        } catch is AnswerBudget.Exhausted {
            return .transportFailure(
                "\(environment.rawValue): answers being read at once would pass \(self.answers.bytes) bytes; tried again later"
            )
        } catch {
            return .transportFailure("\(environment.rawValue): \(LoggableError.describe(error))")
        }
        guard response.status == .ok else {
            return .transportFailure("\(environment.rawValue): HTTP \(response.status.code)")
        }
        guard let verdict = bytes.withUnsafeReadableBytes({ AppleVerdict.classify(body: $0, environment: environment) }) else {
            return .transportFailure("\(environment.rawValue): the answer is not verifyReceipt JSON")
        }
        return verdict
    }

    /// The body, each part taken from `reservation` as it arrives, or `deadlineExceeded` once `deadline`
    /// passes (the read is cancelled, which closes the connection).
    private static func collect(
        _ body: HTTPClientResponse.Body, upTo limit: Int, reserving reservation: AnswerBudget.Reservation, before deadline: NIODeadline
    ) async throws -> ByteBuffer {
        try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
            group.addTask {
                var collected = ByteBuffer()
                for try await part in body {
                    guard collected.readableBytes + part.readableBytes <= limit else { throw AnswerBudget.TooLarge() }
                    try reservation.take(part.readableBytes)
                    collected.writeImmutableBuffer(part)
                }
                return collected
            }
            group.addTask {
                try await Task.sleep(for: .nanoseconds(max(0, (deadline - NIODeadline.now()).nanoseconds)))
                return nil
            }
            defer { group.cancelAll() }
            guard let bytes = try await group.next() ?? nil else { throw HTTPClientError.deadlineExceeded }
            return bytes
        }
    }
}


/// Bytes of verifyReceipt answers that a client's calls hold at once, taken part by part as they arrive
/// and given back when each call is done.
final class AnswerBudget: Sendable {
    /// The answer is larger than one call may read.
    struct TooLarge: Error {}
    /// The answers being read would pass the budget.
    struct Exhausted: Error {}

    /// One call's share.
    final class Reservation: Sendable {
        private let budget: AnswerBudget
        private let taken = Mutex(0)

        init(_ budget: AnswerBudget) { self.budget = budget }

        /// Takes `count` more bytes, or throws ``Exhausted`` (taking nothing).
        func take(_ count: Int) throws {
            try self.taken.withLock { taken in
                guard self.budget.take(count) else { throw Exhausted() }
                taken += count
            }
        }

        /// Gives back everything taken.
        func release() {
            let count = self.taken.withLock { taken in
                defer { taken = 0 }
                return taken
            }
            self.budget.give(count)
        }
    }

    let bytes: Int
    private let used = Mutex(0)

    init(bytes: Int) { self.bytes = bytes }

    private func take(_ count: Int) -> Bool {
        self.used.withLock { used in
            guard used + count <= self.bytes else { return false }
            used += count
            return true
        }
    }

    private func give(_ count: Int) {
        self.used.withLock { $0 -= count }
    }

    /// Bytes taken now.
    var inUse: Int { self.used.withLock { $0 } }
}
