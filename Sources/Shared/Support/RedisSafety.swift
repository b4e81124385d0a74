import Logging

/// Warns when Redis is configured so that accepted receipts could be lost.
public enum RedisSafety {
    /// Logs a warning when AOF is off or eviction is allowed. Never fails: some managed Redis services
    /// refuse `CONFIG GET`, and the warning is advice, not a precondition.
    public static func warnIfUnsafe(redis: RedisClient, logger: Logger) async {
        guard let appendonly = try? await redis.send("CONFIG", "GET", "appendonly").array,
            let policy = try? await redis.send("CONFIG", "GET", "maxmemory-policy").array
        else { return }
        if appendonly.count == 2, appendonly[1].string != "yes" {
            logger.warning("Redis runs with appendonly=no: accepted receipts are lost if Redis restarts; enable AOF")
        }
        if policy.count == 2, let value = policy[1].string, value != "noeviction" {
            logger.warning("Redis may evict keys under memory pressure; set maxmemory-policy noeviction", metadata: ["maxmemory-policy": "\(value)"])
        }
    }
}
