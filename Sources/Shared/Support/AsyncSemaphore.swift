import Synchronization

/// Counts free slots for concurrent work; `acquire` suspends (without blocking a thread) until one is free.
public final class AsyncSemaphore: Sendable {
    private struct State {
        var available: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Mutex<State>

    /// Creates a semaphore with `slots` free slots.
    public init(slots: Int) {
        self.state = Mutex(State(available: slots))
    }

    /// Takes one slot, waiting for a release when none is free.
    public func acquire() async {
        await withCheckedContinuation { continuation in
            let acquired = self.state.withLock { state -> Bool in
                if state.available > 0 {
                    state.available -= 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    /// Takes up to `count` free slots without waiting; returns how many it took.
    public func tryAcquire(upTo count: Int) -> Int {
        self.state.withLock { state in
            let taken = min(max(count, 0), state.available)
            state.available -= taken
            return taken
        }
    }

    /// Returns `count` slots, waking waiters first.
    public func release(_ count: Int = 1) {
        let woken = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
            var woken: [CheckedContinuation<Void, Never>] = []
            var remaining = count
            while remaining > 0, !state.waiters.isEmpty {
                woken.append(state.waiters.removeFirst())
                remaining -= 1
            }
            state.available += remaining
            return woken
        }
        for waiter in woken { waiter.resume() }
    }

    /// Free slots right now (for metrics).
    public var available: Int { self.state.withLock { $0.available } }
}
