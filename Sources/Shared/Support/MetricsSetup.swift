import Metrics
import Prometheus
import Synchronization

/// Prometheus metrics for a process: one registry, bootstrapped into swift-metrics once.
public enum MetricsSetup {
    private static let shared = Mutex<PrometheusCollectorRegistry?>(nil)

    /// The process's registry; the first call bootstraps swift-metrics with it.
    public static func bootstrap() -> PrometheusCollectorRegistry {
        self.shared.withLock { shared in
            if let shared { return shared }
            let registry = PrometheusCollectorRegistry()
            MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
            shared = registry
            return registry
        }
    }
}

/// Counters and timers made once per label and dimensions, then reused: making one asks the metrics
/// backend (a lock, label checks, a registry look-up), which showed in the cost of every request and job.
/// Use it after ``MetricsSetup/bootstrap()``.
public enum MetricHandles {
    private static let counters = Mutex<[String: Metrics.Counter]>([:])
    private static let timers = Mutex<[String: Metrics.Timer]>([:])

    public static func counter(_ label: String, _ dimensions: [(String, String)] = []) -> Metrics.Counter {
        let key = Self.key(label, dimensions)
        if let made = Self.counters.withLock({ $0[key] }) { return made }
        let made = Metrics.Counter(label: label, dimensions: dimensions)
        Self.counters.withLock { $0[key] = made }
        return made
    }

    public static func timer(_ label: String, _ dimensions: [(String, String)] = []) -> Metrics.Timer {
        let key = Self.key(label, dimensions)
        if let made = Self.timers.withLock({ $0[key] }) { return made }
        let made = Metrics.Timer(label: label, dimensions: dimensions)
        Self.timers.withLock { $0[key] = made }
        return made
    }

    private static func key(_ label: String, _ dimensions: [(String, String)]) -> String {
        dimensions.reduce(into: label) { key, pair in
            key += "\u{0}"
            key += pair.0
            key += "\u{0}"
            key += pair.1
        }
    }
}
