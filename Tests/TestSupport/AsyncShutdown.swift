import Shared

/// A client that must be shut down when a test is done with it.
public protocol AsyncShutdown: Sendable {
    func shutdown() async
}

extension RedisClient: AsyncShutdown {}
extension PostgresClient: AsyncShutdown {}
extension DedicatedRedis: AsyncShutdown {}
extension DedicatedPostgres: AsyncShutdown {}

extension TestEnvironment {
    /// Runs `body`, then shuts the clients down whether it returned or threw.
    public static func using<T>(_ clients: any AsyncShutdown..., body: () async throws -> T) async throws -> T {
        do {
            let value = try await body()
            for client in clients { await client.shutdown() }
            return value
        } catch {
            for client in clients { await client.shutdown() }
            throw error
        }
    }
}
