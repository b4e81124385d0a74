import Shared

/// One of a pool's connections, leased by a task of its own and kept idle until ``release()`` (a minute at
/// most, should a failing test never get there): the pool's other callers wait meanwhile, for as long as the
/// test needs, not for a guessed time.
public struct HeldConnection: Sendable {
    fileprivate let holder: Task<Void, any Error>
    fileprivate let gate: AsyncStream<Void>.Continuation

    /// Ends the hold and waits for the lease to end; throws what taking the connection threw.
    public func release() async throws {
        self.gate.finish()
        try await self.holder.value
    }
}

extension PostgresClient {
    /// Leases one of the pool's connections (see ``HeldConnection``), and returns once it is held or could not be taken.
    public func holdConnection() async -> HeldConnection {
        let (held, holding) = AsyncStream<Void>.makeStream()
        let (released, gate) = AsyncStream<Void>.makeStream()
        let holder = Task {
            defer { holding.finish() }
            try await self.withConnection { _ in
                holding.yield()
                await withTaskGroup(of: Void.self) { race in
                    race.addTask { for await _ in released {} }
                    race.addTask { try? await Task.sleep(for: .seconds(60)) }
                    await race.next()
                    race.cancelAll()
                }
            }
        }
        for await _ in held { break }
        return HeldConnection(holder: holder, gate: gate)
    }
}
