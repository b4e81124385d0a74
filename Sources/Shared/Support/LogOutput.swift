import Foundation
import Synchronization

/// Where log lines go: a file descriptor (standard error), written in batches by a thread of its own.
///
/// A line at info or below waits in memory and goes out with the others of the next
/// ``flushInterval``: one `write` per batch instead of one per line, which under load was a system
/// call per accepted receipt and per job. A line written `immediately` (warnings and errors) wakes the
/// writer at once, so the lines that explain a failure are never the ones held back. Whatever is held is
/// written at exit, for at most ``exitLimit``.
///
/// The thread that logs never writes, and never waits for a write: when the descriptor stops taking
/// lines (a log collector that stopped reading a full pipe), a `write` blocks the writer thread only,
/// not the event loops or the cooperative pool that log. Lines held past ``holdLimit`` meanwhile are
/// dropped and counted, and a line saying how many goes out once the descriptor takes lines again.
public final class LogOutput: Sendable {
    /// Standard error, which every executable logs to; a line waits at most 20 ms.
    public static let standardError = LogOutput(descriptor: 2, flushInterval: .milliseconds(20))

    /// Held lines past this size wake the writer, whatever their level.
    static let batchLimit = 64 * 1024
    /// Lines beyond this much held (the batch being written included) are dropped until the writer catches up.
    static let holdLimit = 8 * 1024 * 1024
    /// How long an exit waits for the held lines to go out: a descriptor that takes nothing must not hang it.
    static let exitLimit = DispatchTimeInterval.seconds(2)

    private struct State {
        var pending: [UInt8] = []
        /// The last batch's buffer, emptied, for the next one.
        var spare: [UInt8] = []
        var writerStarted = false
        /// The writer has been woken for what is pending and has not taken it yet.
        var woken = false
        /// Lines dropped since the last batch.
        var dropped = 0
        /// The size of the batch being written.
        var writingBytes = 0
    }

    private let descriptor: Int32
    /// How long a line may wait.
    let flushInterval: Duration
    /// Held only to append or swap buffers, never during a `write`.
    private let state = Mutex(State())
    /// Held while a batch is taken and written: batches go out whole and in order.
    private let writing = Mutex(())
    private let wakeup = DispatchSemaphore(value: 0)
    /// The line that reports dropped lines, given their count.
    private let droppedLine: @Sendable (Int) -> [UInt8]

    init(descriptor: Int32, flushInterval: Duration, droppedLine: @escaping @Sendable (Int) -> [UInt8] = LogOutput.droppedLine) {
        self.descriptor = descriptor
        self.flushInterval = flushInterval
        self.droppedLine = droppedLine
    }

    /// Holds one line for the writer, and wakes it now when `immediately` is set (or enough is held).
    public func write(_ line: [UInt8], immediately: Bool) {
        let (wake, startWriter) = self.state.withLock { state -> (Bool, Bool) in
            defer { state.writerStarted = true }
            guard state.writingBytes + state.pending.count + line.count <= Self.holdLimit else {
                state.dropped += 1
                return (false, !state.writerStarted)
            }
            state.pending.append(contentsOf: line)
            let wake = !state.woken && (immediately || state.pending.count >= Self.batchLimit)
            if wake { state.woken = true }
            return (wake, !state.writerStarted)
        }
        if startWriter { self.startWriter() }
        if wake { self.wakeup.signal() }
    }

    /// Writes everything held, on the calling thread; returns once every line queued before the call is
    /// written (or the descriptor refused it). For the writer thread, the exit, and tests.
    public func flush() {
        self.writing.withLock { _ in
            var (batch, dropped) = self.state.withLock { state -> ([UInt8], Int) in
                let taken = (state.pending, state.dropped)
                state.pending = state.spare
                state.spare = []
                state.woken = false
                state.dropped = 0
                state.writingBytes = taken.0.count
                return taken
            }
            if dropped > 0 { batch.append(contentsOf: self.droppedLine(dropped)) }
            guard !batch.isEmpty else { return }
            let lost = self.writeAll(batch)
            batch.removeAll(keepingCapacity: true)
            self.state.withLock { state in
                state.spare = batch
                state.writingBytes = 0
                state.dropped += lost
            }
        }
    }

    /// Writes `batch` (whole lines); returns how many lines did not go out. A descriptor that is full (a
    /// non-blocking one answers EAGAIN) is waited for, as a blocking one would be: only this thread waits.
    /// Any other failure drops the rest of the batch, counted; a line cut by it is ended first, when the
    /// descriptor still takes that, so the next batch does not run on from half a line.
    private func writeAll(_ batch: [UInt8]) -> Int {
        batch.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Foundation.write(self.descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written > 0 {
                    offset += written
                    continue
                }
                let failure = errno
                if written < 0, failure == EINTR { continue }
                if written < 0, failure == EAGAIN || failure == EWOULDBLOCK {
                    var ready = pollfd(fd: self.descriptor, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&ready, 1, 1000)
                    continue
                }
                // Nowhere to log that logging failed: drop the rest rather than spin.
                let rest = bytes[offset...]
                if offset > 0, bytes[offset - 1] != 10 {
                    var newline: UInt8 = 10
                    _ = Foundation.write(self.descriptor, &newline, 1)
                }
                return rest.reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
            }
            return 0
        }
    }

    /// A thread of its own (not a task: logging must not depend on the cooperative pool being free),
    /// started with the first line, plus a flush at exit.
    private func startWriter() {
        if self === LogOutput.standardError { atexit { LogOutput.standardError.flushAtExit() } }
        let interval = self.flushInterval.components
        let nanoseconds = UInt64(interval.seconds) * 1_000_000_000 + UInt64(interval.attoseconds / 1_000_000_000)
        let thread = Thread { [self] in
            while true {
                _ = self.wakeup.wait(timeout: .now() + .nanoseconds(Int(min(nanoseconds, UInt64(Int.max)))))
                self.flush()
            }
        }
        thread.name = "log-writer"
        thread.start()
    }

    /// ``flush()`` on a thread of its own, waited for at most ``exitLimit``.
    func flushAtExit() {
        let done = DispatchSemaphore(value: 0)
        Thread { [self] in
            self.flush()
            done.signal()
        }.start()
        _ = done.wait(timeout: .now() + Self.exitLimit)
    }

    /// The default report of dropped lines: a log line in the process's format, as the handler writes them.
    @Sendable static func droppedLine(_ count: Int) -> [UInt8] {
        LineLogHandler(label: "tollgate.log", level: .warning, format: LoggingSetup.format).line(
            level: .warning, message: "log lines dropped: the log output took none for a while", metadata: ["count": "\(count)"]
        )
    }
}
