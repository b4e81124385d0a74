import Hummingbird

/// Builds the answer of an injected failure.
enum FaultResponder {
    /// A well-formed answer cut in half for the `truncated` mode: it starts like a real answer, so a
    /// client that only sniffs the first bytes is caught too.
    private static let truncatedBody: String = {
        let whole = #"{"status":0,"environment":"Production","receipt":{"receipt_type":"Production","adam_id":0,"app_item_id":0,"bundle_id":"com.example.app","application_version":"1","in_app":[{"quantity":"1","product_id":"com.example.product","transaction_id":"1000000000000001","original_transaction_id":"1000000000000001"}]}}"#
        return String(whole.prefix(whole.count / 2))
    }()

    private static let malformedBody = #"{"status":"zero","environment":7,"receipt":[{"bundle_id":null}],"latest_receipt_info":"none"}"#

    /// 20 MiB of well-formed JSON, built on first use only.
    private static let oversizedBody: ByteBuffer = {
        var buffer = ByteBuffer(string: #"{"status":0,"environment":"Production","padding":""#)
        buffer.writeRepeatingByte(UInt8(ascii: "A"), count: 20 << 20)
        buffer.writeString(#""}"#)
        return buffer
    }()

    /// HTTP 200 whose body is `{"status":`, then `holdMs` of silence or of a space every 100 ms, then `21005}`.
    private static func slowAnswer(holdMs: Int, trickle: Bool, state: EmulatorState) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody { writer in
            try await writer.write(ByteBuffer(string: #"{"status":"#))
            if trickle {
                let clock = ContinuousClock()
                let end = clock.now.advanced(by: .milliseconds(holdMs))
                while clock.now < end, !state.holdsAreReleased {
                    // The last slice is what is left of the hold, so the answer ends when the hold does.
                    let left = clock.now.duration(to: end).components
                    try await state.hold(milliseconds: min(100, max(1, Int(left.seconds * 1000 + left.attoseconds / 1_000_000_000_000_000))))
                    try await writer.write(ByteBuffer(string: " "))
                }
            } else {
                try await state.hold(milliseconds: holdMs)
            }
            try await writer.write(ByteBuffer(string: "21005}"))
            try await writer.finish(nil)
        })
    }

    private static let htmlBody = "<!DOCTYPE html><html><head><title>503 Service Temporarily Unavailable</title></head><body><h1>Service Temporarily Unavailable</h1></body></html>"

    /// The response for `mode` to a call of `endpoint`; `timeout` first holds the request for `holdMs`, and
    /// `stall` and `trickle` their answer's body (without blocking a thread, and only until `state`
    /// releases holds at shutdown).
    static func response(
        for mode: FailMode, endpoint: AppleEnvironment, holdMs: Int, retryableKey: RetryableKey, state: EmulatorState
    ) async throws -> Response {
        switch mode {
        case .http500:
            return Response(status: .internalServerError)
        case .http503:
            return Response(status: .serviceUnavailable, headers: [.retryAfter: "1"])
        case .http429:
            return Response(status: .tooManyRequests, headers: [.retryAfter: "1"])
        case .timeout:
            try await state.hold(milliseconds: holdMs)
            return Response(status: .gatewayTimeout)
        case .stall, .trickle:
            return Self.slowAnswer(holdMs: holdMs, trickle: mode == .trickle, state: state)
        case .redirect:
            // Another URL of the same route: a client that follows it gets the real answer.
            return Response(status: .temporaryRedirect, headers: [.location: "\(endpoint.path)?moved=1"])
        case .html:
            return Self.ok(htmlBody, contentType: "text/html; charset=utf-8")
        case .empty:
            return Response(status: .ok, headers: [.contentType: "application/json"])
        case .truncated:
            return Self.ok(truncatedBody)
        case .malformed:
            return Self.ok(malformedBody)
        case .oversized:
            return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: oversizedBody))
        case .status21002:
            return try JSONAnswer.response(AppleVerifyReceiptResponse.status(21002))
        case .status21005:
            return try JSONAnswer.response(AppleVerifyReceiptResponse.status(21005))
        case .status21010:
            return try JSONAnswer.response(AppleVerifyReceiptResponse.status(21010))
        case .status21199:
            var answer = AppleVerifyReceiptResponse.status(21199)
            answer.isRetryable = true
            answer.retryableKey = retryableKey
            return try JSONAnswer.response(answer)
        }
    }

    /// A 200 whose body is `text`, which a client must not take for Apple's answer.
    private static func ok(_ text: String, contentType: String = "application/json") -> Response {
        Response(status: .ok, headers: [.contentType: contentType], body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}
