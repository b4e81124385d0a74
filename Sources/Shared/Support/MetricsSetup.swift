import Metrics
import Prometheus
import Synchronization

/// Prometheus metrics for a process: one registry, bootstrapped into swift-metrics once.
public enum MetricsSetup {
    private static let shared = Mutex<PrometheusCollectorRegistry?>(nil)

    /// The process's registry; the first call bootstraps swift-metrics with it. `durationBuckets` gives a
    /// timer's histogram buckets by metric name, where the library's (5 ms to 10 s) would put what the metric
    /// measures in `+Inf`.
    public static func bootstrap(durationBuckets: [String: [Duration]] = [:]) -> PrometheusCollectorRegistry {
        self.shared.withLock { shared in
            if let shared { return shared }
            let registry = PrometheusCollectorRegistry()
            var factory = PrometheusMetricsFactory(registry: registry)
            factory.durationHistogramBuckets = durationBuckets
            MetricsSystem.bootstrap(factory)
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
        Self.handle(Self.counters, Self.key(label, dimensions)) { Metrics.Counter(label: label, dimensions: dimensions) }
    }

    public static func timer(_ label: String, _ dimensions: [(String, String)] = []) -> Metrics.Timer {
        Self.handle(Self.timers, Self.key(label, dimensions)) { Metrics.Timer(label: label, dimensions: dimensions) }
    }

    private static func handle<Metric: Sendable>(_ made: borrowing Mutex<[String: Metric]>, _ key: String, make: () -> Metric) -> Metric {
        if let found = made.withLock({ $0[key] }) { return found }
        let metric = make()
        made.withLock { $0[key] = metric }
        return metric
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
