import Foundation

/// Runs blocking work (a `waitpid`, a pipe read to its end) on a thread of its own. Swift's cooperative
/// pool has one thread per core, two here: a test parked on one would stall the other tests of the process.
public func offThePool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}
