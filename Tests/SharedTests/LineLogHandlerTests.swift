import Foundation
import Logging
import Synchronization
import Testing
import TestSupport

@testable import Shared

@Suite("Log lines")
struct LineLogHandlerTests {
    @Test("a line is one JSON object: ts, level, label, msg, then metadata; hostile text is escaped")
    func line() throws {
        var handler = LineLogHandler(label: "tollgate.test", level: .info)
        handler[metadataKey: "publisher"] = "p-1"
        let hostile = "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} del \u{7f} sep \u{2028} ünï 🎟 </script>"
        let text = String(decoding: handler.line(level: .warning, message: hostile, metadata: [
            "job": "j-1", "count": .stringConvertible(3), "list": ["a", "b"], "nested": ["k": "v"], "msg": "not overriding",
        ]), as: UTF8.self)
        #expect(text.hasSuffix("}\n"))
        #expect(text.filter { $0 == "\n" }.count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object["level"] as? String == "warning")
        #expect(object["label"] as? String == "tollgate.test")
        #expect(object["msg"] as? String == hostile)
        #expect(object["publisher"] as? String == "p-1")
        #expect(object["job"] as? String == "j-1")
        #expect(object["count"] as? String == "3")
        #expect(object["list"] as? [String] == ["a", "b"])
        #expect(object["nested"] as? [String: String] == ["k": "v"])
        let ts = try #require(object["ts"] as? String)
        #expect(ts.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/) != nil)
        // The fixed keys come first, in order.
        #expect(text.hasPrefix("{\"ts\":\""))
        #expect(text.contains("\",\"level\":\"warning\",\"label\":\"tollgate.test\",\"msg\":"))
    }

    @Test("metadata: the handler's and the event's in key order, the event's value winning a shared key")
    func metadataOrder() {
        var handler = LineLogHandler(label: "t", level: .info)
        handler[metadataKey: "b"] = "handler"
        handler[metadataKey: "d"] = "4"
        let text = String(decoding: handler.line(level: .info, message: "m", metadata: ["c": "3", "b": "event", "a": "1", "label": "no"]), as: UTF8.self)
        #expect(text.hasSuffix(#""msg":"m","a":"1","b":"event","c":"3","d":"4"}"# + "\n"))
        let bare = String(decoding: handler.line(level: .info, message: "m", metadata: nil), as: UTF8.self)
        #expect(bare.hasSuffix(#""msg":"m","b":"handler","d":"4"}"# + "\n"))
    }
}

extension LineLogHandlerTests {
    @Test("a text line: time, level, label, message, then metadata as key=value; it stays one line whatever it holds")
    func textLine() throws {
        var handler = LineLogHandler(label: "tollgate.test", level: .info, format: .text, output: .standardError)
        handler[metadataKey: "b"] = "handler"
        let hostile = "forged\n2026-01-01T00:00:00.000Z info tollgate.api: granted\r\u{0}\u{7f}\u{2028} ünï"
        let text = String(decoding: handler.line(level: .warning, message: hostile, metadata: [
            "a": "1", "b": "event", "count": .stringConvertible(3), "list": ["x", "y"], "msg": "skipped", "evil": "v\nw",
        ]), as: UTF8.self)
        let match = try #require(text.wholeMatch(of: /(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z) warning tollgate\.test: (.*)\n/))
        #expect(String(match.2) == #"forged\n2026-01-01T00:00:00.000Z info tollgate.api: granted\r\u0000\u007f\u2028 ünï"#
            + #" a=1 b=event count=3 evil=v\nw list=["x","y"]"#)
    }

    @Test("text lines go through the log output: a descriptor that takes nothing never holds up the thread that logs")
    func textStalledDescriptor() async throws {
        try await LogOutputTests.withPipe { reader, writer in
            let output = LogOutput(descriptor: writer, flushInterval: .seconds(3600))
            let handler = LineLogHandler(label: "tollgate.test", level: .info, format: .text, output: output)
            let logger = Logger(label: "tollgate.test") { _ in handler }
            let message = String(repeating: "w", count: 1000)
            // 12 MB of warnings: past the pipe's buffer and everything LogOutput holds. Nobody reads yet.
            try await LogOutputTests.onThread("the logging thread returned") {
                for _ in 0..<12_000 { logger.warning("\(message)") }
            }
            var received: [UInt8] = []
            _ = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(1), "the dropped lines reported") { () -> Bool? in
                LogOutputTests.drain(reader, into: &received)
                return String(decoding: received, as: UTF8.self).contains("log lines dropped") ? true : nil
            }
            #expect(String(decoding: received.prefix(200), as: UTF8.self).contains(" warning tollgate.test: www"))
        }
    }
}

@Suite("JSON text")
struct JSONTextTests {
    @Test("strings are escaped as JSON and read back the same; clean text is copied whole")
    func strings() throws {
        for text in ["", "plain", "quote \" backslash \\ slash /", "\u{0}\u{1}\u{1f}\u{7f}", "\n\r\t", "ünï 🎟 \u{2028}\u{2029} \u{2027}€"] {
            var json = JSONText(capacity: 0)
            json.appendString(text)
            let written = String(decoding: json.bytes, as: UTF8.self)
            #expect(try JSONSerialization.jsonObject(with: Data(json.bytes), options: [.fragmentsAllowed]) as? String == text, "\(written)")
            #expect(!written.contains("\u{7f}") && !written.contains("\u{2028}") && !written.contains("\u{2029}"))
        }
        var json = JSONText(capacity: 0)
        json.appendString("a\u{1}b\u{7f}\u{2028}")
        #expect(String(decoding: json.bytes, as: UTF8.self) == #""a\u0001b\u007f\u2028""#)
    }

    @Test("digits are zero-padded to the width, never cut")
    func digits() {
        var json = JSONText(capacity: 0)
        for (value, width) in [(7, 2), (2026, 4), (5, 3), (123, 2), (0, 1)] {
            json.appendDigits(value, width: width)
            json.append(" ")
        }
        #expect(String(decoding: json.bytes, as: UTF8.self) == "07 2026 005 123 0 ")
    }
}

@Suite("Log output")
struct LogOutputTests {
    /// A fresh file to log to (a file never blocks a writer, as a full pipe would).
    static func file() -> Int32 {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("log-output-\(UUID.random().lowercasedString)").path
        let descriptor = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        precondition(descriptor >= 0)
        unlink(path)
        return descriptor
    }

    /// Everything written to the file so far.
    static func contents(_ descriptor: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 1024 * 1024)
        let count = pread(descriptor, &buffer, buffer.count, 0)
        return String(decoding: buffer[..<max(count, 0)], as: UTF8.self)
    }

    /// Waits until the file holds `expected`.
    static func expectContents(_ descriptor: Int32, _ expected: (String) -> Bool) async throws {
        _ = try await Poll.until(timeout: .seconds(10), interval: .milliseconds(2), "log output written") {
            expected(Self.contents(descriptor)) ? true : nil
        }
    }

    @Test("a warning is written at once, after the lines held before it, in order")
    func immediate() async throws {
        let descriptor = Self.file()
        defer { close(descriptor) }
        let output = LogOutput(descriptor: descriptor, flushInterval: .seconds(3600))  // no timed flush here
        output.write(Array("one\n".utf8), immediately: false)
        output.write(Array("two\n".utf8), immediately: false)
        #expect(Self.contents(descriptor).isEmpty)
        output.write(Array("three\n".utf8), immediately: true)
        try await Self.expectContents(descriptor) { $0 == "one\ntwo\nthree\n" }
    }

    @Test("held lines are written by the flusher, without another line to push them")
    func flusher() async throws {
        let descriptor = Self.file()
        defer { close(descriptor) }
        let output = LogOutput(descriptor: descriptor, flushInterval: .milliseconds(20))
        output.write(Array("held\n".utf8), immediately: false)
        let deadline = ContinuousClock.now + .seconds(5)
        while Self.contents(descriptor).isEmpty, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(Self.contents(descriptor) == "held\n")
    }

    @Test("lines from many threads at once come out whole, none lost, each thread's in order, while the flusher runs")
    func concurrentWriters() async {
        let descriptor = Self.file()
        defer { close(descriptor) }
        let output = LogOutput(descriptor: descriptor, flushInterval: .milliseconds(1))
        let writers = 8, lines = 2_000
        await withTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for index in 0..<lines {
                        output.write(Array("w\(writer) \(index)\n".utf8), immediately: index % 100 == 99)
                    }
                }
            }
        }
        output.flush()
        var next = [Int](repeating: 0, count: writers)
        var malformed = 0
        for line in Self.contents(descriptor).split(separator: "\n") {
            let parts = line.dropFirst().split(separator: " ")
            guard line.first == "w", parts.count == 2, let writer = Int(parts[0]), let index = Int(parts[1]),
                next.indices.contains(writer), next[writer] == index
            else {
                malformed += 1
                continue
            }
            next[writer] += 1
        }
        #expect(malformed == 0)
        #expect(next == [Int](repeating: lines, count: writers))
    }

    @Test("past the batch limit lines are written without waiting for the interval")
    func batchLimit() async throws {
        let descriptor = Self.file()
        defer { close(descriptor) }
        let output = LogOutput(descriptor: descriptor, flushInterval: .seconds(3600))  // no timed flush here
        let line = Array(String(repeating: "x", count: 1023).utf8) + [UInt8(ascii: "\n")]
        for _ in 0..<(LogOutput.batchLimit / line.count - 1) { output.write(line, immediately: false) }
        #expect(Self.contents(descriptor).isEmpty)
        output.write(line, immediately: false)
        try await Self.expectContents(descriptor) { $0.utf8.count == LogOutput.batchLimit }
    }

    /// A pipe that nobody reads until the test drains it; both ends are closed after `body`.
    static func withPipe(_ body: (_ reader: Int32, _ writer: Int32) async throws -> Void) async throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        _ = fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK)
        try await body(ends[0], ends[1])
    }

    /// Reads what the pipe holds now, without waiting, onto `received`.
    static func drain(_ reader: Int32, into received: inout [UInt8]) {
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while case let count = read(reader, &buffer, buffer.count), count > 0 { received.append(contentsOf: buffer[..<count]) }
    }

    /// Runs `work` on a thread of its own (it may block in `write`, which no test task should) and waits,
    /// within a deadline, until it returns.
    static func onThread(_ what: String, _ work: @escaping @Sendable () -> Void) async throws {
        let done = DispatchSemaphore(value: 0)
        Thread {
            work()
            done.signal()
        }.start()
        _ = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(5), what) {
            done.wait(timeout: .now()) == .success ? true : nil
        }
    }

    @Test("at exit, a descriptor that takes nothing holds the process up for the exit limit only")
    func exitLimit() async throws {
        try await Self.withPipe { reader, writer in
            let output = LogOutput(descriptor: writer, flushInterval: .seconds(3600))
            // More than the pipe's buffer, held; nobody reads.
            output.write(Array(repeating: UInt8(ascii: "x"), count: 1 << 20), immediately: false)
            let held = Mutex<Duration?>(nil)
            try await Self.onThread("the exit flush gave up") {
                let started = ContinuousClock.now
                output.flushAtExit()
                held.withLock { $0 = ContinuousClock.now - started }
            }
            // The limit is 2 s; what is past it is a loaded machine's room (a flush without a limit never ends:
            // the poll above catches that).
            let waited = try #require(held.withLock { $0 })
            #expect(waited >= .milliseconds(1900) && waited < .seconds(10), "the exit flush held the process \(waited)")
            // Let the writing thread finish before the pipe closes.
            var received: [UInt8] = []
            _ = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(1), "the held line drained") { () -> Bool? in
                Self.drain(reader, into: &received)
                return received.count == 1 << 20 ? true : nil
            }
        }
    }

    @Test("a descriptor that takes nothing never holds up the thread that logs; what overflows is dropped, counted and reported")
    func stalledDescriptor() async throws {
        try await Self.withPipe { reader, writer in
            let output = LogOutput(descriptor: writer, flushInterval: .seconds(3600))  // warnings wake the writer
            // Warnings, 12 MB of them: past the pipe's buffer and everything LogOutput holds. Nobody reads yet.
            let lines = 12_000
            let line = Array(String(repeating: "w", count: 1023).utf8) + [UInt8(ascii: "\n")]
            try await Self.onThread("the logging thread returned") {
                for _ in 0..<lines { output.write(line, immediately: true) }
            }

            // Then the reader comes back: everything held comes out, and a line with how many were dropped.
            var received: [UInt8] = []
            let report = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(1), "the dropped lines reported") { () -> Int? in
                Self.drain(reader, into: &received)
                let text = String(decoding: received, as: UTF8.self)
                guard let range = text.range(of: #""count":"(\d+)""#, options: .regularExpression) else { return nil }
                return Int(text[range].dropFirst(9).dropLast())
            }
            let written = received.split(separator: UInt8(ascii: "\n")).filter { $0.first == UInt8(ascii: "w") }.count
            #expect(report > 0)
            #expect(written + report == lines, "\(written) written and \(report) dropped of \(lines)")
            #expect(String(decoding: received, as: UTF8.self).contains("log lines dropped"))
        }
    }

    @Test("a non-blocking descriptor that is full for a while loses no line and cuts none: the writer waits for it")
    func nonBlockingDescriptor() async throws {
        try await Self.withPipe { reader, writer in
            _ = fcntl(writer, F_SETFL, fcntl(writer, F_GETFL) | O_NONBLOCK)
            let output = LogOutput(descriptor: writer, flushInterval: .seconds(3600))
            // 1 MB of warnings, far past the pipe's buffer, before anyone reads: the writes meet EAGAIN.
            let lines = 1000
            for index in 0..<lines { output.write(Array(String(format: "w%04d", index).utf8) + Array(repeating: UInt8(ascii: "w"), count: 1018) + [10], immediately: true) }
            var received: [UInt8] = []
            _ = try await Poll.until(timeout: .seconds(20), interval: .milliseconds(1), "every line arrived") { () -> Bool? in
                Self.drain(reader, into: &received)
                return received.count >= lines * 1024 ? true : nil
            }
            let got = received.split(separator: 10, omittingEmptySubsequences: false).dropLast()
            #expect(got.count == lines)
            #expect(got.allSatisfy { $0.count == 1023 })
            #expect(got.map { String(decoding: $0.prefix(5), as: UTF8.self) } == (0..<lines).map { String(format: "w%04d", $0) })
        }
    }
}
