import Foundation
import Synchronization

/// Where JSON log lines go: a file descriptor (standard error), written in batches.
///
/// A line at info or below waits in memory and goes out with the others of the next
/// ``flushInterval``: one `write` per batch instead of one per line, which under load was a system
/// call per accepted receipt and per job. A line written `immediately` (warnings and errors) goes out
/// at once, after everything before it, so the lines that explain a failure are never the ones held
/// back. Whatever is held is written at exit.
public final class LogOutput: Sendable {
    /// Standard error, which every executable logs to; a line waits at most 20 ms.
    public static let standardError = LogOutput(descriptor: 2, flushInterval: .milliseconds(20))

    /// Held lines past this size are written at once, whatever their level.
    static let batchLimit = 64 * 1024

    private struct State {
        var pending: [UInt8] = []
        /// The last batch's buffer, emptied, for the next one.
        var spare: [UInt8] = []
        var flusherStarted = false
    }

    private let descriptor: Int32
    /// How long a line may wait.
    let flushInterval: Duration
    /// Held only to swap buffers: a line is never held up by a `write` in progress, so a thread that
    /// logs never waits for one that writes (and for the scheduler to run it again) under load.
    private let state = Mutex(State())
    /// Held while a batch is taken and written: batches go out whole and in order.
    private let writing = Mutex(())

    init(descriptor: Int32, flushInterval: Duration) {
        self.descriptor = descriptor
        self.flushInterval = flushInterval
    }

    /// Queues one line, or writes it now (with everything queued before it) when `immediately` is set.
    public func write(_ line: [UInt8], immediately: Bool) {
        let (writeNow, startFlusher) = self.state.withLock { state -> (Bool, Bool) in
            state.pending.append(contentsOf: line)
            defer { state.flusherStarted = true }
            return (immediately || state.pending.count >= Self.batchLimit, !state.flusherStarted)
        }
        if writeNow { self.flush() }
        if startFlusher { self.startFlusher() }
    }

    /// Writes everything held; returns once every line queued before the call is written.
    public func flush() {
        self.writing.withLock { _ in
            var batch = self.state.withLock { state -> [UInt8] in
                let batch = state.pending
                state.pending = state.spare
                state.spare = []
                return batch
            }
            guard !batch.isEmpty else { return }
            self.writeAll(batch)
            batch.removeAll(keepingCapacity: true)
            self.state.withLock { $0.spare = batch }
        }
    }

    private func writeAll(_ batch: [UInt8]) {
        batch.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Foundation.write(self.descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 {
                    if written < 0, errno == EINTR { continue }
                    return  // Nowhere to log that logging failed; drop the batch rather than spin.
                }
                offset += written
            }
        }
    }

    /// A thread of its own (not a task: logging must not depend on the cooperative pool being free),
    /// started with the first line, plus a flush at exit.
    private func startFlusher() {
        if self === LogOutput.standardError { atexit { LogOutput.standardError.flush() } }
        let thread = Thread { [self] in
            let interval = self.flushInterval.components
            var pause = timespec(tv_sec: Int(interval.seconds), tv_nsec: Int(interval.attoseconds / 1_000_000_000))
            while true {
                nanosleep(&pause, nil)
                self.flush()
            }
        }
        thread.name = "log-flush"
        thread.start()
    }
}
