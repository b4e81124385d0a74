import Shared

extension PostgresClient {
    /// Holds one of the pool's connections for `seconds` (`pg_sleep`) from a task of its own, and returns once
    /// it is held (or could not be taken); the task's value says how the hold ended.
    public func holdConnection(seconds: Double) async -> Task<Void, any Error> {
        let (held, holding) = AsyncStream<Void>.makeStream()
        let holder = Task {
            defer { holding.finish() }
            try await self.withConnection { session in
                holding.yield()
                try await session.query("SELECT pg_sleep($1)", [seconds])
            }
        }
        for await _ in held { break }
        return holder
    }
}
